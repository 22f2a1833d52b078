package train

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
)

// tinyMLMTPPO is tinyMLMT trained with PPO: both policies get a value
// head; two mini-batches per step.
func tinyMLMTPPO(out string) Config {
	c := tinyMLMT(out)
	c.Learner.Algorithm = learner.PPO
	c.Learner.MiniBatches = 2
	c.Steps, c.CheckpointEvery = 3, 1
	return c
}

// MLMT and SCoRe with PPO: the critic's metrics at RL steps (the feedback
// policy's too), checkpoints whose solver and feedback policy both carry
// a value head, checkpoints the native engine evaluates, and a resumed
// run that ends at the uninterrupted run's weights, value heads included.
func TestMultiTurnPPO(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"mlmt", func(*Config) {}},
		{"score", func(c *Config) {
			c.Episode, c.Feedback, c.ReviewTemplate = EpisodeSCoRe, nil, "check and answer again"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			full := t.TempDir()
			cfg := tinyMLMTPPO(full)
			tc.edit(&cfg)
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Steps != 5 {
				t.Fatalf("%d steps, want 5", res.Steps)
			}
			feedback := cfg.Feedback != nil
			for _, m := range readMetrics(t, filepath.Join(full, "metrics.jsonl")) {
				rl := m["phase"] == "rl"
				for _, k := range []string{"value_loss", "explained_var", "value_clip_frac"} {
					if _, ok := m[k].(float64); ok != rl {
						t.Errorf("step %v (%v): %s = %v", m["step"], m["phase"], k, m[k])
					}
				}
				for _, k := range []string{"feedback_value_loss", "feedback_explained_var"} {
					if _, ok := m[k].(float64); ok != (rl && feedback) {
						t.Errorf("step %v (%v): %s = %v", m["step"], m["phase"], k, m[k])
					}
				}
				if rl && m["seqs"] != float64(2*4*4) {
					t.Errorf("step %v: the solver trained on %v sequences, want both turns (32)", m["step"], m["seqs"])
				}
			}
			last := filepath.Join(full, "checkpoints", "step-5")
			subs := []string{""}
			if feedback {
				subs = append(subs, FeedbackDir)
			}
			for _, sub := range subs {
				w := loadAll(t, filepath.Join(last, sub)) // fails without a value head
				if len(w[model.ValueHeadWeight]) != cfg.Model.HiddenSize {
					t.Errorf("%q: value head of %d weights, want %d", sub, len(w[model.ValueHeadWeight]), cfg.Model.HiddenSize)
				}
			}
			if _, err := EvaluateCheckpoint(ctx, cfg, last); err != nil {
				t.Errorf("evaluate the PPO checkpoint: %v", err)
			}

			resumed := t.TempDir()
			rc := tinyMLMTPPO(resumed)
			tc.edit(&rc)
			rc.Resume = filepath.Join(full, "checkpoints", "step-4")
			if _, err := Run(ctx, rc); err != nil {
				t.Fatal(err)
			}
			for _, sub := range subs {
				a := loadAll(t, filepath.Join(last, sub))
				b := loadAll(t, filepath.Join(resumed, "checkpoints", "step-5", sub))
				if !sameWeights(a, b) {
					t.Errorf("%q: the resumed run's weights (value head included) differ from the uninterrupted run's", sub)
				}
			}
		})
	}
}
