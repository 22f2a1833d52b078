#include "textflag.h"

// func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL subleaf+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

// ---------------------------------------------------------------------------
// AVX-512 micro-kernel, 12 rows x 32 columns.
//
// a: packed A sliver, 12 floats per k step (one column of op(A)).
// b: packed B sliver, 32 floats per k step (one row of op(B)).
// C tile = alpha*sum_k a⊗b + beta*C; when beta is +0 C is not read.
// Accumulators Z0..Z23 (row r in Z(2r), Z(2r+1)); B row in Z24, Z25;
// broadcasts of A rotate through Z26..Z31.

#define K12X32(ao, bo) \
	VMOVUPS      bo(BX), Z24;         \
	VMOVUPS      bo+64(BX), Z25;      \
	VBROADCASTSS ao+0(AX), Z26;       \
	VBROADCASTSS ao+4(AX), Z27;       \
	VFMADD231PS  Z24, Z26, Z0;        \
	VFMADD231PS  Z25, Z26, Z1;        \
	VFMADD231PS  Z24, Z27, Z2;        \
	VFMADD231PS  Z25, Z27, Z3;        \
	VBROADCASTSS ao+8(AX), Z28;       \
	VBROADCASTSS ao+12(AX), Z29;      \
	VFMADD231PS  Z24, Z28, Z4;        \
	VFMADD231PS  Z25, Z28, Z5;        \
	VFMADD231PS  Z24, Z29, Z6;        \
	VFMADD231PS  Z25, Z29, Z7;        \
	VBROADCASTSS ao+16(AX), Z30;      \
	VBROADCASTSS ao+20(AX), Z31;      \
	VFMADD231PS  Z24, Z30, Z8;        \
	VFMADD231PS  Z25, Z30, Z9;        \
	VFMADD231PS  Z24, Z31, Z10;       \
	VFMADD231PS  Z25, Z31, Z11;       \
	VBROADCASTSS ao+24(AX), Z26;      \
	VBROADCASTSS ao+28(AX), Z27;      \
	VFMADD231PS  Z24, Z26, Z12;       \
	VFMADD231PS  Z25, Z26, Z13;       \
	VFMADD231PS  Z24, Z27, Z14;       \
	VFMADD231PS  Z25, Z27, Z15;       \
	VBROADCASTSS ao+32(AX), Z28;      \
	VBROADCASTSS ao+36(AX), Z29;      \
	VFMADD231PS  Z24, Z28, Z16;       \
	VFMADD231PS  Z25, Z28, Z17;       \
	VFMADD231PS  Z24, Z29, Z18;       \
	VFMADD231PS  Z25, Z29, Z19;       \
	VBROADCASTSS ao+40(AX), Z30;      \
	VBROADCASTSS ao+44(AX), Z31;      \
	VFMADD231PS  Z24, Z30, Z20;       \
	VFMADD231PS  Z25, Z30, Z21;       \
	VFMADD231PS  Z24, Z31, Z22;       \
	VFMADD231PS  Z25, Z31, Z23

// Row r of the tile: scale by alpha (Z30), add beta*C (Z31), store, next row.
#define ROW512BETA(z0, z1) \
	VMULPS      Z30, z0, z0;      \
	VMULPS      Z30, z1, z1;      \
	VFMADD231PS (DX), Z31, z0;    \
	VFMADD231PS 64(DX), Z31, z1;  \
	VMOVUPS     z0, (DX);         \
	VMOVUPS     z1, 64(DX);       \
	ADDQ        R8, DX

#define ROW512(z0, z1) \
	VMULPS  Z30, z0, z0;  \
	VMULPS  Z30, z1, z1;  \
	VMOVUPS z0, (DX);     \
	VMOVUPS z1, 64(DX);   \
	ADDQ    R8, DX

// func kernel12x32AVX512(kc int, a, b, c *float32, ldc int, alpha, beta float32)
TEXT ·kernel12x32AVX512(SB), NOSPLIT, $0-48
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

	MOVQ CX, R9
	SHRQ $2, R9
	ANDQ $3, CX
	TESTQ R9, R9
	JZ   k512tail

k512loop4:
	PREFETCHT0 1024(BX)
	K12X32(0, 0)
	PREFETCHT0 1088(BX)
	K12X32(48, 128)
	PREFETCHT0 1152(BX)
	K12X32(96, 256)
	PREFETCHT0 1216(BX)
	K12X32(144, 384)
	ADDQ $192, AX
	ADDQ $512, BX
	DECQ R9
	JNZ  k512loop4

