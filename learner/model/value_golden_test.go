package model

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// The value head against PyTorch (testdata/make_golden.py, qwen2-value):
// values, PPO's clipped value loss through rl.ValueLoss, and the gradient
// of sum(w_logp*logp) + value loss for every parameter, head included, in
// one backward pass. Tolerances are the float32 ones of golden_test.go.
func TestValueHeadGoldenAgainstPyTorch(t *testing.T) {
	const clip = 0.2 // make_golden.py's VALUE_CLIP
	seqs := readSequences(t, "testdata/golden_input.json")
	dir := filepath.Join("testdata", "qwen2-value")
	gold, err := safetensors.ReadFile(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	want := func(n string) []float32 {
		t.Helper()
		v, _, err := gold.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, layout := range []struct {
		name   string
		seqLen int
		pack   bool
	}{{"padded", 0, false}, {"packed", 16, true}} {
		t.Run(layout.name, func(t *testing.T) {
			m, err := Load(dir, cpu.New())
			if err != nil {
				t.Fatal(err)
			}
			if m.Value == nil {
				t.Fatal("checkpoint loaded without its value head")
			}
			bt, err := NewBatch(seqs, layout.seqLen, layout.pack, m.Config.VocabSize)
			if err != nil {
				t.Fatal(err)
			}
			if layout.pack && bt.Rows >= len(seqs) {
				t.Fatalf("packing left %d rows for %d sequences", bt.Rows, len(seqs))
			}
			logp, _, values, err := m.ForwardWithValues(bt)
			if err != nil {
				t.Fatal(err)
			}
			compare(t, "logprobs", logp, want("logprobs"), tolRel, false)
			compare(t, "values", values, want("values"), tolRel, false)
			// Golden per-token inputs are in sequence order; Join lays
			// them out as Outputs.
			old, err := bt.Join(splitLike(bt, want("old_values")))
			if err != nil {
				t.Fatal(err)
			}
			ret, err := bt.Join(splitLike(bt, want("returns")))
			if err != nil {
				t.Fatal(err)
			}
			mask := bt.Split(ones(len(values)))
			vl, err := rl.ValueLoss(rl.ValueBatch{Values: bt.Split(values), OldValues: bt.Split(old),
				Returns: bt.Split(ret), Mask: mask}, clip, rl.TokenMean, rl.CountNorm(mask))
			if err != nil {
				t.Fatal(err)
			}
			compare(t, "vf_loss", []float32{float32(vl.Loss)}, want("vf_loss"), tolRel, false)
			if got, w := vl.ClipFrac(), float64(want("vf_clipfrac")[0]); math.Abs(got-w) > 1e-6 || w == 0 || w == 1 {
				t.Errorf("clip fraction %v, want %v (strictly between 0 and 1)", got, w)
			}
			dv, err := bt.Join(vl.DValues)
			if err != nil {
				t.Fatal(err)
			}
			wl, err := bt.Join(splitLike(bt, want("w_logp")))
			if err != nil {
				t.Fatal(err)
			}
			m.ZeroGrad()
			if err := m.BackwardWithValues(wl, nil, dv); err != nil {
				t.Fatal(err)
			}
			grads := m.Grads()
			n := 0
			for _, gn := range gold.Names() {
				name, ok := strings.CutPrefix(gn, "grad.")
				if !ok {
					continue
				}
				g, ok := grads[name]
				if !ok {
					t.Errorf("no gradient for %s", name)
					continue
				}
				compare(t, gn, g, want(gn), tolGradRel, true)
				n++
			}
			if n != len(m.Params()) {
				t.Errorf("compared %d gradients, model has %d parameters", n, len(m.Params()))
			}
		})
	}
}

// splitLike cuts values given in sequence order (sequence 0's response
// tokens, then sequence 1's, ...) per sequence of bt.
func splitLike(bt *Batch, v []float32) [][]float32 {
	out := make([][]float32, len(bt.Spans))
	lens := make([]int, len(bt.Spans))
	for _, s := range bt.Spans {
		lens[s.Seq] = s.N
	}
	off := 0
	for i, n := range lens {
		out[i] = v[off : off+n]
		off += n
	}
	return out
}
