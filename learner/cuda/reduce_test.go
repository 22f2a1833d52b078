package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
)

// TestColumnReductions runs the device backend's reductions over rows
// against the CPU backend: column sums and RMSNorm's weight gradient (two
// passes: 300 rows make five chunks, the last one short) and the
// scatter-add of rows into an embedding's gradient, whose rows are added
// per destination in the CPU backend's order, so it is bit-exact.
func TestColumnReductions(t *testing.T) {
	const rows, cols, vocab = 300, 70, 40
	rng := rand.New(rand.NewPCG(31, 32))
	x, dy, w := randn(rng, rows*cols, 1), randn(rng, rows*cols, 1), randn(rng, cols, 1)
	acc0, emb0 := randn(rng, cols, 1), randn(rng, vocab*cols, 1)
	idx := make([]int32, rows)
	for i := range idx {
		idx[i] = int32(rng.IntN(vocab / 2)) // half the rows untouched, many repeats
	}
	run := func(b backend.Backend) (sum, dw, emb []float32) {
		up := func(v []float32) backend.Tensor {
			t := b.Alloc(len(v))
			b.Upload(t, v)
			return t
		}
		down := func(t backend.Tensor, n int) []float32 {
			out := make([]float32, n)
			b.Download(out, t)
			return out
		}
		xt, dyt, wt := up(x), up(dy), up(w)
		st := up(acc0)
		b.SumRows(st, xt, rows, cols)
		rstd := up(make([]float32, rows))
		out := b.Alloc(rows * cols)
		b.RMSNorm(out, rstd, xt, wt, rows, cols, 1e-6)
		dx, dwt := b.Alloc(rows*cols), up(acc0)
		b.RMSNormBackward(dx, dwt, dyt, xt, wt, rstd, rows, cols)
		et := up(emb0)
		b.ScatterAddRows(et, xt, idx, cols)
		return down(st, cols), down(dwt, cols), down(et, vocab*cols)
	}
	wantSum, wantDw, wantEmb := run(cpu.New())
	for name, d := range accels(t) {
		t.Run(name, func(t *testing.T) {
			db := NewDeviceBackend(d, F32)
			defer db.A.Release()
			sum, dw, emb := run(db)
			must(t, db.Sync())
			near(t, "column sums", sum, wantSum, tolF32)
			near(t, "RMSNorm dw", dw, wantDw, tolF32)
			if !slices.Equal(emb, wantEmb) {
				near(t, "scatter-add", emb, wantEmb, tol{})
				t.Errorf("scatter-add differs from the CPU backend's bits")
			}
		})
	}
}

func TestGroupRows(t *testing.T) {
	dests, offs, order := groupRows([]int32{3, 1, 3, 0, 1, 3}, 4)
	if !slices.Equal(dests, []int32{0, 1, 3}) || !slices.Equal(offs, []int32{0, 1, 3, 6}) || !slices.Equal(order, []int32{3, 1, 4, 0, 2, 5}) {
		t.Fatalf("dests %v, offs %v, order %v", dests, offs, order)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a row past the destination did not panic")
		}
	}()
	groupRows([]int32{0, 4}, 4)
}