k512tail:
	TESTQ CX, CX
	JZ    k512store

k512loop1:
	K12X32(0, 0)
	ADDQ $48, AX
	ADDQ $128, BX
	DECQ CX
	JNZ  k512loop1

k512store:
	VBROADCASTSS alpha+40(FP), Z30
	MOVL         beta+44(FP), R9
	TESTL        R9, R9
	JZ           k512nobeta
	VBROADCASTSS beta+44(FP), Z31
	ROW512BETA(Z0, Z1)
	ROW512BETA(Z2, Z3)
	ROW512BETA(Z4, Z5)
	ROW512BETA(Z6, Z7)
	ROW512BETA(Z8, Z9)
	ROW512BETA(Z10, Z11)
	ROW512BETA(Z12, Z13)
	ROW512BETA(Z14, Z15)
	ROW512BETA(Z16, Z17)
	ROW512BETA(Z18, Z19)
	ROW512BETA(Z20, Z21)
	ROW512BETA(Z22, Z23)
	VZEROUPPER
	RET

k512nobeta:
	ROW512(Z0, Z1)
	ROW512(Z2, Z3)
	ROW512(Z4, Z5)
	ROW512(Z6, Z7)
	ROW512(Z8, Z9)
	ROW512(Z10, Z11)
	ROW512(Z12, Z13)
	ROW512(Z14, Z15)
	ROW512(Z16, Z17)
	ROW512(Z18, Z19)
	ROW512(Z20, Z21)
	ROW512(Z22, Z23)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// AVX-512 micro-kernel, 12 rows x 32 columns, reading A unpacked.
//
// Like kernel12x32AVX512, but A is op(A) = A as stored, row-major with row
// stride lda: row i of the sliver starts at a + i*lda. Rows 0-3 are
// addressed from SI, 4-7 from DI, 8-11 from R10, each with index R11 = lda
// or R12 = 3*lda bytes; all three advance 4 bytes per k step.

#define K12X32D(ao, bo) \
	VMOVUPS      bo(BX), Z24;          \
	VMOVUPS      bo+64(BX), Z25;       \
	VBROADCASTSS ao(SI), Z26;          \
	VBROADCASTSS ao(SI)(R11*1), Z27;   \
	VFMADD231PS  Z24, Z26, Z0;         \
	VFMADD231PS  Z25, Z26, Z1;         \
	VFMADD231PS  Z24, Z27, Z2;         \
	VFMADD231PS  Z25, Z27, Z3;         \
	VBROADCASTSS ao(SI)(R11*2), Z28;   \
	VBROADCASTSS ao(SI)(R12*1), Z29;   \
	VFMADD231PS  Z24, Z28, Z4;         \
	VFMADD231PS  Z25, Z28, Z5;         \
	VFMADD231PS  Z24, Z29, Z6;         \
	VFMADD231PS  Z25, Z29, Z7;         \
	VBROADCASTSS ao(DI), Z30;          \
	VBROADCASTSS ao(DI)(R11*1), Z31;   \
	VFMADD231PS  Z24, Z30, Z8;         \
	VFMADD231PS  Z25, Z30, Z9;         \
	VFMADD231PS  Z24, Z31, Z10;        \
	VFMADD231PS  Z25, Z31, Z11;        \
	VBROADCASTSS ao(DI)(R11*2), Z26;   \
	VBROADCASTSS ao(DI)(R12*1), Z27;   \
	VFMADD231PS  Z24, Z26, Z12;        \
	VFMADD231PS  Z25, Z26, Z13;        \
	VFMADD231PS  Z24, Z27, Z14;        \
	VFMADD231PS  Z25, Z27, Z15;        \
	VBROADCASTSS ao(R10), Z28;         \
	VBROADCASTSS ao(R10)(R11*1), Z29;  \
	VFMADD231PS  Z24, Z28, Z16;        \
	VFMADD231PS  Z25, Z28, Z17;        \
	VFMADD231PS  Z24, Z29, Z18;        \
	VFMADD231PS  Z25, Z29, Z19;        \
	VBROADCASTSS ao(R10)(R11*2), Z30;  \
	VBROADCASTSS ao(R10)(R12*1), Z31;  \
	VFMADD231PS  Z24, Z30, Z20;        \
	VFMADD231PS  Z25, Z30, Z21;        \
	VFMADD231PS  Z24, Z31, Z22;        \
	VFMADD231PS  Z25, Z31, Z23

