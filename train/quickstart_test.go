package train

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestQuickstartLearns runs the full quickstart preset (minutes on a
// 2-core machine) and logs its learning curve. It runs only with
// RLNODE_QUICKSTART=DIR set (the run directory); CI skips it.
func TestQuickstartLearns(t *testing.T) {
	out := os.Getenv("RLNODE_QUICKSTART")
	if out == "" {
		t.Skip("set RLNODE_QUICKSTART=DIR to run the quickstart recipe")
	}
	cfg := Quickstart(out)
	cfg.Progress = func(m Metrics) {
		if m.EvalAccuracy != nil || m.Step%5 == 0 {
			ev := -1.0
			if m.EvalAccuracy != nil {
				ev = *m.EvalAccuracy
			}
			rw := -1.0
			if m.RewardMean != nil {
				rw = *m.RewardMean
			}
			t.Logf("step %3d %-6s loss %.4f reward %.3f eval %.3f ent %.3f len %.1f all %.2f none %.2f gen %.2fs train %.2fs elapsed %.0fs",
				m.Step, m.Phase, m.Loss, rw, ev, m.Entropy, m.ResponseLenMean, m.SolvedAllFrac, m.SolvedNoneFrac, m.GenSeconds, m.TrainSeconds, m.ElapsedSeconds)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("post-warm-up eval %.3f → final %.3f on %d held-out problems, %d steps", res.PostWarmupEval, res.FinalEval, res.EvalProblems, res.Steps)
}
