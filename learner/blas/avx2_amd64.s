#include "textflag.h"

// AVX2+FMA kernels beside kernel6x16AVX2 (sgemm_amd64.s): the direct 6×16
// kernel, the skinny kernels and the 6-wide strided copy, for CPUs without
// AVX-512. Each follows its AVX-512 counterpart with 8-lane vectors.

// tailmask: 8 lanes of ones then 8 of zeros; 8-n lanes in, the next 8 have
// their low n lanes set.
DATA tailmask<>+0(SB)/8, $-1
DATA tailmask<>+8(SB)/8, $-1
DATA tailmask<>+16(SB)/8, $-1
DATA tailmask<>+24(SB)/8, $-1
DATA tailmask<>+32(SB)/8, $0
DATA tailmask<>+40(SB)/8, $0
DATA tailmask<>+48(SB)/8, $0
DATA tailmask<>+56(SB)/8, $0
GLOBL tailmask<>(SB), RODATA|NOPTR, $64

// K6X16D is K6X16 reading the six rows of A where they lie: rows 0-2 at
// SI, SI+lda, SI+2·lda, rows 3-5 at DI (= SI+3·lda) likewise; R11 = lda
// in bytes.
#define K6X16D(ao, bo) \
	VMOVUPS      bo(BX), Y12;         \
	VMOVUPS      bo+32(BX), Y13;      \
	VBROADCASTSS ao(SI), Y14;         \
	VBROADCASTSS ao(SI)(R11*1), Y15;  \
	VFMADD231PS  Y12, Y14, Y0;        \
	VFMADD231PS  Y13, Y14, Y1;        \
	VFMADD231PS  Y12, Y15, Y2;        \
	VFMADD231PS  Y13, Y15, Y3;        \
	VBROADCASTSS ao(SI)(R11*2), Y14;  \
	VBROADCASTSS ao(DI), Y15;         \
	VFMADD231PS  Y12, Y14, Y4;        \
	VFMADD231PS  Y13, Y14, Y5;        \
	VFMADD231PS  Y12, Y15, Y6;        \
	VFMADD231PS  Y13, Y15, Y7;        \
	VBROADCASTSS ao(DI)(R11*1), Y14;  \
	VBROADCASTSS ao(DI)(R11*2), Y15;  \
	VFMADD231PS  Y12, Y14, Y8;        \
	VFMADD231PS  Y13, Y14, Y9;        \
	VFMADD231PS  Y12, Y15, Y10;       \
	VFMADD231PS  Y13, Y15, Y11

#define ROWD(y0, y1) \
	VMULPS  Y14, y0, y0;  \
	VMULPS  Y14, y1, y1;  \
	VMOVUPS y0, (DX);     \
	VMOVUPS y1, 32(DX);   \
	ADDQ    R8, DX

#define ROWDBETA(y0, y1) \
	VMULPS      Y14, y0, y0;      \
	VMULPS      Y14, y1, y1;      \
	VFMADD231PS (DX), Y15, y0;    \
	VFMADD231PS 32(DX), Y15, y1;  \
	VMOVUPS     y0, (DX);         \
	VMOVUPS     y1, 32(DX);       \
	ADDQ        R8, DX

// func kernel6x16DirectAVX2(kc int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32)
TEXT ·kernel6x16DirectAVX2(SB), NOSPLIT, $0-56
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R11
	MOVQ b+24(FP), BX
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8
	SHLQ $2, R11
	LEAQ (R11)(R11*2), R12
	LEAQ (SI)(R12*1), DI

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

	MOVQ CX, R9
	SHRQ $2, R9
	ANDQ $3, CX
	TESTQ R9, R9
	JZ   kd2tail

kd2loop4:
	K6X16D(0, 0)
	K6X16D(4, 64)
	K6X16D(8, 128)
	K6X16D(12, 192)
	ADDQ $16, SI
	ADDQ $16, DI
	ADDQ $256, BX
	DECQ R9
	JNZ  kd2loop4

kd2tail:
	TESTQ CX, CX
	JZ    kd2store

kd2loop1:
	K6X16D(0, 0)
	ADDQ $4, SI
	ADDQ $4, DI
	ADDQ $64, BX
	DECQ CX
	JNZ  kd2loop1

kd2store:
	VBROADCASTSS alpha+48(FP), Y14
	MOVL         beta+52(FP), R9
	TESTL        R9, R9
	JZ           kd2nobeta
	VBROADCASTSS beta+52(FP), Y15
	ROWDBETA(Y0, Y1)
	ROWDBETA(Y2, Y3)
	ROWDBETA(Y4, Y5)
	ROWDBETA(Y6, Y7)
	ROWDBETA(Y8, Y9)
	ROWDBETA(Y10, Y11)
	VZEROUPPER
	RET

kd2nobeta:
	ROWD(Y0, Y1)
	ROWD(Y2, Y3)
	ROWD(Y4, Y5)
	ROWD(Y6, Y7)
	ROWD(Y8, Y9)
	ROWD(Y10, Y11)
	VZEROUPPER
	RET

// func copy6Strip(src *float32, lds int, dst *float32, ldd int, count int)
TEXT ·copy6Strip(SB), NOSPLIT, $0-40
	MOVQ src+0(FP), SI
	MOVQ lds+8(FP), R8
	MOVQ dst+16(FP), DI
	MOVQ ldd+24(FP), R9
	MOVQ count+32(FP), CX
	SHLQ $2, R8
	SHLQ $2, R9
	TESTQ CX, CX
	JZ   c6done

