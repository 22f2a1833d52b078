package optim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type adamwGolden struct {
	Beta1, Beta2, Eps float64
	WeightDecay       float64 `json:"weight_decay"`
	MaxNorm           float64 `json:"max_norm"`
	Names             []string
	Init              map[string][]float32
	Steps             []struct {
		LR        float64 `json:"lr"`
		Grads     map[string][]float32
		TotalNorm float64 `json:"total_norm"`
		Params    map[string][]float32
	}
	State map[string][]float32
}

func loadAdamWGolden(t *testing.T) adamwGolden {
	t.Helper()
	path := filepath.Join("testdata", "adamw_golden.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var g adamwGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(g.Steps) == 0 || len(g.Names) == 0 {
		t.Fatalf("%s: no steps or params", path)
	}
	return g
}

// assertClose fails if got and want differ anywhere by more than
// atol + rtol·|want|.
func assertClose(t *testing.T, what string, got, want []float32, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > atol+rtol*math.Abs(float64(want[i])) {
			t.Fatalf("%s[%d] = %v, want %v (diff %g)", what, i, got[i], want[i], d)
		}
	}
}

// TestAdamWGolden replays testdata/adamw_golden.json, written by
// adamw_golden.py from torch.optim.AdamW and clip_grad_norm_. Tolerance:
// float32 rounding over four steps, 1e-6 absolute + 1e-5 relative.
func TestAdamWGolden(t *testing.T) {
	g := loadAdamWGolden(t)
	params := make([]*Param, len(g.Names))
	for i, n := range g.Names {
		params[i] = &Param{Name: n, Data: append([]float32(nil), g.Init[n]...), Grad: make([]float32, len(g.Init[n]))}
	}
	opt := NewAdamW(g.Beta1, g.Beta2, g.Eps, g.WeightDecay)
	for si, st := range g.Steps {
		for _, p := range params {
			copy(p.Grad, st.Grads[p.Name])
		}
		norm := ClipGradNorm(params, g.MaxNorm)
		if math.Abs(norm-st.TotalNorm) > 1e-5*st.TotalNorm {
			t.Errorf("step %d: total norm %v, torch %v", si+1, norm, st.TotalNorm)
		}
		if err := opt.Step(params, st.LR); err != nil {
			t.Fatalf("step %d: %v", si+1, err)
		}
		for _, p := range params {
			assertClose(t, fmt.Sprintf("step %d %s", si+1, p.Name), p.Data, st.Params[p.Name], 1e-6, 1e-5)
		}
	}
	if opt.StepCount() != len(g.Steps) {
		t.Errorf("StepCount = %d, want %d", opt.StepCount(), len(g.Steps))
	}
	s := opt.State()
	if s.Step != len(g.Steps) || len(s.Tensors) != len(g.State) {
		t.Fatalf("State: step %d with %d tensors, want %d with %d", s.Step, len(s.Tensors), len(g.Steps), len(g.State))
	}
	for _, tn := range s.Tensors {
		want, ok := g.State[tn.Name]
		if !ok {
			t.Fatalf("State has %q, torch has no such state", tn.Name)
		}
		assertClose(t, tn.Name, tn.Data, want, 1e-7, 1e-5)
	}
}

// TestAdamWHandWorked checks one update worked by hand. w=1, g=0.5, lr=0.1,
// λ=0.5, β=(0.9,0.99), ε=0:
//
//	decay: 1·(1−0.1·0.5) = 0.95
//	m = 0.1·0.5 = 0.05, v = 0.01·0.25 = 0.0025
//	m̂ = 0.05/0.1 = 0.5, v̂ = 0.0025/0.01 = 0.25, √v̂ = 0.5
//	w = 0.95 − 0.1·0.5/0.5 = 0.85
func TestAdamWHandWorked(t *testing.T) {
	p := &Param{Name: "w", Data: []float32{1, -1}, Grad: []float32{0.5, -0.5}}
	opt := NewAdamW(0.9, 0.99, 0, 0.5)
	if err := opt.Step([]*Param{p}, 0.1); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "w", p.Data, []float32{0.85, -0.85}, 1e-6, 0)
	st := opt.State()
	assertClose(t, "exp_avg.w", st.Tensors[0].Data, []float32{0.05, -0.05}, 1e-8, 1e-6)
	assertClose(t, "exp_avg_sq.w", st.Tensors[1].Data, []float32{0.0025, 0.0025}, 1e-9, 1e-6)
}

func TestAdamWRefusesNonFinite(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(-1))
	cases := []struct {
		name    string
		grads   [][]float32
		wantSub string
	}{
		{"nan in second tensor", [][]float32{{1, 2}, {0, nan, 3}}, `adamw step 2: refusing non-finite gradient of "b": NaN at index 1`},
		{"inf in first tensor", [][]float32{{1, inf}, {0, 1, 3}}, `adamw step 2: refusing non-finite gradient of "a": -Inf at index 1`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := &Param{Name: "a", Data: []float32{1, 2}, Grad: []float32{0.1, 0.2}}
			b := &Param{Name: "b", Data: []float32{3, 4, 5}, Grad: []float32{0.3, 0.4, 0.5}}
			params := []*Param{a, b}
			opt := NewAdamW(0.9, 0.999, 1e-8, 0.01)
			if err := opt.Step(params, 1e-3); err != nil {
				t.Fatal(err)
			}
			before := snapshot(params, opt)
			copy(a.Grad, tc.grads[0])
			copy(b.Grad, tc.grads[1])
			err := opt.Step(params, 1e-3)
			if err == nil || !strings.Contains(err.Error(), tc.wantSub) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantSub)
			}
			if got := snapshot(params, opt); got != before {
				t.Fatalf("refused step changed state:\n got %s\nwant %s", got, before)
			}
		})
	}
}

