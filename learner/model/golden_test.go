package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// Tolerances against PyTorch (testdata/make_golden.py). Both sides compute
// in float32; the bf16 checkpoint is loaded into float32 master weights
// exactly as torch upcasts it, so the same bounds hold. Values are compared
// with |got-want| <= abs + rel*|want|; gradients use the tensor's largest
// magnitude as the scale, since tiny entries carry summation noise.
const (
	tolAbs     = 1e-5
	tolRel     = 1e-4
	tolGradRel = 1e-4
)

type goldenInput struct {
	Sequences []struct {
		Prompt   []int32 `json:"prompt"`
		Response []int32 `json:"response"`
	} `json:"sequences"`
}

func readSequences(t *testing.T, path string) []Sequence {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var in goldenInput
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	var seqs []Sequence
	for _, s := range in.Sequences {
		seqs = append(seqs, Sequence{Prompt: s.Prompt, Response: s.Response})
	}
	return seqs
}

func compare(t *testing.T, what string, got, want []float32, rel float32, scaleByMax bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	var scale float32
	for _, w := range want {
		scale = max(scale, float32(math.Abs(float64(w))))
	}
	bad := 0
	for i := range want {
		ref := float32(math.Abs(float64(want[i])))
		if scaleByMax {
			ref = scale
		}
		if d := float32(math.Abs(float64(got[i] - want[i]))); !(d <= tolAbs+rel*ref) {
			if bad < 3 {
				t.Errorf("%s[%d] = %v, want %v (diff %g)", what, i, got[i], want[i], d)
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d of %d values out of tolerance", what, bad, len(want))
	}
}

func TestGoldenAgainstPyTorch(t *testing.T) {
	seqs := readSequences(t, "testdata/golden_input.json")
	for _, name := range []string{"qwen2", "llama", "qwen2-bf16"} {
		for _, layout := range []struct {
			name   string
			seqLen int
			pack   bool
		}{{"padded", 0, false}, {"packed", 16, true}} {
			t.Run(name+"/"+layout.name, func(t *testing.T) {
				dir := filepath.Join("testdata", name)
				m, err := Load(dir, cpu.New())
				if err != nil {
					t.Fatal(err)
				}
				gold, err := safetensors.ReadFile(filepath.Join(dir, "golden.safetensors"))
				if err != nil {
					t.Fatal(err)
				}
				want := func(n string) []float32 {
					v, _, err := gold.Float32(n)
					if err != nil {
						t.Fatal(err)
					}
					return v
				}
				bt, err := NewBatch(seqs, layout.seqLen, layout.pack, m.Config.VocabSize)
				if err != nil {
					t.Fatal(err)
				}
				if layout.pack && bt.Rows >= len(seqs) {
					t.Fatalf("packing left %d rows for %d sequences", bt.Rows, len(seqs))
				}
				logp, ent, err := m.Forward(bt)
				if err != nil {
					t.Fatal(err)
				}
				compare(t, "logits", m.Logits(), want("logits"), tolRel, false)
				compare(t, "logprobs", logp, want("logprobs"), tolRel, false)
				compare(t, "entropy", ent, want("entropy"), tolRel, false)
				m.ZeroGrad()
				if err := m.Backward(want("w_logp"), want("w_ent")); err != nil {
					t.Fatal(err)
				}
				grads := m.Grads()
				n := 0
				for _, gn := range gold.Names() {
					if len(gn) > 5 && gn[:5] == "grad." {
						g, ok := grads[gn[5:]]
						if !ok {
							t.Errorf("no gradient for %s", gn[5:])
							continue
						}
						compare(t, gn, g, want(gn), tolGradRel, true)
						n++
					}
				}
				if n != len(m.Params()) {
					t.Errorf("compared %d gradients, model has %d parameters", n, len(m.Params()))
				}
			})
		}
	}
}