// func kernel12x32DirectAVX512(kc int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32)
TEXT ·kernel12x32DirectAVX512(SB), NOSPLIT, $0-56
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R11
	MOVQ b+24(FP), BX
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8
	SHLQ $2, R11
	LEAQ (R11)(R11*2), R12
	LEAQ (SI)(R11*4), DI
	LEAQ (DI)(R11*4), R10

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

	MOVQ CX, R9
	SHRQ $2, R9
	ANDQ $3, CX
	TESTQ R9, R9
	JZ   kdtail

kdloop4:
	PREFETCHT0 1024(BX)
	K12X32D(0, 0)
	PREFETCHT0 1088(BX)
	K12X32D(4, 128)
	PREFETCHT0 1152(BX)
	K12X32D(8, 256)
	PREFETCHT0 1216(BX)
	K12X32D(12, 384)
	ADDQ $16, SI
	ADDQ $16, DI
	ADDQ $16, R10
	ADDQ $512, BX
	DECQ R9
	JNZ  kdloop4

kdtail:
	TESTQ CX, CX
	JZ    kdstore

kdloop1:
	K12X32D(0, 0)
	ADDQ $4, SI
	ADDQ $4, DI
	ADDQ $4, R10
	ADDQ $128, BX
	DECQ CX
	JNZ  kdloop1

kdstore:
	VBROADCASTSS alpha+48(FP), Z30
	MOVL         beta+52(FP), R9
	TESTL        R9, R9
	JZ           kdnobeta
	VBROADCASTSS beta+52(FP), Z31
	ROW512BETA(Z0, Z1)
	ROW512BETA(Z2, Z3)
	ROW512BETA(Z4, Z5)
	ROW512BETA(Z6, Z7)
	ROW512BETA(Z8, Z9)
	ROW512BETA(Z10, Z11)
	ROW512BETA(Z12, Z13)
	ROW512BETA(Z14, Z15)
	ROW512BETA(Z16, Z17)
	ROW512BETA(Z18, Z19)
	ROW512BETA(Z20, Z21)
	ROW512BETA(Z22, Z23)
	VZEROUPPER
	RET

kdnobeta:
	ROW512(Z0, Z1)
	ROW512(Z2, Z3)
	ROW512(Z4, Z5)
	ROW512(Z6, Z7)
	ROW512(Z8, Z9)
	ROW512(Z10, Z11)
	ROW512(Z12, Z13)
	ROW512(Z14, Z15)
	ROW512(Z16, Z17)
	ROW512(Z18, Z19)
	ROW512(Z20, Z21)
	ROW512(Z22, Z23)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// AVX2+FMA micro-kernel, 6 rows x 16 columns.
//
// a: 6 floats per k step; b: 16 floats per k step. Accumulators Y0..Y11,
// B row in Y12, Y13, broadcasts in Y14, Y15.

#define K6X16(ao, bo) \
	VMOVUPS      bo(BX), Y12;      \
	VMOVUPS      bo+32(BX), Y13;   \
	VBROADCASTSS ao+0(AX), Y14;    \
	VBROADCASTSS ao+4(AX), Y15;    \
	VFMADD231PS  Y12, Y14, Y0;     \
	VFMADD231PS  Y13, Y14, Y1;     \
	VFMADD231PS  Y12, Y15, Y2;     \
	VFMADD231PS  Y13, Y15, Y3;     \
	VBROADCASTSS ao+8(AX), Y14;    \
	VBROADCASTSS ao+12(AX), Y15;   \
	VFMADD231PS  Y12, Y14, Y4;     \
	VFMADD231PS  Y13, Y14, Y5;     \
	VFMADD231PS  Y12, Y15, Y6;     \
	VFMADD231PS  Y13, Y15, Y7;     \
	VBROADCASTSS ao+16(AX), Y14;   \
	VBROADCASTSS ao+20(AX), Y15;   \
	VFMADD231PS  Y12, Y14, Y8;     \
	VFMADD231PS  Y13, Y14, Y9;     \
	VFMADD231PS  Y12, Y15, Y10;    \
	VFMADD231PS  Y13, Y15, Y11

