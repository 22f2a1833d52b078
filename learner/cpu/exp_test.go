package cpu

import (
	"math"
	"testing"
)

func TestExpf(t *testing.T) {
	worst := 0.0
	for x := float32(-87); x < 88.5; x += 0.00731 {
		want := math.Exp(float64(x))
		got := float64(expf(x))
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	// float32 has a 6e-8 unit roundoff; allow a few units.
	if worst > 4e-7 {
		t.Errorf("worst relative error %g", worst)
	}
	special := []struct{ in, want float32 }{
		{0, 1},
		{float32(math.Inf(-1)), 0},
		{-200, 0},
		{200, float32(math.Inf(1))},
		{float32(math.Inf(1)), float32(math.Inf(1))},
	}
	for _, c := range special {
		if got := expf(c.in); got != c.want {
			t.Errorf("expf(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := expf(float32(math.NaN())); got == got {
		t.Errorf("expf(NaN) = %v", got)
	}
}
