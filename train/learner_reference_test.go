package train

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
)

// A run whose KL term has a given reference model: the first RL step's
// ref_kl is to that model (against the default reference, the warmed-up
// policy, it is 0), checkpoints name it, and the feedback policy of a
// multi-turn run keeps its own initial weights as reference.
func TestRunWithReferenceModel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := tinyRun("")
	refDir := t.TempDir()
	m, err := model.New(*base.Model, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	m.InitRandom(99)
	if err := m.Save(refDir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.BuiltinSized(base.Model.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.Save(filepath.Join(refDir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	firstRL := func(ref string) float64 {
		out := t.TempDir()
		c := tinyRun(out)
		c.Learner.Loss.KLCoef, c.Learner.Loss.KL, c.Learner.RefModelDir = 0.05, rl.K3, ref
		if _, err := Run(ctx, c); err != nil {
			t.Fatal(err)
		}
		lines := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
		if len(lines) <= c.WarmupSteps {
			t.Fatalf("%d metrics lines", len(lines))
		}
		js, err := os.ReadFile(filepath.Join(out, "checkpoints", "step-5", learner.StateFile))
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Reference string `json:"reference_model"`
		}
		if err := json.Unmarshal(js, &st); err != nil || st.Reference != ref {
			t.Errorf("checkpoint reference_model %q (%v), want %q", st.Reference, err, ref)
		}
		return lines[c.WarmupSteps]["ref_kl"].(float64)
	}
	if kl := firstRL(refDir); !(kl > 1e-3) {
		t.Errorf("first RL step's KL to the given reference %v, want > 0", kl)
	}
	if kl := firstRL(""); kl != 0 {
		t.Errorf("first RL step's KL to the warmed-up policy %v, want 0", kl)
	}

	c := tinyRun("")
	c.Learner.RefModelDir = refDir
	if fb := (&FeedbackPolicy{}).learnerConfig(c); fb.RefModelDir != "" {
		t.Errorf("the feedback policy's learner has reference %q, want its initial weights", fb.RefModelDir)
	}
}
