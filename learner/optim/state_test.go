package optim

import (
	"strings"
	"testing"
)

// TestStateRoundTrip steps one optimizer, saves its state, loads it into a
// fresh one, steps both again and requires identical weights.
func TestStateRoundTrip(t *testing.T) {
	mk := func() []*Param {
		return []*Param{
			{Name: "b", Data: []float32{1, 2, 3}, Grad: []float32{0.1, -0.2, 0.3}},
			{Name: "a", Data: []float32{-1, 4}, Grad: []float32{0.5, 0.25}},
		}
	}
	p1, p2 := mk(), mk()
	o1 := NewAdamW(0.9, 0.95, 1e-8, 0.1)
	for range 3 {
		if err := o1.Step(p1, 1e-2); err != nil {
			t.Fatal(err)
		}
	}
	st := o1.State()
	var names []string
	for _, tn := range st.Tensors {
		names = append(names, tn.Name)
	}
	if got, want := strings.Join(names, ","), "exp_avg.a,exp_avg_sq.a,exp_avg.b,exp_avg_sq.b"; got != want {
		t.Fatalf("state tensors %s, want %s", got, want)
	}
	for i := range p2 {
		copy(p2[i].Data, p1[i].Data)
	}
	o2 := NewAdamW(0.9, 0.95, 1e-8, 0.1)
	if err := o2.LoadState(p2, st); err != nil {
		t.Fatal(err)
	}
	if o2.StepCount() != 3 {
		t.Fatalf("loaded StepCount %d, want 3", o2.StepCount())
	}
	if err := o1.Step(p1, 1e-2); err != nil {
		t.Fatal(err)
	}
	if err := o2.Step(p2, 1e-2); err != nil {
		t.Fatal(err)
	}
	for i := range p1 {
		assertClose(t, p1[i].Name, p2[i].Data, p1[i].Data, 0, 0)
	}
}

func TestLoadStateErrors(t *testing.T) {
	params := []*Param{{Name: "w", Data: make([]float32, 2), Grad: make([]float32, 2)}}
	two := []float32{0, 0}
	cases := []struct {
		name    string
		state   AdamWState
		wantSub string
	}{
		{"missing second moment", AdamWState{Step: 1, Tensors: []Tensor{{"exp_avg.w", two}}}, `tensor "exp_avg_sq.w" missing`},
		{"wrong size", AdamWState{Step: 1, Tensors: []Tensor{{"exp_avg.w", two}, {"exp_avg_sq.w", []float32{1}}}}, `tensor "exp_avg_sq.w" has 1 elements, param "w" has 2`},
		{"extra param", AdamWState{Step: 1, Tensors: []Tensor{{"exp_avg.w", two}, {"exp_avg_sq.w", two}, {"exp_avg.v", two}}}, `tensor "exp_avg.v": moments of a param not being trained`},
		{"unknown tensor", AdamWState{Step: 1, Tensors: []Tensor{{"exp_avg.w", two}, {"exp_avg_sq.w", two}, {"step", []float32{1}}}}, `tensor "step": unknown tensor`},
		{"duplicate", AdamWState{Step: 1, Tensors: []Tensor{{"exp_avg.w", two}, {"exp_avg.w", two}}}, `tensor "exp_avg.w" appears twice`},
		{"negative step", AdamWState{Step: -1}, "negative step -1"},
		{"nan moment", AdamWState{Step: 1, Tensors: []Tensor{{"exp_avg.w", []float32{0, float32(nan())}}, {"exp_avg_sq.w", two}}}, `tensor "exp_avg.w": NaN at index 1`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewAdamW(0.9, 0.999, 1e-8, 0)
			err := o.LoadState(params, tc.state)
			if err == nil || !strings.Contains(err.Error(), tc.wantSub) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantSub)
			}
			if o.StepCount() != 0 || len(o.State().Tensors) != 0 {
				t.Fatalf("failed LoadState changed the optimizer")
			}
		})
	}
}

func TestLoadFreshState(t *testing.T) {
	params := []*Param{{Name: "w", Data: []float32{1}, Grad: []float32{1}}}
	o := NewAdamW(0.9, 0.999, 1e-8, 0)
	if err := o.Step(params, 0.1); err != nil {
		t.Fatal(err)
	}
	if err := o.LoadState(params, AdamWState{}); err != nil {
		t.Fatal(err)
	}
	if o.StepCount() != 0 || len(o.State().Tensors) != 0 {
		t.Fatalf("fresh state not loaded: step %d, %d tensors", o.StepCount(), len(o.State().Tensors))
	}
}
