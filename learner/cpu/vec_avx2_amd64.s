#include "textflag.h"

// AVX2 loops for the element-wise kernels, for CPUs without AVX-512 (vec.go
// has the pure-Go versions they are tested against, vec_amd64.s the AVX-512
// ones they follow step for step). Each processes 8 floats per step and
// finishes with one masked step (VMASKMOVPS) for the n%8 tail.
//
// exp(x) is the AVX-512 loops' algorithm: x clamped to [-104, 88.8] (NaN
// kept), x = k·ln2 + r, e^r by its degree-6 Taylor polynomial, then 2^k. AVX2
// has no VSCALEFPS, so 2^k is applied as 2^(k>>1) · 2^(k-(k>>1)), two powers
// built in the exponent bits, each a normal number for k in [-150, 128]: the
// first product is exact and the second rounds once, as VSCALEFPS does.
//
// Constants are 8-lane vectors in read-only memory; Y14 holds a tail's mask,
// Y15 (and Y13) accumulators, Y0..Y12 temporaries.

DATA log2e<>+0(SB)/4, $0x3fb8aa3b
DATA log2e<>+4(SB)/4, $0x3fb8aa3b
DATA log2e<>+8(SB)/4, $0x3fb8aa3b
DATA log2e<>+12(SB)/4, $0x3fb8aa3b
DATA log2e<>+16(SB)/4, $0x3fb8aa3b
DATA log2e<>+20(SB)/4, $0x3fb8aa3b
DATA log2e<>+24(SB)/4, $0x3fb8aa3b
DATA log2e<>+28(SB)/4, $0x3fb8aa3b
GLOBL log2e<>(SB), RODATA|NOPTR, $32
DATA ln2hi<>+0(SB)/4, $0x3f317200
DATA ln2hi<>+4(SB)/4, $0x3f317200
DATA ln2hi<>+8(SB)/4, $0x3f317200
DATA ln2hi<>+12(SB)/4, $0x3f317200
DATA ln2hi<>+16(SB)/4, $0x3f317200
DATA ln2hi<>+20(SB)/4, $0x3f317200
DATA ln2hi<>+24(SB)/4, $0x3f317200
DATA ln2hi<>+28(SB)/4, $0x3f317200
GLOBL ln2hi<>(SB), RODATA|NOPTR, $32
DATA ln2lo<>+0(SB)/4, $0x35bfbe8e
DATA ln2lo<>+4(SB)/4, $0x35bfbe8e
DATA ln2lo<>+8(SB)/4, $0x35bfbe8e
DATA ln2lo<>+12(SB)/4, $0x35bfbe8e
DATA ln2lo<>+16(SB)/4, $0x35bfbe8e
DATA ln2lo<>+20(SB)/4, $0x35bfbe8e
DATA ln2lo<>+24(SB)/4, $0x35bfbe8e
DATA ln2lo<>+28(SB)/4, $0x35bfbe8e
GLOBL ln2lo<>(SB), RODATA|NOPTR, $32
DATA c6<>+0(SB)/4, $0x3ab60b61
DATA c6<>+4(SB)/4, $0x3ab60b61
DATA c6<>+8(SB)/4, $0x3ab60b61
DATA c6<>+12(SB)/4, $0x3ab60b61
DATA c6<>+16(SB)/4, $0x3ab60b61
DATA c6<>+20(SB)/4, $0x3ab60b61
DATA c6<>+24(SB)/4, $0x3ab60b61
DATA c6<>+28(SB)/4, $0x3ab60b61
GLOBL c6<>(SB), RODATA|NOPTR, $32
DATA c5<>+0(SB)/4, $0x3c088889
DATA c5<>+4(SB)/4, $0x3c088889
DATA c5<>+8(SB)/4, $0x3c088889
DATA c5<>+12(SB)/4, $0x3c088889
DATA c5<>+16(SB)/4, $0x3c088889
DATA c5<>+20(SB)/4, $0x3c088889
DATA c5<>+24(SB)/4, $0x3c088889
DATA c5<>+28(SB)/4, $0x3c088889
GLOBL c5<>(SB), RODATA|NOPTR, $32
DATA c4<>+0(SB)/4, $0x3d2aaaab
DATA c4<>+4(SB)/4, $0x3d2aaaab
DATA c4<>+8(SB)/4, $0x3d2aaaab
DATA c4<>+12(SB)/4, $0x3d2aaaab
DATA c4<>+16(SB)/4, $0x3d2aaaab
DATA c4<>+20(SB)/4, $0x3d2aaaab
DATA c4<>+24(SB)/4, $0x3d2aaaab
DATA c4<>+28(SB)/4, $0x3d2aaaab
GLOBL c4<>(SB), RODATA|NOPTR, $32
DATA c3<>+0(SB)/4, $0x3e2aaaab
DATA c3<>+4(SB)/4, $0x3e2aaaab
DATA c3<>+8(SB)/4, $0x3e2aaaab
DATA c3<>+12(SB)/4, $0x3e2aaaab
DATA c3<>+16(SB)/4, $0x3e2aaaab
DATA c3<>+20(SB)/4, $0x3e2aaaab
DATA c3<>+24(SB)/4, $0x3e2aaaab
DATA c3<>+28(SB)/4, $0x3e2aaaab
GLOBL c3<>(SB), RODATA|NOPTR, $32
DATA half<>+0(SB)/4, $0x3f000000
DATA half<>+4(SB)/4, $0x3f000000
DATA half<>+8(SB)/4, $0x3f000000
DATA half<>+12(SB)/4, $0x3f000000
DATA half<>+16(SB)/4, $0x3f000000
DATA half<>+20(SB)/4, $0x3f000000
DATA half<>+24(SB)/4, $0x3f000000
DATA half<>+28(SB)/4, $0x3f000000
GLOBL half<>(SB), RODATA|NOPTR, $32
DATA one<>+0(SB)/4, $0x3f800000
DATA one<>+4(SB)/4, $0x3f800000
DATA one<>+8(SB)/4, $0x3f800000
DATA one<>+12(SB)/4, $0x3f800000
DATA one<>+16(SB)/4, $0x3f800000
DATA one<>+20(SB)/4, $0x3f800000
DATA one<>+24(SB)/4, $0x3f800000
DATA one<>+28(SB)/4, $0x3f800000
GLOBL one<>(SB), RODATA|NOPTR, $32
DATA lo<>+0(SB)/4, $0xc2d00000
DATA lo<>+4(SB)/4, $0xc2d00000
DATA lo<>+8(SB)/4, $0xc2d00000
DATA lo<>+12(SB)/4, $0xc2d00000
DATA lo<>+16(SB)/4, $0xc2d00000
DATA lo<>+20(SB)/4, $0xc2d00000
DATA lo<>+24(SB)/4, $0xc2d00000
DATA lo<>+28(SB)/4, $0xc2d00000
GLOBL lo<>(SB), RODATA|NOPTR, $32
DATA hi<>+0(SB)/4, $0x42b1999a
DATA hi<>+4(SB)/4, $0x42b1999a
DATA hi<>+8(SB)/4, $0x42b1999a
DATA hi<>+12(SB)/4, $0x42b1999a
DATA hi<>+16(SB)/4, $0x42b1999a
DATA hi<>+20(SB)/4, $0x42b1999a
DATA hi<>+24(SB)/4, $0x42b1999a
DATA hi<>+28(SB)/4, $0x42b1999a
GLOBL hi<>(SB), RODATA|NOPTR, $32
DATA bias<>+0(SB)/4, $0x7f
DATA bias<>+4(SB)/4, $0x7f
DATA bias<>+8(SB)/4, $0x7f
DATA bias<>+12(SB)/4, $0x7f
DATA bias<>+16(SB)/4, $0x7f
DATA bias<>+20(SB)/4, $0x7f
DATA bias<>+24(SB)/4, $0x7f
DATA bias<>+28(SB)/4, $0x7f
GLOBL bias<>(SB), RODATA|NOPTR, $32
DATA ninf<>+0(SB)/4, $0xff800000
DATA ninf<>+4(SB)/4, $0xff800000
DATA ninf<>+8(SB)/4, $0xff800000
DATA ninf<>+12(SB)/4, $0xff800000
DATA ninf<>+16(SB)/4, $0xff800000
DATA ninf<>+20(SB)/4, $0xff800000
DATA ninf<>+24(SB)/4, $0xff800000
DATA ninf<>+28(SB)/4, $0xff800000
GLOBL ninf<>(SB), RODATA|NOPTR, $32
DATA tailmask<>+0(SB)/4, $0xffffffff
DATA tailmask<>+4(SB)/4, $0xffffffff
DATA tailmask<>+8(SB)/4, $0xffffffff
DATA tailmask<>+12(SB)/4, $0xffffffff
DATA tailmask<>+16(SB)/4, $0xffffffff
DATA tailmask<>+20(SB)/4, $0xffffffff
DATA tailmask<>+24(SB)/4, $0xffffffff
DATA tailmask<>+28(SB)/4, $0xffffffff
DATA tailmask<>+32(SB)/4, $0x0
DATA tailmask<>+36(SB)/4, $0x0
DATA tailmask<>+40(SB)/4, $0x0
DATA tailmask<>+44(SB)/4, $0x0
DATA tailmask<>+48(SB)/4, $0x0
DATA tailmask<>+52(SB)/4, $0x0
DATA tailmask<>+56(SB)/4, $0x0
DATA tailmask<>+60(SB)/4, $0x0
GLOBL tailmask<>(SB), RODATA|NOPTR, $64

