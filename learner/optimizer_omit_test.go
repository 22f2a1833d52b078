package learner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkpoint.optimizer false: Save leaves out the AdamW state (and removes
// a stale one), the state file says so, and Load starts AdamW afresh at
// the checkpoint's weights and step: the next step equals that of a
// learner given the same weights and a fresh optimizer. A checkpoint that
// lacks the state without saying so is still refused.
func TestCheckpointWithoutOptimizer(t *testing.T) {
	c := tinyConfig(GRPO)
	c.OmitOptimizer = true
	a := newLearner(t, c)
	b := groupBatch()
	for range 2 {
		if _, err := a.Train(b); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, OptimizerFile), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, OptimizerFile)); !os.IsNotExist(err) {
		t.Errorf("%s after a save without optimizer state: %v, want none", OptimizerFile, err)
	}
	if omitted, err := OptimizerOmitted(dir); err != nil || !omitted {
		t.Errorf("OptimizerOmitted = %v, %v; want true", omitted, err)
	}
	r := loaded(t, c, dir)
	if st := r.Optimizer().State(); r.Step() != 2 || st.Step != 0 || len(st.Tensors) != 0 {
		t.Errorf("loaded: step %d, optimizer step %d with %d tensors; want 2, a fresh optimizer", r.Step(), st.Step, len(st.Tensors))
	}
	// The same weights with a fresh AdamW, by another road: a new learner
	// built from the checkpoint directory as its model (constant rate, so
	// its step 0 trains at the rate of step 2).
	fresh := tinyConfig(GRPO)
	fresh.Model, fresh.ModelDir = nil, dir
	g := newLearner(t, fresh)
	if _, err := g.Train(b); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Train(b); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(g.PolicyWeights(), r.PolicyWeights()); d != 0 {
		t.Errorf("resumed without optimizer state: weights differ from a fresh optimizer's step by %v", d)
	}
	if _, err := a.Train(b); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(a.PolicyWeights(), r.PolicyWeights()); d == 0 {
		t.Error("the kept and the restarted moments gave the same step: the test would not see a kept state")
	}

	// A checkpoint cut short (no state, no mark) is refused.
	c.OmitOptimizer = false
	cut := t.TempDir()
	if err := newLearner(t, c).SaveModel(cut); err != nil {
		t.Fatal(err)
	}
	if err := newLearner(t, c).Load(cut); err == nil || !strings.Contains(err.Error(), "no "+OptimizerFile) {
		t.Errorf("a checkpoint without optimizer state or mark: %v, want an error naming %s", err, OptimizerFile)
	}
}