#define ROW256BETA(y0, y1) \
	VMULPS      Y14, y0, y0;      \
	VMULPS      Y14, y1, y1;      \
	VFMADD231PS (DX), Y15, y0;    \
	VFMADD231PS 32(DX), Y15, y1;  \
	VMOVUPS     y0, (DX);         \
	VMOVUPS     y1, 32(DX);       \
	ADDQ        R8, DX

#define ROW256(y0, y1) \
	VMULPS  Y14, y0, y0;  \
	VMULPS  Y14, y1, y1;  \
	VMOVUPS y0, (DX);     \
	VMOVUPS y1, 32(DX);   \
	ADDQ    R8, DX

// func kernel6x16AVX2(kc int, a, b, c *float32, ldc int, alpha, beta float32)
TEXT ·kernel6x16AVX2(SB), NOSPLIT, $0-48
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8

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
	JZ   k256tail

k256loop4:
	K6X16(0, 0)
	K6X16(24, 64)
	K6X16(48, 128)
	K6X16(72, 192)
	ADDQ $96, AX
	ADDQ $256, BX
	DECQ R9
	JNZ  k256loop4

k256tail:
	TESTQ CX, CX
	JZ    k256store

k256loop1:
	K6X16(0, 0)
	ADDQ $24, AX
	ADDQ $64, BX
	DECQ CX
	JNZ  k256loop1

k256store:
	VBROADCASTSS alpha+40(FP), Y14
	MOVL         beta+44(FP), R9
	TESTL        R9, R9
	JZ           k256nobeta
	VBROADCASTSS beta+44(FP), Y15
	ROW256BETA(Y0, Y1)
	ROW256BETA(Y2, Y3)
	ROW256BETA(Y4, Y5)
	ROW256BETA(Y6, Y7)
	ROW256BETA(Y8, Y9)
	ROW256BETA(Y10, Y11)
	VZEROUPPER
	RET

k256nobeta:
	ROW256(Y0, Y1)
	ROW256(Y2, Y3)
	ROW256(Y4, Y5)
	ROW256(Y6, Y7)
	ROW256(Y8, Y9)
	ROW256(Y10, Y11)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// Transposing copies for packing (AVX).

// func transpose8Strip(src *float32, ld int, dst *float32, ldd int, n int)
//
// For c < n (a multiple of 8) and r < 8: dst[c*ldd+r] = src[r*ld+c].
// Eight source rows are read 8 floats at a time and transposed in registers
// (unpack, shuffle, lane permute).
TEXT ·transpose8Strip(SB), NOSPLIT, $0-40
	MOVQ src+0(FP), SI
	MOVQ ld+8(FP), R8
	MOVQ dst+16(FP), DI
	MOVQ ldd+24(FP), R11
	MOVQ n+32(FP), CX
	SHLQ $2, R8
	SHLQ $2, R11
	LEAQ (R8)(R8*2), R9    // 3 source rows
	LEAQ (SI)(R8*4), R10   // source row 4
	LEAQ (R11)(R11*2), R12 // 3 destination rows
	MOVQ R11, R14
	SHLQ $3, R14           // 8 destination rows
	SHRQ $3, CX
	JZ   t8done

t8loop:
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R8*1), Y1
	VMOVUPS (SI)(R8*2), Y2
	VMOVUPS (SI)(R9*1), Y3
	VMOVUPS (R10), Y4
	VMOVUPS (R10)(R8*1), Y5
	VMOVUPS (R10)(R8*2), Y6
	VMOVUPS (R10)(R9*1), Y7

	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15

	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xEE, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xEE, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xEE, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xEE, Y15, Y13, Y7

	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15

	LEAQ    (DI)(R11*4), R13
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (DI)(R11*1)
	VMOVUPS Y10, (DI)(R11*2)
	VMOVUPS Y11, (DI)(R12*1)
	VMOVUPS Y12, (R13)
	VMOVUPS Y13, (R13)(R11*1)
	VMOVUPS Y14, (R13)(R11*2)
	VMOVUPS Y15, (R13)(R12*1)

	ADDQ $32, SI
	ADDQ $32, R10
	ADDQ R14, DI
	DECQ CX
	JNZ  t8loop

t8done:
	VZEROUPPER
	RET