// EXPY sets X = exp(X), using N and R as temporaries.
#define EXPY(X, N, R) \
	VMOVUPS      lo<>(SB), N;     \
	VMAXPS       X, N, X;         \
	VMOVUPS      hi<>(SB), N;     \
	VMINPS       X, N, X;         \
	VMULPS       log2e<>(SB), X, N; \
	VADDPS       half<>(SB), N, N; \
	VROUNDPS     $9, N, N;        \
	VMOVAPS      X, R;            \
	VFNMADD231PS ln2hi<>(SB), N, R; \
	VFNMADD231PS ln2lo<>(SB), N, R; \
	VMOVUPS      c6<>(SB), X;     \
	VFMADD213PS  c5<>(SB), R, X;  \
	VFMADD213PS  c4<>(SB), R, X;  \
	VFMADD213PS  c3<>(SB), R, X;  \
	VFMADD213PS  half<>(SB), R, X; \
	VFMADD213PS  one<>(SB), R, X; \
	VFMADD213PS  one<>(SB), R, X; \
	VCVTPS2DQ    N, N;            \
	VPSRAD       $1, N, R;        \
	VPSUBD       R, N, N;         \
	VPADDD       bias<>(SB), R, R; \
	VPSLLD       $23, R, R;       \
	VMULPS       R, X, X;         \
	VPADDD       bias<>(SB), N, N; \
	VPSLLD       $23, N, N;       \
	VMULPS       N, X, X

