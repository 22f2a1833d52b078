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

// The assembly kernels take raw pointers; these wrap them as microKernel's
// fields, with the bounds checks that keep them inside the slices.

func packedKernel(fn func(kc int, a, b, c *float32, ldc int, alpha, beta float32)) func(int, []float32, []float32, []float32, int, float32, float32) {
	return func(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
		fn(kc, &a[0], &b[0], &c[0], ldc, alpha, beta)
	}
}

// directKernel reads mr rows of A, lda apart.
func directKernel(mr int, fn func(kc int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32)) func(int, []float32, int, []float32, []float32, int, float32, float32) {
	return func(kc int, a []float32, lda int, b, c []float32, ldc int, alpha, beta float32) {
		_ = a[(mr-1)*lda+kc-1]
		fn(kc, &a[0], lda, &b[0], &c[0], ldc, alpha, beta)
	}
}

type skinnyAsm func(k int, a *float32, lda int, b *float32, ldb int, out *float32)

func dotKernel(fn skinnyAsm) func(int, []float32, int, []float32, int, *[16]float32) {
	return func(k int, a []float32, lda int, b []float32, ldb int, out *[16]float32) {
		_ = a[3*lda+k-1]
		_ = b[3*ldb+k-1]
		fn(k, &a[0], lda, &b[0], ldb, &out[0])
	}
}

func axpyKernel(fn skinnyAsm) func(int, []float32, int, []float32, int, *[256]float32) {
	return func(k int, a []float32, lda int, b []float32, ldb int, out *[256]float32) {
		_ = a[3*lda+k-1]
		_ = b[(k-1)*ldb+63]
		fn(k, &a[0], lda, &b[0], ldb, &out[0])
	}
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
	fn:        packedKernel(kernel12x32AVX512),
	transpose: transposeAVX,
	copy:      copyStridedAVX,
	dot4x4:    dotKernel(dot4x4AVX512),
	axpy4x64:  axpyKernel(axpy4x64AVX512),
	direct:    directKernel(12, kernel12x32DirectAVX512),
}

// avx2Kernel: 12 ymm accumulators (6 rows × 2 vectors of 8).
var avx2Kernel = microKernel{
	name: "avx2-6x16",
	mr:   6, nr: 16,
	kc: 256, mc: 240, nc: 1024,
	fn:        packedKernel(kernel6x16AVX2),
	transpose: transposeAVX,
	copy:      copyStridedAVX,
	dot4x4:    dotKernel(dot4x4AVX2),
	axpy4x64:  axpyKernel(axpy4x64AVX2),
	direct:    directKernel(6, kernel6x16DirectAVX2),
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