// snapshot renders weights, moments and step count for comparison.
func snapshot(params []*Param, opt *AdamW) string {
	var b strings.Builder
	for _, p := range params {
		fmt.Fprintf(&b, "%s=%v ", p.Name, p.Data)
	}
	st := opt.State()
	fmt.Fprintf(&b, "step=%d ", st.Step)
	for _, tn := range st.Tensors {
		fmt.Fprintf(&b, "%s=%v ", tn.Name, tn.Data)
	}
	return b.String()
}

func TestAdamWBadInput(t *testing.T) {
	cases := []struct {
		name    string
		opt     *AdamW
		params  []*Param
		lr      float64
		wantSub string
	}{
		{"grad length", NewAdamW(0.9, 0.999, 1e-8, 0), []*Param{{Name: "x", Data: make([]float32, 3), Grad: make([]float32, 2)}}, 1e-3, `param "x": 3 weights but 2 gradients`},
		{"duplicate name", NewAdamW(0.9, 0.999, 1e-8, 0), []*Param{{Name: "x"}, {Name: "x"}}, 1e-3, `param "x" appears twice`},
		{"no name", NewAdamW(0.9, 0.999, 1e-8, 0), []*Param{{}}, 1e-3, "param 0 has no name"},
		{"beta1", NewAdamW(1, 0.999, 1e-8, 0), nil, 1e-3, "beta1 1 not in [0, 1)"},
		{"beta2", NewAdamW(0.9, -0.1, 1e-8, 0), nil, 1e-3, "beta2 -0.1 not in [0, 1)"},
		{"lr nan", NewAdamW(0.9, 0.999, 1e-8, 0), nil, math.NaN(), "learning rate NaN"},
		{"negative decay", NewAdamW(0.9, 0.999, 1e-8, -1), nil, 1e-3, "weight decay -1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opt.Step(tc.params, tc.lr)
			if err == nil || !strings.Contains(err.Error(), tc.wantSub) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantSub)
			}
			if tc.opt.StepCount() != 0 {
				t.Fatalf("StepCount = %d after refused step", tc.opt.StepCount())
			}
		})
	}
}

func TestAdamWResizedParam(t *testing.T) {
	opt := NewAdamW(0.9, 0.999, 1e-8, 0)
	p := &Param{Name: "x", Data: make([]float32, 2), Grad: []float32{1, 1}}
	if err := opt.Step([]*Param{p}, 1e-3); err != nil {
		t.Fatal(err)
	}
	p.Data, p.Grad = make([]float32, 3), make([]float32, 3)
	err := opt.Step([]*Param{p}, 1e-3)
	if err == nil || !strings.Contains(err.Error(), `param "x" has 3 elements but its moments have 2`) {
		t.Fatalf("err = %v", err)
	}
}

// TestAdamWParallelMatchesSerial steps a tensor large enough to be split
// over goroutines and compares it with the serial loop element by element.
func TestAdamWParallelMatchesSerial(t *testing.T) {
	n := parallelMin + 12345
	mk := func() *Param {
		p := &Param{Name: "big", Data: make([]float32, n), Grad: make([]float32, n)}
		for i := range n {
			p.Data[i] = float32(math.Sin(float64(i)))
			p.Grad[i] = float32(math.Cos(float64(i) * 0.7))
		}
		return p
	}
	par, ser := mk(), mk()
	opt := NewAdamW(0.9, 0.999, 1e-8, 0.01)
	if err := opt.Step([]*Param{par}, 1e-2); err != nil {
		t.Fatal(err)
	}
	m := make([]float32, n)
	v := make([]float32, n)
	ref := NewAdamW(0.9, 0.999, 1e-8, 0.01)
	ref.step = 1
	ref.coefficients(1e-2).applyRange(ser.Data, ser.Grad, m, v)
	for i := range n {
		if par.Data[i] != ser.Data[i] {
			t.Fatalf("index %d: parallel %v, serial %v", i, par.Data[i], ser.Data[i])
		}
	}
}

func BenchmarkAdamWStep(b *testing.B) {
	for _, n := range []int{1 << 12, 1 << 15, 1 << 17, 1 << 20, 1 << 22} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			p := &Param{Name: "w", Data: make([]float32, n), Grad: make([]float32, n)}
			for i := range p.Grad {
				p.Grad[i] = float32(i%7) * 0.01
			}
			opt := NewAdamW(0.9, 0.999, 1e-8, 0.01)
			b.SetBytes(int64(n) * 4 * 4)
			for b.Loop() {
				if err := opt.Step([]*Param{p}, 1e-4); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
