package train

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A stop asked during a step (Ctrl-C, SIGTERM) ends the run after that
// step with a checkpoint of it, in the warm-up as in RL (with batches
// drawn ahead), and a run resumed from that checkpoint ends on the same
// bytes as the uninterrupted run. So does a stop asked during a step's
// end (the weight push, the evaluation): one asked during the evaluation
// after the warm-up once went on to train the next step and finish. One
// asked once a step's checkpoint is written ends the run there.
func TestStopCheckpointsTheStepThenResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := t.TempDir()
	if _, err := Run(ctx, tinyRun(full)); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(full, "checkpoints", "step-5")
	for _, c := range []struct {
		name   string
		stopAt int  // the stop is asked while this step runs
		finish bool // while its end (push, evaluation) runs
		after  bool // once its checkpoint is written (as its progress is shown)
	}{{"warm-up", 1, false, false}, {"first RL step", 3, false, false}, {"RL step between checkpoints", 4, false, false},
		{"evaluation after the warm-up", 2, true, false}, {"end of an RL step between checkpoints", 3, true, false},
		{"after an RL step's checkpoint", 4, false, true}} {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			cfg := tinyRun(out)
			stop := make(chan struct{})
			cfg.Stop = stop
			cfg.stepBegins = func(step int) {
				if step == c.stopAt {
					close(stop) // asked as step stopAt begins, so during it
				}
			}
			if c.after {
				cfg.stepBegins = nil
				cfg.Progress = func(m Metrics) {
					if m.Step == c.stopAt {
						close(stop) // step stopAt is checkpointed already
					}
				}
			} else if c.finish {
				cfg.stepBegins = nil
				cfg.finishBegins = func(step int) {
					if step == c.stopAt {
						close(stop)
					}
				}
			}
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := filepath.Join(out, "checkpoints", fmt.Sprintf("step-%d", c.stopAt))
			if !res.Stopped || res.Steps != c.stopAt || res.LastCheckpointDir != want {
				t.Fatalf("stopped %v at step %d with checkpoint %q, want a stop at step %d with %q", res.Stopped, res.Steps, res.LastCheckpointDir, c.stopAt, want)
			}
			ds, err := readDriverState(want, cfg.Seed)
			if err != nil {
				t.Fatal(err)
			}
			if ds.Step != c.stopAt {
				t.Fatalf("%s holds step %d", want, ds.Step)
			}
			resumed := tinyRun(out)
			resumed.Resume = want
			res, err = Run(ctx, resumed)
			if err != nil {
				t.Fatal(err)
			}
			if res.Steps != 5 || res.Stopped {
				t.Fatalf("resumed run: %d steps, stopped %v", res.Steps, res.Stopped)
			}
			for _, f := range []string{"model.safetensors", "optimizer.safetensors", DriverStateFile} {
				if !sameFile(t, filepath.Join(final, f), filepath.Join(out, "checkpoints", "step-5", f)) {
					t.Errorf("%s differs from the uninterrupted run's", f)
				}
			}
		})
	}
}

// A stop asked before the first step begins (while the learners are
// placed and their models built) ends the start at once: no step, no
// checkpoint, an error that wraps context.Canceled. It once went on to
// run and checkpoint a first step.
func TestStopWhileStarting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	cfg := tinyRun(out)
	stop := make(chan struct{})
	close(stop)
	cfg.Stop = stop
	cfg.stepBegins = func(step int) { t.Errorf("step %d began after the stop", step) }
	res, err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped while starting") {
		t.Fatalf("Run: %v, want an error wrapping context.Canceled that says the start stopped", err)
	}
	if res.Steps != 0 || res.LastCheckpointDir != "" {
		t.Errorf("result %+v: want no step, no checkpoint", res)
	}
	if cks, err := Checkpoints(out); err != nil || len(cks) != 0 {
		t.Errorf("checkpoints %v, %v: want none", cks, err)
	}
}
