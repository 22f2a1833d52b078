#include "textflag.h"

// AVX-512 loops for the element-wise kernels (vec.go has the pure-Go
// versions they are tested against). Each processes 16 floats per step and
// finishes with one masked step for the n%16 tail.
//
// exp(x) follows expf: x = k·ln2 + r, e^r by its degree-6 Taylor polynomial
// (Horner, with FMA), 2^k applied by VSCALEFPS, which also gives Inf and 0
// at the ends of the range. x is first clamped to [-104, 88.8] (NaN kept).
//
// Constants live in Z16..Z27 (EXPCONSTS); temporaries use Z0..Z15.

#define EXPCONSTS \
	MOVL $0x3fb8aa3b, AX; VPBROADCASTD AX, Z16; \
	MOVL $0x3f317200, AX; VPBROADCASTD AX, Z18; \
	MOVL $0x35bfbe8e, AX; VPBROADCASTD AX, Z19; \
	MOVL $0x3ab60b61, AX; VPBROADCASTD AX, Z20; \
	MOVL $0x3c088889, AX; VPBROADCASTD AX, Z21; \
	MOVL $0x3d2aaaab, AX; VPBROADCASTD AX, Z22; \
	MOVL $0x3e2aaaab, AX; VPBROADCASTD AX, Z23; \
	MOVL $0x3f000000, AX; VPBROADCASTD AX, Z24; \
	MOVL $0x3f800000, AX; VPBROADCASTD AX, Z25; \
	MOVL $0xc2d00000, AX; VPBROADCASTD AX, Z26; \
	MOVL $0x42b1999a, AX; VPBROADCASTD AX, Z27

// EXPZ sets X = exp(X), using N and R as temporaries.
#define EXPZ(X, N, R) \
	VMAXPS       X, Z26, X;   \
	VMINPS       X, Z27, X;   \
	VMULPS       Z16, X, N;   \
	VADDPS       Z24, N, N;   \
	VRNDSCALEPS  $9, N, N;    \
	VMOVAPS      X, R;        \
	VFNMADD231PS Z18, N, R;   \
	VFNMADD231PS Z19, N, R;   \
	VMOVAPS      Z20, X;      \
	VFMADD213PS  Z21, R, X;   \
	VFMADD213PS  Z22, R, X;   \
	VFMADD213PS  Z23, R, X;   \
	VFMADD213PS  Z24, R, X;   \
	VFMADD213PS  Z25, R, X;   \
	VFMADD213PS  Z25, R, X;   \
	VSCALEFPS    N, X, X

// TAILMASK sets K1 to the low CX bits.
#define TAILMASK \
	MOVL $1, AX; \
	SHLL CX, AX; \
	DECL AX;     \
	KMOVW AX, K1

// HSUM leaves the sum of Z15's lanes in X15 (Z14 is clobbered).
#define HSUM(OP) \
	VEXTRACTF32X8 $1, Z15, Y14; \
	OP            Y14, Y15, Y15; \
	VEXTRACTF128  $1, Y15, X14; \
	OP            X14, X15, X15; \
	VPERMILPS     $0x4e, X15, X14; \
	OP            X14, X15, X15; \
	VPERMILPS     $0xb1, X15, X14; \
	OP            X14, X15, X15

