package blas

// genericKernel is the portable micro-kernel: plain Go, 4×4 tile. It serves
// architectures without an assembly kernel and CPUs lacking AVX2+FMA. On
// amd64 Go keeps only part of the 16 accumulators in registers (about
// 3 GFLOP/s per core here); it is the correctness fallback, not a fast path.
var genericKernel = microKernel{
	name: "generic-4x4",
	mr:   4, nr: 4,
	kc: 256, mc: 128, nc: 1024,
	fn:        kernel4x4Go,
	transpose: transposeGo,
	copy:      copyStridedGo,
}

func kernel4x4Go(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
	var c00, c01, c02, c03 float32
	var c10, c11, c12, c13 float32
	var c20, c21, c22, c23 float32
	var c30, c31, c32, c33 float32
	a, b = a[:4*kc], b[:4*kc]
	for len(a) >= 4 && len(b) >= 4 {
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
		a, b = a[4:], b[4:]
	}
	storeRow4(c[0*ldc:], c00, c01, c02, c03, alpha, beta)
	storeRow4(c[1*ldc:], c10, c11, c12, c13, alpha, beta)
	storeRow4(c[2*ldc:], c20, c21, c22, c23, alpha, beta)
	storeRow4(c[3*ldc:], c30, c31, c32, c33, alpha, beta)
}

func storeRow4(c []float32, s0, s1, s2, s3, alpha, beta float32) {
	c = c[:4:4]
	if beta == 0 {
		c[0], c[1], c[2], c[3] = alpha*s0, alpha*s1, alpha*s2, alpha*s3
		return
	}
	c[0] = alpha*s0 + beta*c[0]
	c[1] = alpha*s1 + beta*c[1]
	c[2] = alpha*s2 + beta*c[2]
	c[3] = alpha*s3 + beta*c[3]
}
