package blas

import (
	"fmt"
	"os"
	"sync"
)

// cpuid executes CPUID with the given leaf and sub-leaf.
//
//go:noescape
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

// xgetbv reads extended control register 0 (which register states the OS saves).
//
//go:noescape
func xgetbv() (eax, edx uint32)

// ISAEnv names the environment variable that caps the vector instructions
// the CPU kernels use below what the CPU has: "avx512" (the default: the best
// the CPU and OS support), "avx2" (AVX2 with FMA), "generic" (portable Go).
// It exists to reproduce, on one machine, what CPUs with less run.
const ISAEnv = "RLNODE_CPU_ISA"

// isaCap is ISAEnv read once: the most the kernels may use.
var isaCap = sync.OnceValue(func() string {
	switch v := os.Getenv(ISAEnv); v {
	case "", "avx512":
		return "avx512"
	case "avx2", "generic":
		return v
	default:
		// Called from package initialisation, so no error can be returned;
		// say so once and keep the best the CPU has.
		fmt.Fprintf(os.Stderr, "rlnode: %s=%q is not one of avx512, avx2, generic; using what the CPU supports\n", ISAEnv, v)
		return "avx512"
	}
})

// cpuFeatures reports which vector extensions both the CPU and the operating
// system support, capped by ISAEnv: AVX2 with FMA needs the YMM state saved
// by the OS, AVX-512 additionally the opmask and ZMM states.
func cpuFeatures() (avx2FMA, avx512 bool) {
	avx2FMA, avx512 = hostFeatures()
	switch isaCap() {
	case "avx2":
		avx512 = false
	case "generic":
		avx2FMA, avx512 = false, false
	}
	return avx2FMA, avx512
}

// hostFeatures is cpuFeatures without the cap.
func hostFeatures() (avx2FMA, avx512 bool) {
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

// AVX2 reports whether the CPU and the operating system support AVX2 with
// FMA (within RLNODE_CPU_ISA), for the CPU backend's vector loops.
func AVX2() bool {
	ok, _ := cpuFeatures()
	return ok
}

// AVX512 reports whether the CPU and the operating system support the
// AVX-512 foundation instructions, for the CPU backend's vector loops.
func AVX512() bool {
	_, ok := cpuFeatures()
	return ok
}
