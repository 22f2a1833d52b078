package blas

import "sync/atomic"

// microKernel is one register-tiled inner kernel together with the cache
// blocking and packing routines that suit it. fn computes the mr×nr tile
//
//	C = alpha * Σ_p a[p*mr+i] * b[p*nr+j] + beta*C   (i < mr, j < nr, p < kc)
//
// from packed slivers a (kc×mr) and b (kc×nr), with C's rows ldc apart.
// When beta is +0 it must not read C. kc is at least 1.
type microKernel struct {
	name   string
	mr, nr int
	// Largest blocks: kc along k (an A sliver, mr×kc, stays in L1), nc
	// along n (a kc×nc block of packed B stays in L2 while the A slivers
	// sweep it), mc along m (the rows of op(A) one task packs at a time).
	// mc is a multiple of mr and nc of nr.
	kc, mc, nc int
	fn         func(kc int, a, b, c []float32, ldc int, alpha, beta float32)
	// direct, where not nil, is fn reading a full mr-row sliver of A where
	// it lies (op(A) = A, rows lda apart) instead of packed.
	direct func(kc int, a []float32, lda int, b, c []float32, ldc int, alpha, beta float32)
	// transpose sets dst[c*ldd+r] = src[r*ld+c] for r < rows, c < n.
	transpose func(dst []float32, ldd int, src []float32, ld int, rows, n int)
	// copy sets dst[p*ldd+j] = src[p*lds+j] for p < count, j < width.
	copy func(dst []float32, ldd int, src []float32, lds, width, count int)

	// Skinny kernels, nil where absent (see skinny.go). dot4x4 sets
	// out[i*4+j] = Σ_p a[i*lda+p]*b[j*ldb+p]; axpy4x64 sets
	// out[i*64+j] = Σ_p a[i*lda+p]*b[p*ldb+j] (i < 4, j < 4 or 64, p < k).
	dot4x4   func(k int, a []float32, lda int, b []float32, ldb int, out *[16]float32)
	axpy4x64 func(k int, a []float32, lda int, b []float32, ldb int, out *[256]float32)
}

// aLen is the length of the packed A block; a task's buffer holds it and
// one edge tile after it.
func (k *microKernel) aLen() int   { return roundUp(k.mc*k.kc, 16) }
func (k *microKernel) bufLen() int { return k.aLen() + k.mr*k.nr }

// active is the kernel Sgemm uses. It is chosen once from the CPU's
// features; tests swap it to exercise the portable kernel.
var active atomic.Pointer[microKernel]

func init() { active.Store(bestKernel()) }

// KernelName names the micro-kernel in use, e.g. "avx512-12x32", for logs
// and benchmark reports.
func KernelName() string { return active.Load().name }

func roundUp(x, to int) int { return (x + to - 1) / to * to }
