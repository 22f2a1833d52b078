package blas

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchShapes are the square sizes, the transformer-shaped products
// (tokens × hidden, hidden × 3·hidden, MLP; NT is x·Wᵀ, TN the weight
// gradient) and decode-sized ones that bench_torch.py also times.
var benchShapes = []struct {
	name           string
	transA, transB bool
	m, n, k        int
}{
	{"square256", false, false, 256, 256, 256},
	{"square512", false, false, 512, 512, 512},
	{"square1024", false, false, 1024, 1024, 1024},
	{"square2048", false, false, 2048, 2048, 2048},
	{"2048x512x512", false, false, 2048, 512, 512},
	{"2048x512x512_NT", false, true, 2048, 512, 512},
	{"2048x1536x512_NT", false, true, 2048, 1536, 512},
	{"2048x512x1536_NT", false, true, 2048, 512, 1536},
	{"512x512x2048_TN", true, false, 512, 512, 2048},
	{"512x1536x2048_TN", true, false, 512, 1536, 2048},
	{"2048x512x1536_NN", false, false, 2048, 512, 1536},
	// Decoding: a few tokens through a 1024→4096 projection (the skinny
	// path takes up to 16 rows).
	{"decode1x4096x1024_NT", false, true, 1, 4096, 1024},
	{"decode4x4096x1024_NT", false, true, 4, 4096, 1024},
	{"decode16x4096x1024_NT", false, true, 16, 4096, 1024},
}

func BenchmarkSgemm(b *testing.B) {
	for _, s := range benchShapes {
		b.Run(s.name, func(b *testing.B) {
			benchSgemm(b, s.transA, s.transB, s.m, s.n, s.k)
		})
	}
}

func benchSgemm(b *testing.B, transA, transB bool, m, n, k int) {
	rng := rand.New(rand.NewPCG(3, 4))
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	a, bm, c := randSlice(rng, m*k), randSlice(rng, k*n), make([]float32, m*n)
	Sgemm(transA, transB, m, n, k, 1, a, lda, bm, ldb, 0, c, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Sgemm(transA, transB, m, n, k, 1, a, lda, bm, ldb, 0, c, n)
	}
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkSgemmBatched times attention-shaped batches: per head, scores =
// Q·Kᵀ (seq×seq×headDim) and out = P·V (seq×headDim×seq).
func BenchmarkSgemmBatched(b *testing.B) {
	for _, s := range []struct {
		heads, seq, dim int
		transB          bool
	}{{64, 256, 64, true}, {64, 256, 64, false}} {
		m, n, k := s.seq, s.seq, s.dim
		name := "QKt"
		if !s.transB {
			n, k, name = s.dim, s.seq, "PV"
		}
		b.Run(fmt.Sprintf("%s_b%d_%dx%dx%d", name, s.heads, m, n, k), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			ldb := n
			if s.transB {
				ldb = k
			}
			a, bm, c := randSlice(rng, s.heads*m*k), randSlice(rng, s.heads*k*n), make([]float32, s.heads*m*n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				SgemmBatched(false, s.transB, s.heads, m, n, k, 1, a, m*k, k, bm, k*n, ldb, 0, c, m*n, n)
			}
			b.ReportMetric(2*float64(s.heads*m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkSgemmKernels times one transformer-shaped product with each
// micro-kernel this CPU can run (the portable Go one included).
func BenchmarkSgemmKernels(b *testing.B) {
	for _, kern := range testKernels() {
		b.Run(kern.name, func(b *testing.B) {
			prev := active.Swap(kern)
			defer active.Store(prev)
			benchSgemm(b, false, true, 2048, 512, 512)
		})
	}
}
