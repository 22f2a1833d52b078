package train

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/rl"
)

// A tiny PPO run with the KL as a reward penalty: metrics.jsonl has
// kl_penalty = kl_coef·ref_kl at RL steps, above 0 once the policy has
// moved from the reference (the warmed-up policy), and none at SFT steps.
func TestPPORunKLInReward(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := t.TempDir()
	c := tinyRun(out)
	c.Learner.Algorithm = learner.PPO
	c.Learner.Loss.KLCoef, c.Learner.Loss.KL, c.Learner.KLInReward = 0.2, rl.K1, true
	if _, err := Run(ctx, c); err != nil {
		t.Fatal(err)
	}
	lines := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
	if len(lines) != c.WarmupSteps+c.Steps {
		t.Fatalf("%d metrics lines, want %d", len(lines), c.WarmupSteps+c.Steps)
	}
	for i, m := range lines {
		pen, ok := m["kl_penalty"].(float64)
		if i < c.WarmupSteps {
			if ok {
				t.Errorf("SFT step %d has kl_penalty %v", i+1, pen)
			}
			continue
		}
		if !ok {
			t.Fatalf("RL step %d has no kl_penalty: %v", i+1, m)
		}
		if kl := m["ref_kl"].(float64); math.Abs(pen-0.2*kl) > 1e-9 {
			t.Errorf("step %d: kl_penalty %v, 0.2·ref_kl %v", i+1, pen, 0.2*kl)
		}
		if i == len(lines)-1 && !(pen > 0) {
			t.Errorf("last step's kl_penalty %v, want > 0", pen)
		}
	}
}
