package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRunOnClusterResumeHint: a run on a cluster that is stopped (or
// fails) prints the command that continues it; that command must continue
// it on the same cluster, with the same key. Before, the hint was
// `rlnode run DIR/recipe.yaml --out DIR --resume` whatever the run's
// flags: followed as printed, a cluster run went on in one process on the
// driver's host, or (as here, its learner needing a resource only the
// cluster's node offers) was refused. The test follows the printed command.
func TestRunOnClusterResumeHint(t *testing.T) {
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head", "--resource", "learner=1")
	key := filepath.Join(home, "cluster.key")
	dir := filepath.Join(t.TempDir(), "run")
	run := startRun(t, home, "run", "quickstart", "--address", head.gossip, "--key-file", key, "--bind", "127.0.0.1:0", "--out", dir,
		"--owner-grace", "20s", "--traces", "off",
		"--set", "placement.learner.custom={learner: 1}",
		"--set", "sft.steps=2", "--set", "schedule.steps=100000", "--set", "schedule.checkpoint_every=0",
		"--set", "eval.held_out=4", "--set", "schedule.eval_every=0", "--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2")
	run.waitFor(t, "its first RL step", func() bool { return strings.Contains(run.stderr.String(), "(RL 1/") })
	if err := run.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := run.wait(t); code != 130 {
		t.Fatalf("interrupted run: exit %d, want 130\nstderr:\n%s", code, run.stderr)
	}
	errOut := run.stderr.String()
	_, hint, ok := strings.Cut(errOut, " with: rlnode run ")
	if !ok {
		t.Fatalf("no resume hint in stderr:\n%s", errOut)
	}
	hint, _, _ = strings.Cut(hint, "\n")
	args := append([]string{"run"}, strings.Fields(hint)...)
	for _, want := range []string{"--address " + head.gossip, "--key-file " + key, "--bind 127.0.0.1:0", "--owner-grace 20s", "--traces off", "--resume"} {
		if !strings.Contains(hint, want) {
			t.Errorf("resume hint %q lacks %q", hint, want)
		}
	}
	// The resumed run trains one more RL step (schedule may change on a
	// resume) on the cluster the hint names.
	cks, err := os.ReadDir(filepath.Join(dir, "checkpoints"))
	if err != nil || len(cks) == 0 {
		t.Fatalf("checkpoints of the interrupted run: %v %v", cks, err)
	}
	var last int
	for _, c := range cks {
		var n int
		if _, err := fmt.Sscanf(c.Name(), "step-%d", &n); err == nil && n > last {
			last = n
		}
	}
	args = append(args, "--set", "schedule.steps="+strconv.Itoa(last-2+1))
	out, errOut2, code := runRlnode(t, home, args...)
	if code != 0 {
		t.Fatalf("the resume hint's command (rlnode %s): exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut2)
	}
	if !strings.Contains(out, "resuming from ") || !strings.Contains(out, "done: "+strconv.Itoa(last+1)+" steps") {
		t.Errorf("the resume hint's command did not resume to step %d:\n%s\n%s", last+1, out, errOut2)
	}
}
