package optim

import (
	"math"
	"testing"
)

// TestAdvanceMatchesStep applies Advance's coefficients by the formula
// Step documents and compares with Step over three steps; a refused
// learning rate changes neither the count nor the moments.
func TestAdvanceMatchesStep(t *testing.T) {
	ref := NewAdamW(0.9, 0.95, 1e-8, 0.1)
	ext := NewAdamW(0.9, 0.95, 1e-8, 0.1)
	w := []float32{0.5, -1.25, 2, 0}
	p := &Param{Name: "w", Data: append([]float32(nil), w...)}
	m, v := make([]float32, len(w)), make([]float32, len(w))
	for step, g := range [][]float32{{0.1, -0.2, 0.3, 0}, {-1, 0.5, 0.25, 1e-3}, {2, 2, -2, 0.5}} {
		p.Grad = append([]float32(nil), g...)
		if err := ref.Step([]*Param{p}, 1e-2); err != nil {
			t.Fatal(err)
		}
		c, err := ext.Advance(1e-2)
		if err != nil {
			t.Fatal(err)
		}
		for i := range w {
			wi := w[i] * c.Decay
			m[i] = m[i]*c.Beta1 + g[i]*c.OneMinusB1
			v[i] = v[i]*c.Beta2 + g[i]*g[i]*c.OneMinusB2
			w[i] = wi - c.StepSize*(m[i]/(float32(math.Sqrt(float64(v[i])))/c.BC2Sqrt+c.Eps))
		}
		for i := range w {
			if w[i] != p.Data[i] {
				t.Fatalf("step %d: weight %d is %v by Advance's coefficients, %v by Step", step+1, i, w[i], p.Data[i])
			}
		}
	}
	if ext.StepCount() != 3 {
		t.Fatalf("step count %d after three Advances", ext.StepCount())
	}
	for _, lr := range []float64{-1, math.NaN(), math.Inf(1)} {
		if _, err := ext.Advance(lr); err == nil {
			t.Errorf("Advance(%v) accepted", lr)
		}
	}
	if ext.StepCount() != 3 {
		t.Errorf("step count %d after refused Advances, want 3", ext.StepCount())
	}
	if _, err := (&AdamW{Beta1: 1, Beta2: 0.9}).Advance(1e-3); err == nil {
		t.Error("beta1 1 accepted")
	}
}
