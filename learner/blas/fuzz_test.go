package blas

import (
	"math"
	"testing"
)

// FuzzSgemm checks Sgemm against the reference on fuzzer-chosen shapes,
// transposes, paddings, scalars, thread counts and kernels. Products reach
// about 4M multiply-adds, enough for the parallel path.
func FuzzSgemm(f *testing.F) {
	f.Add(uint8(0), uint8(1), uint8(1), uint8(1), uint8(0), uint8(0), uint8(0), float32(1), float32(0), uint8(1))
	f.Add(uint8(3), uint8(17), uint8(33), uint8(7), uint8(1), uint8(2), uint8(3), float32(-0.5), float32(1), uint8(2))
	f.Add(uint8(1), uint8(200), uint8(150), uint8(64), uint8(0), uint8(5), uint8(0), float32(2), float32(-1), uint8(3))
	f.Add(uint8(6), uint8(12), uint8(32), uint8(40), uint8(0), uint8(0), uint8(1), float32(1), float32(0.5), uint8(2))
	f.Fuzz(func(t *testing.T, flags, m, n, k, padA, padB, padC uint8, alpha, beta float32, threads uint8) {
		if !finiteSmall(alpha) || !finiteSmall(beta) {
			t.Skip("alpha and beta are kept finite and moderate so one tolerance fits")
		}
		kernels := testKernels()
		withKernel(t, kernels[int(flags>>2)%len(kernels)])
		withThreads(t, 1+int(threads)%4)
		tc := gemmCase{
			transA: flags&1 != 0, transB: flags&2 != 0,
			m: int(m), n: int(n), k: int(k) % 65,
			alpha: alpha, beta: beta,
			padA: int(padA) % 8, padB: int(padB) % 8, padC: int(padC) % 8,
		}
		runCase(t, tc)
		clear(refResults) // fuzz inputs rarely repeat: keep memory flat
	})
}

func finiteSmall(x float32) bool {
	return !math.IsNaN(float64(x)) && math.Abs(float64(x)) <= 1000
}