// func transpose4Strip(src *float32, ld int, dst *float32, ldd int, n int)
//
// For c < n (a multiple of 4) and r < 4: dst[c*ldd+r] = src[r*ld+c].
TEXT ·transpose4Strip(SB), NOSPLIT, $0-40
	MOVQ src+0(FP), SI
	MOVQ ld+8(FP), R8
	MOVQ dst+16(FP), DI
	MOVQ ldd+24(FP), R11
	MOVQ n+32(FP), CX
	SHLQ $2, R8
	SHLQ $2, R11
	LEAQ (R8)(R8*2), R9
	LEAQ (R11)(R11*2), R12
	MOVQ R11, R14
	SHLQ $2, R14
	SHRQ $2, CX
	JZ   t4done

t4loop:
	VMOVUPS (SI), X0
	VMOVUPS (SI)(R8*1), X1
	VMOVUPS (SI)(R8*2), X2
	VMOVUPS (SI)(R9*1), X3

	VUNPCKLPS X1, X0, X4
	VUNPCKHPS X1, X0, X5
	VUNPCKLPS X3, X2, X6
	VUNPCKHPS X3, X2, X7

	VSHUFPS $0x44, X6, X4, X0
	VSHUFPS $0xEE, X6, X4, X1
	VSHUFPS $0x44, X7, X5, X2
	VSHUFPS $0xEE, X7, X5, X3

	VMOVUPS X0, (DI)
	VMOVUPS X1, (DI)(R11*1)
	VMOVUPS X2, (DI)(R11*2)
	VMOVUPS X3, (DI)(R12*1)

	ADDQ $16, SI
	ADDQ R14, DI
	DECQ CX
	JNZ  t4loop

t4done:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// Strided row copies for packing (AVX): for p < count,
// dst[p*ldd : p*ldd+W] = src[p*lds : p*lds+W], W = 32, 16 or 12.

// func copy32Strip(src *float32, lds int, dst *float32, ldd int, count int)
TEXT ·copy32Strip(SB), NOSPLIT, $0-40
	MOVQ src+0(FP), SI
	MOVQ lds+8(FP), R8
	MOVQ dst+16(FP), DI
	MOVQ ldd+24(FP), R9
	MOVQ count+32(FP), CX
	SHLQ $2, R8
	SHLQ $2, R9
	TESTQ CX, CX
	JZ   c32done

c32loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ R8, SI
	ADDQ R9, DI
	DECQ CX
	JNZ  c32loop

c32done:
	VZEROUPPER
	RET

// func copy16Strip(src *float32, lds int, dst *float32, ldd int, count int)
TEXT ·copy16Strip(SB), NOSPLIT, $0-40
	MOVQ src+0(FP), SI
	MOVQ lds+8(FP), R8
	MOVQ dst+16(FP), DI
	MOVQ ldd+24(FP), R9
	MOVQ count+32(FP), CX
	SHLQ $2, R8
	SHLQ $2, R9
	TESTQ CX, CX
	JZ   c16done

c16loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ R8, SI
	ADDQ R9, DI
	DECQ CX
	JNZ  c16loop

c16done:
	VZEROUPPER
	RET

// func copy12Strip(src *float32, lds int, dst *float32, ldd int, count int)
TEXT ·copy12Strip(SB), NOSPLIT, $0-40
	MOVQ src+0(FP), SI
	MOVQ lds+8(FP), R8
	MOVQ dst+16(FP), DI
	MOVQ ldd+24(FP), R9
	MOVQ count+32(FP), CX
	SHLQ $2, R8
	SHLQ $2, R9
	TESTQ CX, CX
	JZ   c12done

c12loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), X1
	VMOVUPS Y0, (DI)
	VMOVUPS X1, 32(DI)
	ADDQ R8, SI
	ADDQ R9, DI
	DECQ CX
	JNZ  c12loop

