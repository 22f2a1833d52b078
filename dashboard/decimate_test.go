package dashboard

import (
	"math"
	"testing"
)

func TestDecimate(t *testing.T) {
	ramp := func(n int) (xs, ys []float64) {
		for i := range n {
			xs = append(xs, float64(i))
			ys = append(ys, float64(i%7))
		}
		return xs, ys
	}
	spike := func(n, at int) (xs, ys []float64) {
		for i := range n {
			xs = append(xs, float64(i))
			ys = append(ys, 0)
		}
		ys[at] = 100
		return xs, ys
	}
	for _, c := range []struct {
		name   string
		n      int
		limit  int
		series func(n int) ([]float64, []float64)
		want   int // points kept
		keep   []int
	}{
		{"fewer points than the limit", 10, 500, ramp, 10, []int{0, 5, 9}},
		{"as many as the limit", 500, 500, ramp, 500, []int{0, 499}},
		{"ten thousand to five hundred", 10000, 500, ramp, 500, []int{0, 9999}},
		{"a spike survives", 10000, 100, func(n int) ([]float64, []float64) { return spike(n, 4321) }, 100, []int{0, 4321, 9999}},
		{"a dip at the end's bucket survives", 1000, 10, func(n int) ([]float64, []float64) { return spike(n, 997) }, 10, []int{997, 999}},
		{"limit 2 keeps the ends", 100, 2, ramp, 2, []int{0, 99}},
		{"limit 0 keeps everything", 5, 0, ramp, 5, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			xs, ys := c.series(c.n)
			idx := Decimate(xs, ys, c.limit)
			if len(idx) != c.want {
				t.Fatalf("kept %d points, want %d", len(idx), c.want)
			}
			for i := 1; i < len(idx); i++ {
				if idx[i] <= idx[i-1] {
					t.Fatalf("indices not increasing at %d: %v", i, idx[i-1:i+1])
				}
			}
			kept := map[int]bool{}
			for _, i := range idx {
				kept[i] = true
			}
			for _, k := range c.keep {
				if !kept[k] {
					t.Errorf("point %d (y=%g) dropped", k, ys[k])
				}
			}
		})
	}
}

func TestSmooth(t *testing.T) {
	for _, c := range []struct {
		name string
		ys   []float64
		w    float64
		want []float64
	}{
		{"weight 0 is the series", []float64{1, 5, 2}, 0, []float64{1, 5, 2}},
		{"a constant stays constant (debiased)", []float64{3, 3, 3, 3}, 0.9, []float64{3, 3, 3, 3}},
		{"a step", []float64{0, 1}, 0.5, []float64{0, 2.0 / 3}}, // (0.5·0.5·0 + 0.5·1)/(0.5·0.5 + 0.5)
		{"an out-of-range weight leaves it", []float64{1, 2}, 1, []float64{1, 2}},
	} {
		got := Smooth(c.ys, c.w)
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-12 {
				t.Errorf("%s: got %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
}