// TAILMASK sets Y14's low CX lanes (1 ≤ CX ≤ 7) to all ones, the rest to
// 0, from the 8 ones and 8 zeros at tailmask; CX and AX are clobbered.
#define TAILMASK \
	SHLQ    $2, CX;                   \
	LEAQ    tailmask<>+32(SB), AX;    \
	SUBQ    CX, AX;                   \
	VMOVUPS (AX), Y14

// HSUM leaves the sum of Y15's lanes in X15 (Y12 is clobbered).
#define HSUM(OP) \
	VEXTRACTF128 $1, Y15, X12; \
	OP           X12, X15, X15; \
	VPERMILPS    $0x4e, X15, X12; \
	OP           X12, X15, X15; \
	VPERMILPS    $0xb1, X15, X12; \
	OP           X12, X15, X15


// func expSubAVX2(dst, src *float32, n int, m float32) (sum float32)
TEXT ·expSubAVX2(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Y11
	VXORPS Y15, Y15, Y15
esloop:
	CMPQ CX, $8
	JLT  estail
	VMOVUPS (SI), Y0
	VSUBPS  Y11, Y0, Y0
	EXPY(Y0, Y1, Y2)
	VMOVUPS Y0, (DI)
	VADDPS  Y0, Y15, Y15
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     esloop
estail:
	TESTQ CX, CX
	JZ    esdone
	TAILMASK
	VMASKMOVPS (SI), Y14, Y0
	VSUBPS     Y11, Y0, Y0
	EXPY(Y0, Y1, Y2)
	VMASKMOVPS Y0, Y14, (DI)
	VANDPS     Y14, Y0, Y0
	VADDPS     Y0, Y15, Y15
esdone:
	HSUM(VADDPS)
	VMOVSS X15, sum+32(FP)
	VZEROUPPER
	RET

// func softmaxGradAVX2(p, dp *float32, n int, l, d float32)
// p = exp(p - l); dp = p * (dp - d).
TEXT ·softmaxGradAVX2(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), DI
	MOVQ dp+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS l+24(FP), Y11
	VBROADCASTSS d+28(FP), Y10
sgloop:
	CMPQ CX, $8
	JLT  sgtail
	VMOVUPS (DI), Y0
	VSUBPS  Y11, Y0, Y0
	EXPY(Y0, Y1, Y2)
	VMOVUPS Y0, (DI)
	VMOVUPS (SI), Y3
	VSUBPS  Y10, Y3, Y3
	VMULPS  Y0, Y3, Y3
	VMOVUPS Y3, (SI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     sgloop
sgtail:
	TESTQ CX, CX
	JZ    sgdone
	TAILMASK
	VMASKMOVPS (DI), Y14, Y0
	VSUBPS     Y11, Y0, Y0
	EXPY(Y0, Y1, Y2)
	VMASKMOVPS Y0, Y14, (DI)
	VMASKMOVPS (SI), Y14, Y3
	VSUBPS     Y10, Y3, Y3
	VMULPS     Y0, Y3, Y3
	VMASKMOVPS Y3, Y14, (SI)
sgdone:
	VZEROUPPER
	RET

// func swigluAVX2(out, gate, up *float32, n int)
// out = g * sigmoid(g) * u with sigmoid(g) = 1/(1 + exp(-g)).
TEXT ·swigluAVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	VXORPS  Y11, Y11, Y11
	VMOVUPS one<>(SB), Y10
swloop:
	CMPQ CX, $8
	JLT  swtail
	VMOVUPS (SI), Y3
	VSUBPS  Y3, Y11, Y0
	EXPY(Y0, Y1, Y2)
	VADDPS  Y10, Y0, Y0
	VDIVPS  Y0, Y10, Y0
	VMULPS  Y0, Y3, Y0
	VMULPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	ADDQ    $32, DX
	SUBQ    $8, CX
	JMP     swloop
swtail:
	TESTQ CX, CX
	JZ    swdone
	TAILMASK
	VMASKMOVPS (SI), Y14, Y3
	VMASKMOVPS (DX), Y14, Y4
	VSUBPS     Y3, Y11, Y0
	EXPY(Y0, Y1, Y2)
	VADDPS     Y10, Y0, Y0
	VDIVPS     Y0, Y10, Y0
	VMULPS     Y0, Y3, Y0
	VMULPS     Y4, Y0, Y0
	VMASKMOVPS Y0, Y14, (DI)
swdone:
	VZEROUPPER
	RET

// func swigluBackAVX2(dg, du, dout, gate, up *float32, n int)
// s = sigmoid(g); du = dout*g*s; dg = dout*u*s*(1 + g*(1-s)).
TEXT ·swigluBackAVX2(SB), NOSPLIT, $0-48
	MOVQ dg+0(FP), DI
	MOVQ du+8(FP), R8
	MOVQ dout+16(FP), R9
	MOVQ gate+24(FP), SI
	MOVQ up+32(FP), DX
	MOVQ n+40(FP), CX
	VXORPS  Y11, Y11, Y11
	VMOVUPS one<>(SB), Y10
sbloop:
	CMPQ CX, $8
	JLT  sbtail
	VMOVUPS (SI), Y3
	VMOVUPS (DX), Y4
	VMOVUPS (R9), Y5
	VSUBPS  Y3, Y11, Y0
	EXPY(Y0, Y1, Y2)
	VADDPS  Y10, Y0, Y0
	VDIVPS  Y0, Y10, Y0     // s
	VMULPS  Y3, Y5, Y6      // dout*g
	VMULPS  Y0, Y6, Y6      // *s
	VMOVUPS Y6, (R8)
	VMULPS  Y4, Y5, Y7      // dout*u
	VMULPS  Y0, Y7, Y7      // *s
	VSUBPS  Y0, Y10, Y8     // 1-s
	VFMADD213PS Y10, Y3, Y8 // g*(1-s) + 1
	VMULPS  Y8, Y7, Y7
	VMOVUPS Y7, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	ADDQ    $32, DX
	ADDQ    $32, R8
	ADDQ    $32, R9
	SUBQ    $8, CX
	JMP     sbloop
sbtail:
	TESTQ CX, CX
	JZ    sbdone
	TAILMASK
	VMASKMOVPS (SI), Y14, Y3
	VMASKMOVPS (DX), Y14, Y4
	VMASKMOVPS (R9), Y14, Y5
	VSUBPS  Y3, Y11, Y0
	EXPY(Y0, Y1, Y2)
	VADDPS  Y10, Y0, Y0
	VDIVPS  Y0, Y10, Y0
	VMULPS  Y3, Y5, Y6
	VMULPS  Y0, Y6, Y6
	VMASKMOVPS Y6, Y14, (R8)
	VMULPS  Y4, Y5, Y7
	VMULPS  Y0, Y7, Y7
	VSUBPS  Y0, Y10, Y8
	VFMADD213PS Y10, Y3, Y8
	VMULPS  Y8, Y7, Y7
	VMASKMOVPS Y7, Y14, (DI)
sbdone:
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int) float32
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS ninf<>(SB), Y15
mxloop:
	CMPQ CX, $8
	JLT  mxtail
	VMAXPS (SI), Y15, Y15
	ADDQ   $32, SI
	SUBQ   $8, CX
	JMP    mxloop
mxtail:
	TESTQ CX, CX
	JZ    mxdone
	TAILMASK
	VMASKMOVPS (SI), Y14, Y0
	VMOVUPS    ninf<>(SB), Y1
	VBLENDVPS  Y14, Y0, Y1, Y0 // the loaded lanes, -Inf past n
	VMAXPS     Y0, Y15, Y15
mxdone:
	HSUM(VMAXPS)
	VMOVSS X15, ret+16(FP)
	VZEROUPPER
	RET

// func scaleAVX2(x *float32, n int, a float32)
TEXT ·scaleAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS a+16(FP), Y1
scloop:
	CMPQ CX, $8
	JLT  sctail
	VMULPS  (SI), Y1, Y0
	VMOVUPS Y0, (SI)
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     scloop
sctail:
	TESTQ CX, CX
	JZ    scdone
	TAILMASK
	VMASKMOVPS (SI), Y14, Y0
	VMULPS     Y1, Y0, Y0
	VMASKMOVPS Y0, Y14, (SI)
scdone:
	VZEROUPPER
	RET

// func dotAVX2(a, b *float32, n int) float32
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DX
	MOVQ n+16(FP), CX
	VXORPS Y15, Y15, Y15
dtloop:
	CMPQ CX, $8
	JLT  dttail
	VMOVUPS     (SI), Y0
	VFMADD231PS (DX), Y0, Y15
	ADDQ        $32, SI
	ADDQ        $32, DX
	SUBQ        $8, CX
	JMP         dtloop
dttail:
	TESTQ CX, CX
	JZ    dtdone
	TAILMASK
	VMASKMOVPS  (SI), Y14, Y0
	VMASKMOVPS  (DX), Y14, Y1
	VFMADD231PS Y1, Y0, Y15
dtdone:
	HSUM(VADDPS)
	VMOVSS X15, ret+24(FP)
	VZEROUPPER
	RET

// func rmsScaleAVX2(out, x, w *float32, n int, s float32)
// out = x * s * w.
TEXT ·rmsScaleAVX2(SB), NOSPLIT, $0-36
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS s+32(FP), Y1
rsloop:
	CMPQ CX, $8
	JLT  rstail
	VMULPS  (SI), Y1, Y0
	VMULPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     rsloop
rstail:
	TESTQ CX, CX
	JZ    rsdone
	TAILMASK
	VMASKMOVPS (SI), Y14, Y0
	VMASKMOVPS (DX), Y14, Y2
	VMULPS     Y1, Y0, Y0
	VMULPS     Y2, Y0, Y0
	VMASKMOVPS Y0, Y14, (DI)
rsdone:
	VZEROUPPER
	RET

// func dot3AVX2(a, b, c *float32, n int) float32
// sum of a*b*c.
TEXT ·dot3AVX2(SB), NOSPLIT, $0-36
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DX
	MOVQ c+16(FP), DI
	MOVQ n+24(FP), CX
	VXORPS Y15, Y15, Y15
d3loop:
	CMPQ CX, $8
	JLT  d3tail
	VMOVUPS     (SI), Y0
	VMULPS      (DX), Y0, Y0
	VFMADD231PS (DI), Y0, Y15
	ADDQ        $32, SI
	ADDQ        $32, DX
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         d3loop
d3tail:
	TESTQ CX, CX
	JZ    d3done
	TAILMASK
	VMASKMOVPS  (SI), Y14, Y0
	VMASKMOVPS  (DX), Y14, Y1
	VMASKMOVPS  (DI), Y14, Y2
	VMULPS      Y1, Y0, Y0
	VFMADD231PS Y2, Y0, Y15
d3done:
	HSUM(VADDPS)
	VMOVSS X15, ret+32(FP)
	VZEROUPPER
	RET

// func rmsBackAVX2(dx, part, dy, x, w *float32, n int, s, c float32)
// dx += s*(dy*w - x*c); part += dy*x*s.
TEXT ·rmsBackAVX2(SB), NOSPLIT, $0-56
	MOVQ dx+0(FP), DI
	MOVQ part+8(FP), R8
	MOVQ dy+16(FP), R9
	MOVQ x+24(FP), SI
	MOVQ w+32(FP), DX
	MOVQ n+40(FP), CX
	VBROADCASTSS s+48(FP), Y10
	VBROADCASTSS c+52(FP), Y11
rbloop:
	CMPQ CX, $8
	JLT  rbtail
	VMOVUPS (R9), Y0         // dy
	VMOVUPS (SI), Y1         // x
	VMULPS  (DX), Y0, Y2     // dy*w
	VMULPS  Y11, Y1, Y3      // x*c
	VSUBPS  Y3, Y2, Y2       // dy*w - x*c
	VMOVUPS (DI), Y4
	VFMADD231PS Y10, Y2, Y4  // dx += s*(...)
	VMOVUPS Y4, (DI)
	VMULPS  Y1, Y0, Y5       // dy*x
	VMOVUPS (R8), Y6
	VFMADD231PS Y10, Y5, Y6  // part += dy*x*s
	VMOVUPS Y6, (R8)
	ADDQ    $32, DI
	ADDQ    $32, R8
	ADDQ    $32, R9
	ADDQ    $32, SI
	ADDQ    $32, DX
	SUBQ    $8, CX
	JMP     rbloop
rbtail:
	TESTQ CX, CX
	JZ    rbdone
	TAILMASK
	VMASKMOVPS (R9), Y14, Y0
	VMASKMOVPS (SI), Y14, Y1
	VMASKMOVPS (DX), Y14, Y7
	VMULPS  Y7, Y0, Y2
	VMULPS  Y11, Y1, Y3
	VSUBPS  Y3, Y2, Y2
	VMASKMOVPS (DI), Y14, Y4
	VFMADD231PS Y10, Y2, Y4
	VMASKMOVPS Y4, Y14, (DI)
	VMULPS  Y1, Y0, Y5
	VMASKMOVPS (R8), Y14, Y6
	VFMADD231PS Y10, Y5, Y6
	VMASKMOVPS Y6, Y14, (R8)
rbdone:
	VZEROUPPER
	RET

// func expSubDotAVX2(dst, src *float32, n int, m float32) (sum, dot float32)
// dst = exp(src - m); sum = Σ dst; dot = Σ dst*(src - m).
TEXT ·expSubDotAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Y11
	VXORPS Y15, Y15, Y15
	VXORPS Y13, Y13, Y13
edloop:
	CMPQ CX, $8
	JLT  edtail
	VMOVUPS (SI), Y0
	VSUBPS  Y11, Y0, Y0
	VMOVAPS Y0, Y3
	EXPY(Y0, Y1, Y2)
	VMOVUPS Y0, (DI)
	VADDPS  Y0, Y15, Y15
	VFMADD231PS Y3, Y0, Y13
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     edloop
edtail:
	TESTQ CX, CX
	JZ    eddone
	TAILMASK
	VMASKMOVPS (SI), Y14, Y0
	VSUBPS     Y11, Y0, Y0
	VMOVAPS    Y0, Y3
	EXPY(Y0, Y1, Y2)
	VMASKMOVPS Y0, Y14, (DI)
	VANDPS     Y14, Y0, Y0
	VADDPS     Y0, Y15, Y15
	VFMADD231PS Y3, Y0, Y13
eddone:
	HSUM(VADDPS)
	VMOVSS X15, sum+32(FP)
	VMOVAPS Y13, Y15
	HSUM(VADDPS)
	VMOVSS X15, dot+36(FP)
	VZEROUPPER
	RET

// func ropeAVX2(x, cos, sin *float32, heads, half int, sign float32)
// Rotates each of heads consecutive vectors of 2*half floats:
// (a, b) → (a·c − b·s, b·c + a·s) with s = sign·sin.
TEXT ·ropeAVX2(SB), NOSPLIT, $0-44
	MOVQ x+0(FP), DI
	MOVQ cos+8(FP), R8
	MOVQ sin+16(FP), R9
	MOVQ heads+24(FP), R10
	MOVQ half+32(FP), R11
	VBROADCASTSS sign+40(FP), Y9
	MOVQ R11, R12
	SHLQ $2, R12
rphead:
	TESTQ R10, R10
	JZ    rpdone
	MOVQ  DI, SI
	LEAQ  (DI)(R12*1), DX
	MOVQ  R8, R13
	MOVQ  R9, BX
	MOVQ  R11, CX
rploop:
	CMPQ CX, $8
	JLT  rptail
	VMOVUPS      (R13), Y0
	VMULPS       (BX), Y9, Y1
	VMOVUPS      (SI), Y2
	VMOVUPS      (DX), Y3
	VMULPS       Y0, Y2, Y4
	VFNMADD231PS Y1, Y3, Y4
	VMULPS       Y0, Y3, Y5
	VFMADD231PS  Y1, Y2, Y5
	VMOVUPS      Y4, (SI)
	VMOVUPS      Y5, (DX)
	ADDQ         $32, SI
	ADDQ         $32, DX
	ADDQ         $32, R13
	ADDQ         $32, BX
	SUBQ         $8, CX
	JMP          rploop
rptail:
	TESTQ CX, CX
	JZ    rpnext
	TAILMASK
	VMASKMOVPS   (R13), Y14, Y0
	VMASKMOVPS   (BX), Y14, Y1
	VMULPS       Y9, Y1, Y1
	VMASKMOVPS   (SI), Y14, Y2
	VMASKMOVPS   (DX), Y14, Y3
	VMULPS       Y0, Y2, Y4
	VFNMADD231PS Y1, Y3, Y4
	VMULPS       Y0, Y3, Y5
	VFMADD231PS  Y1, Y2, Y5
	VMASKMOVPS   Y4, Y14, (SI)
	VMASKMOVPS   Y5, Y14, (DX)
rpnext:
	LEAQ (DI)(R12*2), DI
	DECQ R10
	JMP  rphead
rpdone:
	VZEROUPPER
	RET

// func addToAVX2(dst, src *float32, n int)
// dst += src.
TEXT ·addToAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
adloop:
	CMPQ CX, $16
	JLT  adone
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VADDPS  (SI), Y0, Y0
	VADDPS  32(SI), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     adloop
adone:
	CMPQ CX, $8
	JLT  adtail
	VMOVUPS (DI), Y0
	VADDPS  (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
adtail:
	TESTQ CX, CX
	JZ    addone
	TAILMASK
	VMASKMOVPS (DI), Y14, Y0
	VMASKMOVPS (SI), Y14, Y1
	VADDPS     Y1, Y0, Y0
	VMASKMOVPS Y0, Y14, (DI)
addone:
	VZEROUPPER
	RET
