package train

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/logbuf"
	"github.com/rlnode/rlnode/learner"
)

// A run saving checkpoints without optimizer state (checkpoint.optimizer
// false): no optimizer file in its checkpoints, and a run resumed from one
// goes on to the last step with AdamW restarted, saying so in the log.
func TestResumeWithoutOptimizerState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(out string) Config {
		c := tinyRun(out)
		c.Learner.Algorithm = learner.RWSFT
		c.Learner.OmitOptimizer = true
		return c
	}
	full := t.TempDir()
	if _, err := Run(ctx, run(full)); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(full, "checkpoints", "step-4")
	if _, err := os.Stat(filepath.Join(ck, learner.OptimizerFile)); !os.IsNotExist(err) {
		t.Errorf("%s in a checkpoint without optimizer state: %v", learner.OptimizerFile, err)
	}
	var logs logbuf.Buffer
	cfg := run(t.TempDir())
	cfg.Resume = ck
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 5 {
		t.Errorf("resumed run ended at step %d, want 5", res.Steps)
	}
	if !strings.Contains(logs.String(), "checkpoint has no optimizer state (checkpoint.optimizer: false)") {
		t.Errorf("no warning about the restarted optimizer in the log:\n%s", logs.String())
	}
}
