package train

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
)

// MLMT's feedback policy trains with its own algorithm and learning rate
// (FeedbackPolicy.Algorithm, LR): solver PPO with feedback GRPO, solver
// GRPO with feedback PPO, and one algorithm at two learning rates. At RL
// steps the critic's metrics appear for exactly the PPO policies, the
// checkpoints carry a value head for exactly those, and metrics.jsonl's
// lr and feedback_lr are each policy's own.
func TestMLMTFeedbackAlgorithm(t *testing.T) {
	for _, tc := range []struct {
		name           string
		solver, fb     string
		solverLR, fbLR float64 // fbLR 0: the solver's
	}{
		{"solver-ppo-feedback-grpo", learner.PPO, learner.GRPO, 1e-4, 0},
		{"solver-grpo-feedback-ppo", learner.GRPO, learner.PPO, 1e-4, 0},
		{"grpo-two-lrs", learner.GRPO, "", 1e-4, 3e-4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out := t.TempDir()
			cfg := tinyMLMT(out)
			cfg.Steps = 2
			cfg.Learner.Algorithm, cfg.Learner.LR = tc.solver, tc.solverLR
			cfg.Feedback.Algorithm, cfg.Feedback.LR = tc.fb, tc.fbLR
			if _, err := Run(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			fbAlgo, fbLR := tc.fb, tc.fbLR
			if fbAlgo == "" {
				fbAlgo = tc.solver
			}
			if fbLR == 0 {
				fbLR = tc.solverLR
			}
			rlSteps := 0
			for _, m := range readMetrics(t, filepath.Join(out, "metrics.jsonl")) {
				if m["phase"] != "rl" {
					continue
				}
				rlSteps++
				_, solverCritic := m["value_loss"].(float64)
				_, fbCritic := m["feedback_value_loss"].(float64)
				if solverCritic != (tc.solver == learner.PPO) || fbCritic != (fbAlgo == learner.PPO) {
					t.Errorf("step %v: value_loss %v, feedback_value_loss %v; want the critic's metrics for the PPO policies only (solver %s, feedback %s)",
						m["step"], m["value_loss"], m["feedback_value_loss"], tc.solver, fbAlgo)
				}
				if m["lr"] != tc.solverLR || m["feedback_lr"] != fbLR {
					t.Errorf("step %v: lr %v, feedback_lr %v; want %g and %g", m["step"], m["lr"], m["feedback_lr"], tc.solverLR, fbLR)
				}
			}
			if rlSteps != cfg.Steps {
				t.Fatalf("%d RL steps logged, want %d", rlSteps, cfg.Steps)
			}
			last := filepath.Join(out, "checkpoints", "step-4")
			for _, c := range []struct {
				sub, algo string
			}{{"", tc.solver}, {FeedbackDir, fbAlgo}} {
				m, err := model.Load(filepath.Join(last, c.sub), cpu.New())
				if err != nil {
					t.Fatal(err)
				}
				if (m.Value != nil) != (c.algo == learner.PPO) {
					t.Errorf("checkpoint %q (%s): value head present %v", c.sub, c.algo, m.Value != nil)
				}
			}
		})
	}
}

// A feedback algorithm the learner does not know, or a negative
// learning rate, is refused before anything starts, naming the feedback
// policy.
func TestMLMTFeedbackAlgorithmErrors(t *testing.T) {
	for _, c := range []struct {
		edit func(*FeedbackPolicy)
		want string
	}{
		{func(f *FeedbackPolicy) { f.Algorithm = "dpo" }, "feedback"},
		{func(f *FeedbackPolicy) { f.LR = -1 }, "feedback.lr"},
	} {
		cfg := tinyMLMT(t.TempDir())
		c.edit(cfg.Feedback)
		_, err := Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one naming %s", err, c.want)
		}
	}
}
