package blas

// testKernels lists every micro-kernel this CPU can run, the portable one
// included, so each is checked against the reference.
func testKernels() []*microKernel {
	ks := []*microKernel{&genericKernel}
	avx2FMA, avx512 := cpuFeatures()
	if avx2FMA {
		ks = append(ks, &avx2Kernel)
	}
	if avx512 {
		ks = append(ks, &avx512Kernel)
	}
	return ks
}
