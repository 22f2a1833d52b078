package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRowVectorOps checks SumRows and AddRowVector against plain loops,
// with enough rows to be split over workers and chunks, on both loop
// paths.
func TestRowVectorOps(t *testing.T) {
	for _, pureGo := range []bool{false, true} {
		run := func(fn func()) { fn() }
		if pureGo {
			run = withGo
		}
		run(func() {
			b := New()
			rng := rand.New(rand.NewPCG(21, 22))
			for _, c := range []struct{ rows, cols int }{{1, 1}, {3, 17}, {1000, 37}, {2048, 384}} {
				x, v := vecInput(rng, c.rows*c.cols, 1), vecInput(rng, c.cols, 1)
				dst := vecInput(rng, c.cols, 1)
				want := make([]float64, c.cols)
				for j := range want {
					want[j] = float64(dst[j])
					for r := 0; r < c.rows; r++ {
						want[j] += float64(x[r*c.cols+j])
					}
				}
				b.SumRows(Tensor(dst), Tensor(x), c.rows, c.cols)
				for j := range want {
					if d := math.Abs(float64(dst[j]) - want[j]); d > 1e-5*math.Sqrt(float64(c.rows)+1) {
						t.Fatalf("pure Go %v, %d×%d: SumRows[%d] = %v, want %v", pureGo, c.rows, c.cols, j, dst[j], want[j])
					}
				}
				y := append([]float32(nil), x...)
				b.AddRowVector(Tensor(y), Tensor(v), c.rows, c.cols)
				for i := range y {
					if w := x[i] + v[i%c.cols]; y[i] != w {
						t.Fatalf("pure Go %v, %d×%d: AddRowVector[%d] = %v, want %v", pureGo, c.rows, c.cols, i, y[i], w)
					}
				}
			}
		})
	}
}

// TestConcurrentCallersGetOwnScratch calls kernels that reuse scratch and
// partial-sum buffers from several goroutines on one Backend (against its
// contract, as a shared reference model might): each must still get its
// own buffers and the sequential result.
func TestConcurrentCallersGetOwnScratch(t *testing.T) {
	b := New()
	rng := rand.New(rand.NewPCG(23, 24))
	const rows, cols, vocab = 300, 40, 50
	x, z := vecInput(rng, rows*cols, 1), vecInput(rng, rows*vocab, 3)
	targets := make([]int32, rows)
	for i := range targets {
		targets[i] = int32(rng.IntN(vocab))
	}
	run := func() (sum, logp []float32) {
		sum, logp = make([]float32, cols), make([]float32, rows)
		ent, lse := make(Tensor, rows), make(Tensor, rows)
		b.SumRows(Tensor(sum), Tensor(x), rows, cols)
		b.LogProbs(Tensor(logp), ent, lse, Tensor(z), targets, rows, vocab)
		return sum, logp
	}
	wantSum, wantLogp := run()
	const callers = 4
	errs := make(chan string, callers)
	for range callers {
		go func() {
			for range 20 {
				sum, logp := run()
				for j := range sum {
					if sum[j] != wantSum[j] {
						errs <- "SumRows differs under concurrent calls"
						return
					}
				}
				for j := range logp {
					if logp[j] != wantLogp[j] {
						errs <- "LogProbs differs under concurrent calls"
						return
					}
				}
			}
			errs <- ""
		}()
	}
	for range callers {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}
