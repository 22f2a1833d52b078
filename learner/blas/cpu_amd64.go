package blas

// cpuid executes CPUID with the given leaf and sub-leaf.
//
//go:noescape
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

// xgetbv reads extended control register 0 (which register states the OS saves).
//
//go:noescape
func xgetbv() (eax, edx uint32)

// cpuFeatures reports which vector extensions both the CPU and the operating
// system support: AVX2 with FMA needs the YMM state saved by the OS, AVX-512
// additionally the opmask and ZMM states.
func cpuFeatures() (avx2FMA, avx512 bool) {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false, false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const (
		fmaBit     = 1 << 12
		osxsaveBit = 1 << 27
		avxBit     = 1 << 28
	)
	if ecx1&(fmaBit|osxsaveBit|avxBit) != fmaBit|osxsaveBit|avxBit {
		return false, false
	}
	xcr0, _ := xgetbv()
	const (
		sseYMM    = 1<<1 | 1<<2
		opmaskZMM = 1<<5 | 1<<6 | 1<<7
	)
	if xcr0&sseYMM != sseYMM {
		return false, false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	const (
		avx2Bit    = 1 << 5
		avx512fBit = 1 << 16
	)
	avx2FMA = ebx7&avx2Bit != 0
	avx512 = avx2FMA && ebx7&avx512fBit != 0 && xcr0&opmaskZMM == opmaskZMM
	return avx2FMA, avx512
}

// fmaPeakLoop runs n iterations of 12 independent AVX-512 FMAs; only
// BenchmarkPeakFMA calls it, on CPUs with AVX-512.
//
//go:noescape
func fmaPeakLoop(n int)

// AVX512 reports whether the CPU and the operating system support the
// AVX-512 foundation instructions, for the CPU backend's vector loops.
func AVX512() bool {
	_, ok := cpuFeatures()
	return ok
}
