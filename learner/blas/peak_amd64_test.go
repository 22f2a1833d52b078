package blas

import (
	"sync"
	"testing"
)

// BenchmarkPeakFMA measures the FP32 peak Sgemm is held against: each of
// Threads() goroutines issues independent 16-lane FMAs with no memory
// traffic (12 per iteration, 32 FLOP each).
func BenchmarkPeakFMA(b *testing.B) {
	if _, avx512 := cpuFeatures(); !avx512 {
		b.Skip("no AVX-512")
	}
	const iters = 10_000_000
	threads := Threads()
	var wg sync.WaitGroup
	for i := 0; i < b.N; i++ {
		for range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fmaPeakLoop(iters)
			}()
		}
		wg.Wait()
	}
	flops := float64(b.N) * float64(threads) * iters * 12 * 32
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
