package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/jobs"
)

// TestStopAllStopsJobsFirst: README's cluster on one machine ends with
// `rlnode stop --all`. No node is left to take a running job over, so
// the job is asked to stop after its current step, which it checkpoints,
// before the nodes stop: its run loses no step (it died mid-step with
// its node before, and resumed from its last periodic checkpoint). A job
// with a node outside those stopping is taken over instead, as
// TestJobWithNoRestartsLeftWhenItsNodeStops shows.
func TestStopAllStopsJobsFirst(t *testing.T) {
	home := t.TempDir()
	if _, errOut, code := runRlnode(t, home, "stop", "--all", "--stop-timeout", "0s"); code != 2 || !strings.Contains(errOut, "--stop-timeout 0s: want a positive duration") {
		t.Errorf("stop --stop-timeout 0s: exit %d, %q", code, errOut)
	}
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head")
	peer := startRlnode(t, home, "join", head.gossip, "--bind", "127.0.0.1:0", "--node-id", "peer", "--cpus", "1")
	dumpOnFailure(t, head, peer)
	dir := filepath.Join(t.TempDir(), "long")
	// Only the warm-up's last step (2) is checkpointed on schedule.
	out, errOut, code := runRlnode(t, home, "submit", "quickstart", "--no-wait", "--name", "long", "--out", dir, "--address", head.gossip,
		"--set", "sft.steps=2", "--set", "schedule.steps=100000", "--set", "schedule.eval_every=0", "--set", "eval.held_out=4",
		"--set", "schedule.checkpoint_every=100000", "--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2")
	if code != 0 {
		t.Fatalf("submit --no-wait: exit %d\n%s%s", code, out, errOut)
	}
	waitUntil(t, 2*time.Minute, "the job's RL steps", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, jobs.LogFile))
		return bytes.Contains(b, []byte("(RL 2/100000)"))
	})
	out, errOut, code = runRlnode(t, home, "stop", "--all")
	if code != 0 || !strings.Contains(out, "job long (RUNNING): asked to stop after its current step, which it checkpoints") ||
		!strings.Contains(out, "job long STOPPED") ||
		!strings.Contains(out, "rlnode submit "+filepath.Join(dir, jobs.RecipeFile)+" --resume --out "+dir) ||
		!strings.Contains(out, "node head stopped") || !strings.Contains(out, "node peer stopped") {
		t.Fatalf("stop --all with a running job: exit %d\n%s%s", code, out, errOut)
	}
	if strings.Index(out, "job long STOPPED") > strings.Index(out, "node head stopped") {
		t.Errorf("stop --all stopped a node before the job had stopped:\n%s", out)
	}
	logged := string(readFileAt(t, filepath.Join(dir, jobs.LogFile)))
	m := regexp.MustCompile(`stopped after step (\d+); continue from checkpoint step-(\d+)`).FindStringSubmatch(logged)
	if m == nil || m[1] != m[2] || m[1] == "2" {
		t.Fatalf("the job's run did not checkpoint the step it stopped after (want a step past the warm-up's 2):\n%s", logged)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoints", "step-"+m[1])); err != nil {
		t.Errorf("the stopped step's checkpoint: %v", err)
	}
}