c12done:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// func fmaPeakLoop(n int)
//
// n iterations of 12 independent 16-lane FMAs (no loads): the FMA
// throughput one core sustains, measured by BenchmarkPeakFMA.
TEXT ·fmaPeakLoop(SB), NOSPLIT, $0-8
	MOVQ   n+0(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	TESTQ  CX, CX
	JZ     peakdone

peakloop:
	VFMADD231PS Z30, Z31, Z0
	VFMADD231PS Z30, Z31, Z1
	VFMADD231PS Z30, Z31, Z2
	VFMADD231PS Z30, Z31, Z3
	VFMADD231PS Z30, Z31, Z4
	VFMADD231PS Z30, Z31, Z5
	VFMADD231PS Z30, Z31, Z6
	VFMADD231PS Z30, Z31, Z7
	VFMADD231PS Z30, Z31, Z8
	VFMADD231PS Z30, Z31, Z9
	VFMADD231PS Z30, Z31, Z10
	VFMADD231PS Z30, Z31, Z11
	DECQ        CX
	JNZ         peakloop

peakdone:
	VZEROUPPER
	RET

// ---------------------------------------------------------------------------
// Skinny products (m ≤ 4 rows at a time), AVX-512. op(B) is read where it
// lies, unpacked: for few rows of C, packing B would cost as much as the
// product.

// Horizontal sum of zmm acc (one of Z0..Z15, low part xacc) into the float
// at off(DX), with Z24 as scratch. 512-bit lane shuffles (AVX512F) fold the
// four 128-bit lanes together; the last four floats are summed with VEX
// ops, legal since xacc is below X16.
#define HSUM(acc, xacc, off) \
	VSHUFF32X4 $0x4E, acc, acc, Z24; \
	VADDPS     Z24, acc, acc;        \
	VSHUFF32X4 $0xB1, acc, acc, Z24; \
	VADDPS     Z24, acc, acc;        \
	VHADDPS    xacc, xacc, xacc;     \
	VHADDPS    xacc, xacc, xacc;     \
	VMOVSS     xacc, off(DX)

#define DOT16 \
	VMOVUPS (SI), Z16;        \
	VMOVUPS (SI)(R8*1), Z17;  \
	VMOVUPS (SI)(R8*2), Z18;  \
	VMOVUPS (SI)(R9*1), Z19;  \
	VMOVUPS (DI), Z20;        \
	VMOVUPS (DI)(R10*1), Z21; \
	VMOVUPS (DI)(R10*2), Z22; \
	VMOVUPS (DI)(R11*1), Z23; \
	VFMADD231PS Z20, Z16, Z0;  \
	VFMADD231PS Z21, Z16, Z1;  \
	VFMADD231PS Z22, Z16, Z2;  \
	VFMADD231PS Z23, Z16, Z3;  \
	VFMADD231PS Z20, Z17, Z4;  \
	VFMADD231PS Z21, Z17, Z5;  \
	VFMADD231PS Z22, Z17, Z6;  \
	VFMADD231PS Z23, Z17, Z7;  \
	VFMADD231PS Z20, Z18, Z8;  \
	VFMADD231PS Z21, Z18, Z9;  \
	VFMADD231PS Z22, Z18, Z10; \
	VFMADD231PS Z23, Z18, Z11; \
	VFMADD231PS Z20, Z19, Z12; \
	VFMADD231PS Z21, Z19, Z13; \
	VFMADD231PS Z22, Z19, Z14; \
	VFMADD231PS Z23, Z19, Z15

// func dot4x4AVX512(k int, a *float32, lda int, b *float32, ldb int, out *float32)
//
// out[i*4+j] = Σ_p a[i*lda+p] * b[j*ldb+p] for i, j < 4, p < k: sixteen dot
// products of four rows of A with four rows of stored B (op(B) = Bᵀ).
TEXT ·dot4x4AVX512(SB), NOSPLIT, $0-48
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R8
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), R10
	MOVQ out+40(FP), DX
	SHLQ $2, R8
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R9
	LEAQ (R10)(R10*2), R11

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15

	MOVQ CX, R12
	SHRQ $4, R12
	JZ   dottail

dotloop:
	DOT16
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ R12
	JNZ  dotloop

dottail:
	ANDQ  $15, CX
	JZ    dotsum
	MOVQ  $1, AX
	SHLQ  CX, AX
	DECQ  AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z16
	VMOVUPS.Z (SI)(R8*1), K1, Z17
	VMOVUPS.Z (SI)(R8*2), K1, Z18
	VMOVUPS.Z (SI)(R9*1), K1, Z19
	VMOVUPS.Z (DI), K1, Z20
	VMOVUPS.Z (DI)(R10*1), K1, Z21
	VMOVUPS.Z (DI)(R10*2), K1, Z22
	VMOVUPS.Z (DI)(R11*1), K1, Z23
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z21, Z16, Z1
	VFMADD231PS Z22, Z16, Z2
	VFMADD231PS Z23, Z16, Z3
	VFMADD231PS Z20, Z17, Z4
	VFMADD231PS Z21, Z17, Z5
	VFMADD231PS Z22, Z17, Z6
	VFMADD231PS Z23, Z17, Z7
	VFMADD231PS Z20, Z18, Z8
	VFMADD231PS Z21, Z18, Z9
	VFMADD231PS Z22, Z18, Z10
	VFMADD231PS Z23, Z18, Z11
	VFMADD231PS Z20, Z19, Z12
	VFMADD231PS Z21, Z19, Z13
	VFMADD231PS Z22, Z19, Z14
	VFMADD231PS Z23, Z19, Z15