// func expSubAVX512(dst, src *float32, n int, m float32) (sum float32)
TEXT ·expSubAVX512(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Z28
	EXPCONSTS
	VXORPS Z15, Z15, Z15
esloop:
	CMPQ CX, $16
	JLT  estail
	VMOVUPS (SI), Z0
	VSUBPS  Z28, Z0, Z0
	EXPZ(Z0, Z1, Z2)
	VMOVUPS Z0, (DI)
	VADDPS  Z0, Z15, Z15
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     esloop
estail:
	TESTQ CX, CX
	JZ    esdone
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS    Z28, Z0, Z0
	EXPZ(Z0, Z1, Z2)
	VMOVUPS   Z0, K1, (DI)
	VADDPS    Z0, Z15, K1, Z15
esdone:
	HSUM(VADDPS)
	VMOVSS X15, sum+32(FP)
	VZEROUPPER
	RET

// func softmaxGradAVX512(p, dp *float32, n int, l, d float32)
// p = exp(p - l); dp = p * (dp - d).
TEXT ·softmaxGradAVX512(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), DI
	MOVQ dp+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS l+24(FP), Z28
	VBROADCASTSS d+28(FP), Z29
	EXPCONSTS
sgloop:
	CMPQ CX, $16
	JLT  sgtail
	VMOVUPS (DI), Z0
	VSUBPS  Z28, Z0, Z0
	EXPZ(Z0, Z1, Z2)
	VMOVUPS Z0, (DI)
	VMOVUPS (SI), Z3
	VSUBPS  Z29, Z3, Z3
	VMULPS  Z0, Z3, Z3
	VMOVUPS Z3, (SI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     sgloop
sgtail:
	TESTQ CX, CX
	JZ    sgdone
	TAILMASK
	VMOVUPS.Z (DI), K1, Z0
	VSUBPS    Z28, Z0, Z0
	EXPZ(Z0, Z1, Z2)
	VMOVUPS   Z0, K1, (DI)
	VMOVUPS.Z (SI), K1, Z3
	VSUBPS    Z29, Z3, Z3
	VMULPS    Z0, Z3, Z3
	VMOVUPS   Z3, K1, (SI)
sgdone:
	VZEROUPPER
	RET

// func swigluAVX512(out, gate, up *float32, n int)
// out = g * sigmoid(g) * u with sigmoid(g) = 1/(1 + exp(-g)).
TEXT ·swigluAVX512(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	EXPCONSTS
	VXORPS Z28, Z28, Z28
swloop:
	CMPQ CX, $16
	JLT  swtail
	VMOVUPS (SI), Z3
	VSUBPS  Z3, Z28, Z0
	EXPZ(Z0, Z1, Z2)
	VADDPS  Z25, Z0, Z0
	VDIVPS  Z0, Z25, Z0
	VMULPS  Z0, Z3, Z0
	VMULPS  (DX), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	ADDQ    $64, DX
	SUBQ    $16, CX
	JMP     swloop
swtail:
	TESTQ CX, CX
	JZ    swdone
	TAILMASK
	VMOVUPS.Z (SI), K1, Z3
	VMOVUPS.Z (DX), K1, Z4
	VSUBPS    Z3, Z28, Z0
	EXPZ(Z0, Z1, Z2)
	VADDPS    Z25, Z0, Z0
	VDIVPS    Z0, Z25, Z0
	VMULPS    Z0, Z3, Z0
	VMULPS    Z4, Z0, Z0
	VMOVUPS   Z0, K1, (DI)
swdone:
	VZEROUPPER
	RET

// func swigluBackAVX512(dg, du, dout, gate, up *float32, n int)
// s = sigmoid(g); du = dout*g*s; dg = dout*u*s*(1 + g*(1-s)).
TEXT ·swigluBackAVX512(SB), NOSPLIT, $0-48
	MOVQ dg+0(FP), DI
	MOVQ du+8(FP), R8
	MOVQ dout+16(FP), R9
	MOVQ gate+24(FP), SI
	MOVQ up+32(FP), DX
	MOVQ n+40(FP), CX
	EXPCONSTS
	VXORPS Z28, Z28, Z28
sbloop:
	CMPQ CX, $16
	JLT  sbtail
	VMOVUPS (SI), Z3
	VMOVUPS (DX), Z4
	VMOVUPS (R9), Z5
	VSUBPS  Z3, Z28, Z0
	EXPZ(Z0, Z1, Z2)
	VADDPS  Z25, Z0, Z0
	VDIVPS  Z0, Z25, Z0     // s
	VMULPS  Z3, Z5, Z6      // dout*g
	VMULPS  Z0, Z6, Z6      // *s
	VMOVUPS Z6, (R8)
	VMULPS  Z4, Z5, Z7      // dout*u
	VMULPS  Z0, Z7, Z7      // *s
	VSUBPS  Z0, Z25, Z8     // 1-s
	VFMADD213PS Z25, Z3, Z8 // g*(1-s) + 1
	VMULPS  Z8, Z7, Z7
	VMOVUPS Z7, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	ADDQ    $64, DX
	ADDQ    $64, R8
	ADDQ    $64, R9
	SUBQ    $16, CX
	JMP     sbloop
sbtail:
	TESTQ CX, CX
	JZ    sbdone
	TAILMASK
	VMOVUPS.Z (SI), K1, Z3
	VMOVUPS.Z (DX), K1, Z4
	VMOVUPS.Z (R9), K1, Z5
	VSUBPS  Z3, Z28, Z0
	EXPZ(Z0, Z1, Z2)
	VADDPS  Z25, Z0, Z0
	VDIVPS  Z0, Z25, Z0
	VMULPS  Z3, Z5, Z6
	VMULPS  Z0, Z6, Z6
	VMOVUPS Z6, K1, (R8)
	VMULPS  Z4, Z5, Z7
	VMULPS  Z0, Z7, Z7
	VSUBPS  Z0, Z25, Z8
	VFMADD213PS Z25, Z3, Z8
	VMULPS  Z8, Z7, Z7
	VMOVUPS Z7, K1, (DI)
sbdone:
	VZEROUPPER
	RET

// func maxAVX512(x *float32, n int) float32
TEXT ·maxAVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0xff800000, AX // -Inf
	VPBROADCASTD AX, Z15
mxloop:
	CMPQ CX, $16
	JLT  mxtail
	VMAXPS (SI), Z15, Z15
	ADDQ   $64, SI
	SUBQ   $16, CX
	JMP    mxloop
mxtail:
	TESTQ CX, CX
	JZ    mxdone
	TAILMASK
	VMAXPS (SI), Z15, K1, Z15
mxdone:
	HSUM(VMAXPS)
	VMOVSS X15, ret+16(FP)
	VZEROUPPER
	RET

// func scaleAVX512(x *float32, n int, a float32)
TEXT ·scaleAVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS a+16(FP), Z1
scloop:
	CMPQ CX, $16
	JLT  sctail
	VMULPS  (SI), Z1, Z0
	VMOVUPS Z0, (SI)
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     scloop
sctail:
	TESTQ CX, CX
	JZ    scdone
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VMULPS    Z1, Z0, Z0
	VMOVUPS   Z0, K1, (SI)
scdone:
	VZEROUPPER
	RET

// func dotAVX512(a, b *float32, n int) float32
TEXT ·dotAVX512(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DX
	MOVQ n+16(FP), CX
	VXORPS Z15, Z15, Z15
dtloop:
	CMPQ CX, $16
	JLT  dttail
	VMOVUPS     (SI), Z0
	VFMADD231PS (DX), Z0, Z15
	ADDQ        $64, SI
	ADDQ        $64, DX
	SUBQ        $16, CX
	JMP         dtloop
dttail:
	TESTQ CX, CX
	JZ    dtdone
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS.Z (DX), K1, Z1
	VFMADD231PS Z1, Z0, Z15
dtdone:
	HSUM(VADDPS)
	VMOVSS X15, ret+24(FP)
	VZEROUPPER
	RET

// func rmsScaleAVX512(out, x, w *float32, n int, s float32)
// out = x * s * w.
TEXT ·rmsScaleAVX512(SB), NOSPLIT, $0-36
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS s+32(FP), Z1
rsloop:
	CMPQ CX, $16
	JLT  rstail
	VMULPS  (SI), Z1, Z0
	VMULPS  (DX), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     rsloop
rstail:
	TESTQ CX, CX
	JZ    rsdone
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS.Z (DX), K1, Z2
	VMULPS    Z1, Z0, Z0
	VMULPS    Z2, Z0, Z0
	VMOVUPS   Z0, K1, (DI)
rsdone:
	VZEROUPPER
	RET

// func dot3AVX512(a, b, c *float32, n int) float32
// sum of a*b*c.
TEXT ·dot3AVX512(SB), NOSPLIT, $0-36
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DX
	MOVQ c+16(FP), DI
	MOVQ n+24(FP), CX
	VXORPS Z15, Z15, Z15
d3loop:
	CMPQ CX, $16
	JLT  d3tail
	VMOVUPS     (SI), Z0
	VMULPS      (DX), Z0, Z0
	VFMADD231PS (DI), Z0, Z15
	ADDQ        $64, SI
	ADDQ        $64, DX
	ADDQ        $64, DI
	SUBQ        $16, CX
	JMP         d3loop
d3tail:
	TESTQ CX, CX
	JZ    d3done
	TAILMASK
	VMOVUPS.Z   (SI), K1, Z0
	VMOVUPS.Z   (DX), K1, Z1
	VMOVUPS.Z   (DI), K1, Z2
	VMULPS      Z1, Z0, Z0
	VFMADD231PS Z2, Z0, Z15
d3done:
	HSUM(VADDPS)
	VMOVSS X15, ret+32(FP)
	VZEROUPPER
	RET

// func rmsBackAVX512(dx, part, dy, x, w *float32, n int, s, c float32)
// dx += s*(dy*w - x*c); part += dy*x*s.
TEXT ·rmsBackAVX512(SB), NOSPLIT, $0-56
	MOVQ dx+0(FP), DI
	MOVQ part+8(FP), R8
	MOVQ dy+16(FP), R9
	MOVQ x+24(FP), SI
	MOVQ w+32(FP), DX
	MOVQ n+40(FP), CX
	VBROADCASTSS s+48(FP), Z10
	VBROADCASTSS c+52(FP), Z11
rbloop:
	CMPQ CX, $16
	JLT  rbtail
	VMOVUPS (R9), Z0         // dy
	VMOVUPS (SI), Z1         // x
	VMULPS  (DX), Z0, Z2     // dy*w
	VMULPS  Z11, Z1, Z3      // x*c
	VSUBPS  Z3, Z2, Z2       // dy*w - x*c
	VMOVUPS (DI), Z4
	VFMADD231PS Z10, Z2, Z4  // dx += s*(...)
	VMOVUPS Z4, (DI)
	VMULPS  Z1, Z0, Z5       // dy*x
	VMOVUPS (R8), Z6
	VFMADD231PS Z10, Z5, Z6  // part += dy*x*s
	VMOVUPS Z6, (R8)
	ADDQ    $64, DI
	ADDQ    $64, R8
	ADDQ    $64, R9
	ADDQ    $64, SI
	ADDQ    $64, DX
	SUBQ    $16, CX
	JMP     rbloop
rbtail:
	TESTQ CX, CX
	JZ    rbdone
	TAILMASK
	VMOVUPS.Z (R9), K1, Z0
	VMOVUPS.Z (SI), K1, Z1
	VMOVUPS.Z (DX), K1, Z7
	VMULPS  Z7, Z0, Z2
	VMULPS  Z11, Z1, Z3
	VSUBPS  Z3, Z2, Z2
	VMOVUPS.Z (DI), K1, Z4
	VFMADD231PS Z10, Z2, Z4
	VMOVUPS Z4, K1, (DI)
	VMULPS  Z1, Z0, Z5
	VMOVUPS.Z (R8), K1, Z6
	VFMADD231PS Z10, Z5, Z6
	VMOVUPS Z6, K1, (R8)
rbdone:
	VZEROUPPER
	RET

// func expSubDotAVX512(dst, src *float32, n int, m float32) (sum, dot float32)
// dst = exp(src - m); sum = Σ dst; dot = Σ dst*(src - m).
TEXT ·expSubDotAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Z28
	EXPCONSTS
	VXORPS Z15, Z15, Z15
	VXORPS Z13, Z13, Z13
edloop:
	CMPQ CX, $16
	JLT  edtail
	VMOVUPS (SI), Z0
	VSUBPS  Z28, Z0, Z0
	VMOVAPS Z0, Z3
	EXPZ(Z0, Z1, Z2)
	VMOVUPS Z0, (DI)
	VADDPS  Z0, Z15, Z15
	VFMADD231PS Z3, Z0, Z13
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     edloop
edtail:
	TESTQ CX, CX
	JZ    eddone
	TAILMASK
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS    Z28, Z0, Z0
	VMOVAPS   Z0, Z3
	EXPZ(Z0, Z1, Z2)
	VMOVUPS   Z0, K1, (DI)
	VADDPS    Z0, Z15, K1, Z15
	VFMADD231PS Z3, Z0, K1, Z13
eddone:
	HSUM(VADDPS)
	VMOVSS X15, sum+32(FP)
	VMOVAPS Z13, Z15
	HSUM(VADDPS)
	VMOVSS X15, dot+36(FP)
	VZEROUPPER
	RET

// func ropeAVX512(x, cos, sin *float32, heads, half int, sign float32)
// Rotates each of heads consecutive vectors of 2*half floats:
// (a, b) → (a·c − b·s, b·c + a·s) with s = sign·sin.
TEXT ·ropeAVX512(SB), NOSPLIT, $0-44
	MOVQ x+0(FP), DI
	MOVQ cos+8(FP), R8
	MOVQ sin+16(FP), R9
	MOVQ heads+24(FP), R10
	MOVQ half+32(FP), R11
	VBROADCASTSS sign+40(FP), Z9
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
	CMPQ CX, $16
	JLT  rptail
	VMOVUPS      (R13), Z0
	VMULPS       (BX), Z9, Z1
	VMOVUPS      (SI), Z2
	VMOVUPS      (DX), Z3
	VMULPS       Z0, Z2, Z4
	VFNMADD231PS Z1, Z3, Z4
	VMULPS       Z0, Z3, Z5
	VFMADD231PS  Z1, Z2, Z5
	VMOVUPS      Z4, (SI)
	VMOVUPS      Z5, (DX)
	ADDQ         $64, SI
	ADDQ         $64, DX
	ADDQ         $64, R13
	ADDQ         $64, BX
	SUBQ         $16, CX
	JMP          rploop
rptail:
	TESTQ CX, CX
	JZ    rpnext
	TAILMASK
	VMOVUPS.Z    (R13), K1, Z0
	VMOVUPS.Z    (BX), K1, Z1
	VMULPS       Z9, Z1, Z1
	VMOVUPS.Z    (SI), K1, Z2
	VMOVUPS.Z    (DX), K1, Z3
	VMULPS       Z0, Z2, Z4
	VFNMADD231PS Z1, Z3, Z4
	VMULPS       Z0, Z3, Z5
	VFMADD231PS  Z1, Z2, Z5
	VMOVUPS      Z4, K1, (SI)
	VMOVUPS      Z5, K1, (DX)
rpnext:
	LEAQ (DI)(R12*2), DI
	DECQ R10
	JMP  rphead
rpdone:
	VZEROUPPER
	RET

// func addToAVX512(dst, src *float32, n int)
// dst += src.
TEXT ·addToAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
adloop:
	CMPQ CX, $32
	JLT  adone
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	VADDPS  (SI), Z0, Z0
	VADDPS  64(SI), Z1, Z1
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $32, CX
	JMP     adloop
adone:
	CMPQ CX, $16
	JLT  adtail
	VMOVUPS (DI), Z0
	VADDPS  (SI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
adtail:
	TESTQ CX, CX
	JZ    addone
	TAILMASK
	VMOVUPS.Z (DI), K1, Z0
	VMOVUPS.Z (SI), K1, Z1
	VADDPS    Z1, Z0, Z0
	VMOVUPS   Z0, K1, (DI)
addone:
	VZEROUPPER
	RET
