package optim

import (
	"math"
	"strings"
	"testing"
)

func nan() float64 { return math.NaN() }

// TestClipGradNorm: grads (3,4) and (12) have global norm √(9+16+144) = 13.
func TestClipGradNorm(t *testing.T) {
	cases := []struct {
		name    string
		maxNorm float64
		want    []float32 // first tensor after clipping
	}{
		// coef = 6.5/(13+1e-6) ≈ 0.49999996
		{"clips to half", 6.5, []float32{1.5, 2}},
		// coef = 13/(13+1e-6) < 1: torch scales even here, by 1−7.7e-8.
		{"at the norm", 13, []float32{3, 4}},
		{"above the norm", 100, []float32{3, 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			params := []*Param{{Name: "a", Grad: []float32{3, 4}, Data: make([]float32, 2)}, {Name: "b", Grad: []float32{12}, Data: make([]float32, 1)}}
			norm := ClipGradNorm(params, tc.maxNorm)
			if math.Abs(norm-13) > 1e-12 {
				t.Fatalf("norm %v, want 13", norm)
			}
			assertClose(t, "a", params[0].Grad, tc.want, 1e-6, 0)
			if got := math.Sqrt(sq(params[0].Grad) + sq(params[1].Grad)); got > tc.maxNorm+1e-5 {
				t.Fatalf("norm after clipping %v > %v", got, tc.maxNorm)
			}
		})
	}
}

func sq(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return s
}

func TestClipGradNormNonFinite(t *testing.T) {
	params := []*Param{{Name: "a", Grad: []float32{3, float32(math.Inf(1))}, Data: make([]float32, 2)}}
	if norm := ClipGradNorm(params, 1); !math.IsInf(norm, 1) {
		t.Fatalf("norm %v, want +Inf", norm)
	}
	if params[0].Grad[0] != 3 {
		t.Fatalf("non-finite norm scaled gradients: %v", params[0].Grad)
	}
}

func TestCheckFinite(t *testing.T) {
	ok := []*Param{{Name: "a", Grad: []float32{1, 2}}}
	if err := CheckFinite(ok); err != nil {
		t.Fatal(err)
	}
	bad := []*Param{{Name: "a", Grad: []float32{1, 2}}, {Name: "model.norm.weight", Grad: []float32{0, 0, float32(math.Inf(1))}}}
	err := CheckFinite(bad)
	if err == nil || err.Error() != `gradient of "model.norm.weight": +Inf at index 2` {
		t.Fatalf("err = %v", err)
	}
}

// TestAccumulation: two micro-batches whose gradients are summed and then
// scaled by 1/2 equal the mean gradient.
func TestAccumulation(t *testing.T) {
	p := &Param{Name: "w", Data: make([]float32, 2), Grad: []float32{9, 9}}
	params := []*Param{p}
	ZeroGrad(params)
	for _, mb := range [][]float32{{1, 2}, {3, 6}} {
		for i, g := range mb {
			p.Grad[i] += g
		}
	}
	Scale(params, 0.5)
	assertClose(t, "grad", p.Grad, []float32{2, 4}, 0, 0)
}

func TestWarmupCosine(t *testing.T) {
	s := WarmupCosine{Base: 1e-3, Min: 1e-4, Warmup: 4, Total: 14}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		step int
		want float64
	}{
		{-1, 2.5e-4},
		{0, 2.5e-4}, // 1e-3·1/4
		{3, 1e-3},   // last warmup step reaches Base
		{4, 1e-3},   // cosine starts at Base
		{9, 5.5e-4}, // half way: Min + (Base−Min)/2
		{14, 1e-4},
		{100, 1e-4},
	}
	for _, tc := range cases {
		if got := s.LR(tc.step); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("LR(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	var sched Schedule = Constant(3e-4)
	if sched.LR(7) != 3e-4 {
		t.Errorf("Constant LR = %v", sched.LR(7))
	}
}

func TestWarmupCosineValidate(t *testing.T) {
	cases := []struct {
		s       WarmupCosine
		wantSub string
	}{
		{WarmupCosine{Base: -1, Total: 1}, "base -1"},
		{WarmupCosine{Base: 1, Min: 2, Total: 1}, "min 2 not in [0, base 1]"},
		{WarmupCosine{Base: 1, Warmup: -2, Total: 1}, "negative warmup -2"},
		{WarmupCosine{Base: 1, Warmup: 5, Total: 3}, "total 3 is less than warmup 5"},
	}
	for _, tc := range cases {
		err := tc.s.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.wantSub) {
			t.Errorf("%+v: err = %v, want %q", tc.s, err, tc.wantSub)
		}
	}
}