dotsum:
	HSUM(Z0, X0, 0)
	HSUM(Z1, X1, 4)
	HSUM(Z2, X2, 8)
	HSUM(Z3, X3, 12)
	HSUM(Z4, X4, 16)
	HSUM(Z5, X5, 20)
	HSUM(Z6, X6, 24)
	HSUM(Z7, X7, 28)
	HSUM(Z8, X8, 32)
	HSUM(Z9, X9, 36)
	HSUM(Z10, X10, 40)
	HSUM(Z11, X11, 44)
	HSUM(Z12, X12, 48)
	HSUM(Z13, X13, 52)
	HSUM(Z14, X14, 56)
	HSUM(Z15, X15, 60)
	VZEROUPPER
	RET

// func axpy4x64AVX512(k int, a *float32, lda int, b *float32, ldb int, out *float32)
//
// out[i*64+j] = Σ_p a[i*lda+p] * b[p*ldb+j] for i < 4, j < 64, p < k: four
// rows of A times a 64-column strip of stored B (op(B) = B), B read row by
// row where it lies.
TEXT ·axpy4x64AVX512(SB), NOSPLIT, $0-48
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R8
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), R10
	MOVQ out+40(FP), DX
	SHLQ $2, R8
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R9

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	TESTQ  CX, CX
	JZ     axpystore

axpyloop:
	PREFETCHT0   (DI)(R10*8)
	PREFETCHT0   64(DI)(R10*8)
	PREFETCHT0   128(DI)(R10*8)
	PREFETCHT0   192(DI)(R10*8)
	VMOVUPS      (DI), Z16
	VMOVUPS      64(DI), Z17
	VMOVUPS      128(DI), Z18
	VMOVUPS      192(DI), Z19
	VBROADCASTSS (SI), Z20
	VBROADCASTSS (SI)(R8*1), Z21
	VBROADCASTSS (SI)(R8*2), Z22
	VBROADCASTSS (SI)(R9*1), Z23
	VFMADD231PS  Z16, Z20, Z0
	VFMADD231PS  Z17, Z20, Z1
	VFMADD231PS  Z18, Z20, Z2
	VFMADD231PS  Z19, Z20, Z3
	VFMADD231PS  Z16, Z21, Z4
	VFMADD231PS  Z17, Z21, Z5
	VFMADD231PS  Z18, Z21, Z6
	VFMADD231PS  Z19, Z21, Z7
	VFMADD231PS  Z16, Z22, Z8
	VFMADD231PS  Z17, Z22, Z9
	VFMADD231PS  Z18, Z22, Z10
	VFMADD231PS  Z19, Z22, Z11
	VFMADD231PS  Z16, Z23, Z12
	VFMADD231PS  Z17, Z23, Z13
	VFMADD231PS  Z18, Z23, Z14
	VFMADD231PS  Z19, Z23, Z15
	ADDQ         $4, SI
	ADDQ         R10, DI
	DECQ         CX
	JNZ          axpyloop

axpystore:
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	VMOVUPS Z2, 128(DX)
	VMOVUPS Z3, 192(DX)
	VMOVUPS Z4, 256(DX)
	VMOVUPS Z5, 320(DX)
	VMOVUPS Z6, 384(DX)
	VMOVUPS Z7, 448(DX)
	VMOVUPS Z8, 512(DX)
	VMOVUPS Z9, 576(DX)
	VMOVUPS Z10, 640(DX)
	VMOVUPS Z11, 704(DX)
	VMOVUPS Z12, 768(DX)
	VMOVUPS Z13, 832(DX)
	VMOVUPS Z14, 896(DX)
	VMOVUPS Z15, 960(DX)
	VZEROUPPER
	RET
