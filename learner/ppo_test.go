package learner

import (
	"strings"
	"testing"
)

// PPO's critic learns a fixed batch: over repeated Train calls the value
// loss falls and the explained variance of the returns rises toward 1.
// Epochs×MiniBatches optimizer steps per call.
func TestPPOCriticLearns(t *testing.T) {
	c := tinyConfig(PPO)
	c.LR, c.MinLR = 3e-3, 3e-3
	c.MiniBatches, c.Epochs = 2, 2
	l := newLearner(t, c)
	b := groupBatch()
	var first, last Stats
	for i := range 30 {
		st, err := l.Train(b)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = st
		}
		last = st
	}
	t.Logf("value loss %.4g → %.4g, explained variance %.4g → %.4g", first.ValueLoss, last.ValueLoss, first.ExplainedVar, last.ExplainedVar)
	if want := 30 * 2 * 2; last.Step != want {
		t.Errorf("step %d after 30 calls of 2 epochs × 2 mini-batches, want %d", last.Step, want)
	}
	if !(last.ValueLoss < first.ValueLoss/2) {
		t.Errorf("value loss %g → %g: want it halved", first.ValueLoss, last.ValueLoss)
	}
	if !(last.ExplainedVar > first.ExplainedVar) || !(last.ExplainedVar <= 1) {
		t.Errorf("explained variance %g → %g: want a rise, ≤ 1", first.ExplainedVar, last.ExplainedVar)
	}
}

func TestEpochsValidated(t *testing.T) {
	c := tinyConfig(PPO)
	c.Epochs = -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "epochs") {
		t.Errorf("epochs -1: error %v, want one naming epochs", err)
	}
}
