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