c6loop:
	VMOVUPS (SI), X0
	MOVQ    16(SI), AX
	VMOVUPS X0, (DI)
	MOVQ    AX, 16(DI)
	ADDQ R8, SI
	ADDQ R9, DI
	DECQ CX
	JNZ  c6loop

c6done:
	RET

// HSUM8 stores the sum of y's lanes (x is its low half) at off(DX);
// X15 is clobbered.
#define HSUM8(y, x, off) \
	VEXTRACTF128 $1, y, X15; \
	VADDPS       X15, x, x;  \
	VHADDPS      x, x, x;    \
	VHADDPS      x, x, x;    \
	VMOVSS       x, off(DX)

// func dot4x4AVX2(k int, a *float32, lda int, b *float32, ldb int, out *float32)
//
// out[i*4+j] = Σ_p a[i*lda+p] * b[j*ldb+p] for i, j < 4, p < k, in two
// passes over pairs of B rows (eight accumulators each: sixteen would leave
// no register for the operands). Each B row is read once, A's four rows
// (a few KiB, in L1) twice.
TEXT ·dot4x4AVX2(SB), NOSPLIT, $0-48
	MOVQ lda+16(FP), R8
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), R10
	MOVQ out+40(FP), DX
	SHLQ $2, R8
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R9
	MOVQ $2, R13

d2pass:
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ DI, R11
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ CX, R12
	SHRQ $3, R12
	JZ   d2tail

d2loop:
	VMOVUPS     (R11), Y8
	VMOVUPS     (R11)(R10*1), Y9
	VFMADD231PS (SI), Y8, Y0
	VFMADD231PS (SI), Y9, Y1
	VFMADD231PS (SI)(R8*1), Y8, Y2
	VFMADD231PS (SI)(R8*1), Y9, Y3
	VFMADD231PS (SI)(R8*2), Y8, Y4
	VFMADD231PS (SI)(R8*2), Y9, Y5
	VFMADD231PS (SI)(R9*1), Y8, Y6
	VFMADD231PS (SI)(R9*1), Y9, Y7
	ADDQ $32, SI
	ADDQ $32, R11
	DECQ R12
	JNZ  d2loop

d2tail:
	ANDQ $7, CX
	JZ   d2sum
	SHLQ $2, CX
	LEAQ tailmask<>+32(SB), AX
	SUBQ CX, AX
	VMOVUPS    (AX), Y14
	VMASKMOVPS (R11), Y14, Y8
	VMASKMOVPS (R11)(R10*1), Y14, Y9
	VMASKMOVPS (SI), Y14, Y10
	VMASKMOVPS (SI)(R8*1), Y14, Y11
	VMASKMOVPS (SI)(R8*2), Y14, Y12
	VMASKMOVPS (SI)(R9*1), Y14, Y13
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y10, Y9, Y1
	VFMADD231PS Y11, Y8, Y2
	VFMADD231PS Y11, Y9, Y3
	VFMADD231PS Y12, Y8, Y4
	VFMADD231PS Y12, Y9, Y5
	VFMADD231PS Y13, Y8, Y6
	VFMADD231PS Y13, Y9, Y7

d2sum:
	HSUM8(Y0, X0, 0)
	HSUM8(Y1, X1, 4)
	HSUM8(Y2, X2, 16)
	HSUM8(Y3, X3, 20)
	HSUM8(Y4, X4, 32)
	HSUM8(Y5, X5, 36)
	HSUM8(Y6, X6, 48)
	HSUM8(Y7, X7, 52)
	LEAQ (DI)(R10*2), DI
	ADDQ $8, DX
	DECQ R13
	JNZ  d2pass
	VZEROUPPER
	RET

// func axpy4x64AVX2(k int, a *float32, lda int, b *float32, ldb int, out *float32)
//
// out[i*64+j] = Σ_p a[i*lda+p] * b[p*ldb+j] for i < 4, j < 64, p < k, in
// four passes over 16-column quarters of the strip (eight accumulators
// each), so that each cache line of B is read once.
TEXT ·axpy4x64AVX2(SB), NOSPLIT, $0-48
	MOVQ lda+16(FP), R8
	MOVQ b+24(FP), BX
	MOVQ ldb+32(FP), R10
	MOVQ out+40(FP), DX
	SHLQ $2, R8
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R9
	MOVQ $4, R13

a2pass:
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ BX, DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	TESTQ CX, CX
	JZ    a2store

a2loop:
	VMOVUPS      (DI), Y8
	VMOVUPS      32(DI), Y9
	VBROADCASTSS (SI), Y10
	VBROADCASTSS (SI)(R8*1), Y11
	VBROADCASTSS (SI)(R8*2), Y12
	VBROADCASTSS (SI)(R9*1), Y13
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y1
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y9, Y11, Y3
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y9, Y12, Y5
	VFMADD231PS  Y8, Y13, Y6
	VFMADD231PS  Y9, Y13, Y7
	ADDQ         $4, SI
	ADDQ         R10, DI
	DECQ         CX
	JNZ          a2loop

a2store:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 256(DX)
	VMOVUPS Y3, 288(DX)
	VMOVUPS Y4, 512(DX)
	VMOVUPS Y5, 544(DX)
	VMOVUPS Y6, 768(DX)
	VMOVUPS Y7, 800(DX)
	ADDQ $64, BX
	ADDQ $64, DX
	DECQ R13
	JNZ  a2pass
	VZEROUPPER
	RET
