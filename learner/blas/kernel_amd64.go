package blas

// Assembly micro-kernels in sgemm_amd64.s. Arguments follow microKernel.fn
// with raw pointers; beta must be +0 (not -0) to skip reading C.

//go:noescape
func kernel12x32AVX512(kc int, a, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func kernel12x32DirectAVX512(kc int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func kernel6x16AVX2(kc int, a, b, c *float32, ldc int, alpha, beta float32)

// AVX2 kernels in avx2_amd64.s.

//go:noescape
func kernel6x16DirectAVX2(kc int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32)

//go:noescape
func dot4x4AVX2(k int, a *float32, lda int, b *float32, ldb int, out *float32)

//go:noescape
func axpy4x64AVX2(k int, a *float32, lda int, b *float32, ldb int, out *float32)

func dot4x4AVX2Go(k int, a []float32, lda int, b []float32, ldb int, out *[16]float32) {
	_ = a[3*lda+k-1]
	_ = b[3*ldb+k-1]
	dot4x4AVX2(k, &a[0], lda, &b[0], ldb, &out[0])
}

func axpy4x64AVX2Go(k int, a []float32, lda int, b []float32, ldb int, out *[256]float32) {
	_ = a[3*lda+k-1]
	_ = b[(k-1)*ldb+63]
	axpy4x64AVX2(k, &a[0], lda, &b[0], ldb, &out[0])
}

// avx512Kernel: 24 zmm accumulators (12 rows × 2 vectors of 16), B row in
// 2 registers, 6 broadcast registers. Per k step 14 loads feed 24 FMAs, so
// the two FMA ports, not the load ports, set the pace. The 12×kc A sliver
// (18 KiB at kc=384) stays in L1 while B slivers stream from the kc×nc B
// block kept in L2 (1.2 MiB of a 2 MiB L2 on Sapphire/Emerald Rapids).
var avx512Kernel = microKernel{
	name: "avx512-12x32",
	mr:   12, nr: 32,
	kc: 384, mc: 240, nc: 768,
	fn: func(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
		kernel12x32AVX512(kc, &a[0], &b[0], &c[0], ldc, alpha, beta)
	},
	transpose: transposeAVX,
	copy:      copyStridedAVX,
	dot4x4:    dot4x4,
	axpy4x64:  axpy4x64,
	direct: func(kc int, a []float32, lda int, b, c []float32, ldc int, alpha, beta float32) {
		_ = a[11*lda+kc-1]
		kernel12x32DirectAVX512(kc, &a[0], lda, &b[0], &c[0], ldc, alpha, beta)
	},
}

// avx2Kernel: 12 ymm accumulators (6 rows × 2 vectors of 8).
var avx2Kernel = microKernel{
	name: "avx2-6x16",
	mr:   6, nr: 16,
	kc: 256, mc: 240, nc: 1024,
	fn: func(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
		kernel6x16AVX2(kc, &a[0], &b[0], &c[0], ldc, alpha, beta)
	},
	transpose: transposeAVX,
	copy:      copyStridedAVX,
	dot4x4:    dot4x4AVX2Go,
	axpy4x64:  axpy4x64AVX2Go,
	direct: func(kc int, a []float32, lda int, b, c []float32, ldc int, alpha, beta float32) {
		_ = a[5*lda+kc-1]
		kernel6x16DirectAVX2(kc, &a[0], lda, &b[0], &c[0], ldc, alpha, beta)
	},
}

func bestKernel() *microKernel {
	avx2FMA, avx512 := cpuFeatures()
	switch {
	case avx512:
		return &avx512Kernel
	case avx2FMA:
		return &avx2Kernel
	}
	return &genericKernel
}

// Skinny kernels in sgemm_amd64.s (AVX-512); see skinny.go.

//go:noescape
func dot4x4AVX512(k int, a *float32, lda int, b *float32, ldb int, out *float32)

//go:noescape
func axpy4x64AVX512(k int, a *float32, lda int, b *float32, ldb int, out *float32)

func dot4x4(k int, a []float32, lda int, b []float32, ldb int, out *[16]float32) {
	_ = a[3*lda+k-1]
	_ = b[3*ldb+k-1]
	dot4x4AVX512(k, &a[0], lda, &b[0], ldb, &out[0])
}

func axpy4x64(k int, a []float32, lda int, b []float32, ldb int, out *[256]float32) {
	_ = a[3*lda+k-1]
	_ = b[(k-1)*ldb+63]
	axpy4x64AVX512(k, &a[0], lda, &b[0], ldb, &out[0])
}
