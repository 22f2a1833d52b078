package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rlnode/rlnode/train"
)

// bigModel makes quickstart's policy large enough (16 layers of 512,
// about 61 M parameters) that building its learner takes a while: long
// enough for a signal sent when the build begins to land inside it.
var bigModel = []string{"--set", "models.policy.init.hidden_size=512", "--set", "models.policy.init.intermediate_size=2048",
	"--set", "models.policy.init.layers=16", "--set", "models.policy.init.heads=16", "--set", "models.policy.init.kv_heads=8",
	"--set", "sft.steps=1", "--set", "sft.batch_size=1", "--set", "schedule.steps=1", "--set", "schedule.eval_every=0",
	"--set", "algorithm.batch_prompts=1", "--set", "algorithm.group_size=2", "--set", "algorithm.micro_batch=2"}

// TestRunSIGTERMWhileStarting: SIGTERM while the run builds its learner
// stops it there, at once, with exit status 130 and a line that says it
// stopped before its first step; what it wrote before (the resolved
// recipe) stays. It once went on building, then trained a step before
// it looked at the signal.
func TestRunSIGTERMWhileStarting(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(t.TempDir(), "run")
	run := startRun(t, home, append([]string{"run", "quickstart", "--out", dir}, bigModel...)...)
	run.waitFor(t, `a "starting the learner" line`, func() bool { return strings.Contains(run.stderr.String(), `msg="starting the learner"`) })
	if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := run.wait(t)
	stderr := run.stderr
	if code != 130 ||
		!strings.Contains(stderr.String(), "rlnode run: stopped before its first step, before any checkpoint: nothing to resume") {
		t.Errorf("exit %d, want 130 and the stop named\nstderr:\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "step 1/") {
		t.Errorf("a step ran after SIGTERM\nstderr:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "recipe.yaml")); err != nil {
		t.Errorf("the run's recipe: %v", err)
	}
	if cks, err := train.Checkpoints(dir); err != nil || len(cks) != 0 {
		t.Errorf("checkpoints %v, %v: want none", cks, err)
	}
}
