package blas

import "sync/atomic"

// microKernel is one register-tiled inner kernel together with the cache
// blocking that suits it. fn computes the mr×nr tile
//
//	C = alpha * Σ_p a[p*mr+i] * b[p*nr+j] + beta*C   (i < mr, j < nr, p < kc)
//
// from packed slivers a (kc×mr) and b (kc×nr), with C's rows ldc apart.
// When beta is +0 it must not read C. kc is at least 1.
type microKernel struct {
	name   string
	mr, nr int
	// Largest blocks: kc along k (the A and B slivers stay in L1/L2),
	// nc along n (the packed B block stays in L2), mc along m (the packed
	// A block). mc is a multiple of mr and nc of nr.
	kc, mc, nc int
	fn         func(kc int, a, b, c []float32, ldc int, alpha, beta float32)
}

// Layout of one packing buffer, in floats: the packed B block, then the
// packed A block, then one edge tile, each starting on a 64-byte boundary.
func (k *microKernel) bLen() int   { return roundUp(k.kc*k.nc, 16) }
func (k *microKernel) aLen() int   { return roundUp(k.mc*k.kc, 16) }
func (k *microKernel) bufLen() int { return k.bLen() + k.aLen() + k.mr*k.nr }

// active is the kernel Sgemm uses. It is chosen once from the CPU's
// features; tests swap it to exercise the portable kernel.
var active atomic.Pointer[microKernel]

func init() { active.Store(bestKernel()) }

// KernelName names the micro-kernel in use, e.g. "avx512-12x32", for logs
// and benchmark reports.
func KernelName() string { return active.Load().name }

func roundUp(x, to int) int { return (x + to - 1) / to * to }
