package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
)

// TestActivationsBF16: keeping the layers' activations as bf16 between
// the passes leaves the forward pass's results unchanged (the layers
// compute in float32), leaves the last layer's gradients unchanged (its
// activations are never rounded), moves the other gradients by the
// rounding only (stated tolerance: 3e-2 of each tensor's largest
// gradient), and holds fewer bytes.
func TestActivationsBF16(t *testing.T) {
	cfg := tinyConfig(Qwen2)
	cfg.NumLayers = 3
	type run struct {
		logp, ent []float32
		grads     map[string][]float32
		bytes     int
	}
	var runs [2]run
	for k, bf16 := range []bool{false, true} {
		m := tinyModel(t, cfg, 4)
		m.ActivationsBF16 = bf16
		rng := rand.New(rand.NewPCG(1, 2))
		bt, err := NewBatch(randomSequences(rng, 4, cfg.VocabSize), 0, true, cfg.VocabSize)
		if err != nil {
			t.Fatal(err)
		}
		r := &runs[k]
		m.ZeroGrad()
		r.logp, r.ent = twoPasses(t, m, bt)
		r.grads = m.Grads()
		if m.pass.bf16 != bf16 {
			t.Fatalf("ActivationsBF16 %v: the pass stores bf16 %v", bf16, m.pass.bf16)
		}
		for _, x := range m.pass.all {
			if _, half := x.(cpu.BF16Tensor); half {
				r.bytes += 2 * x.Len()
			} else {
				r.bytes += 4 * x.Len()
			}
		}
	}
	for i := range runs[0].logp {
		if runs[0].logp[i] != runs[1].logp[i] || runs[0].ent[i] != runs[1].ent[i] {
			t.Fatalf("output %d: logp %v, entropy %v with bf16 activations; %v, %v without", i, runs[1].logp[i], runs[1].ent[i], runs[0].logp[i], runs[0].ent[i])
		}
	}
	last := "model.layers.2."
	var moved float64
	for name, want := range runs[0].grads {
		got := runs[1].grads[name]
		var peak, d float64
		for i := range want {
			peak = max(peak, math.Abs(float64(want[i])))
			d = max(d, math.Abs(float64(got[i]-want[i])))
		}
		switch {
		case strings.HasPrefix(name, last) && d != 0:
			t.Errorf("%s: the last layer's gradient moved by %g: its activations are not rounded", name, d)
		case d > 3e-2*peak || math.IsNaN(d):
			t.Errorf("%s: gradient differs by %g, %.2g of its peak %g (tolerance 3e-2)", name, d, d/peak, peak)
		}
		if peak > 0 {
			moved = max(moved, d/peak)
		}
	}
	if moved < 1e-5 {
		t.Fatalf("bf16 activations moved no gradient by more than %g of its peak: were they rounded at all?", moved)
	}
	if runs[1].bytes >= runs[0].bytes {
		t.Errorf("the pass holds %d bytes with bf16 activations, %d without", runs[1].bytes, runs[0].bytes)
	}
	t.Logf("largest gradient change %.2g of the tensor's peak; pass of %d bytes with bf16 activations, %d without", moved, runs[1].bytes, runs[0].bytes)
}
