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
// its node before, and resumed from its last periodic checkpoint); the
// job of a second cluster on the host too. A job with a node outside
// those stopping is taken over instead, as
// TestJobWithNoRestartsLeftWhenItsNodeStops shows.
func TestStopAllStopsJobsFirst(t *testing.T) {
	home := t.TempDir()
	if _, errOut, code := runRlnode(t, home, "stop", "--all", "--stop-timeout", "0s"); code != 2 || !strings.Contains(errOut, "--stop-timeout 0s: want a positive duration") {
		t.Errorf("stop --stop-timeout 0s: exit %d, %q", code, errOut)
	}
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head")
	peer := startRlnode(t, home, "join", head.gossip, "--bind", "127.0.0.1:0", "--node-id", "peer", "--cpus", "1")
	// A second cluster on the host (its own key), with a job of its own.
	other := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "other", "--key-file", filepath.Join(t.TempDir(), "other.key"))
	dumpOnFailure(t, head, peer, other)
	dirs := map[string]string{}
	for name, via := range map[string]*runningNode{"long": head, "apart": other} {
		dir := filepath.Join(t.TempDir(), name)
		dirs[name] = dir
		// Only the warm-up's last step (2) is checkpointed on schedule.
		out, errOut, code := runRlnode(t, home, "submit", "quickstart", "--no-wait", "--name", name, "--out", dir, "--address", via.gossip,
			"--set", "sft.steps=2", "--set", "schedule.steps=100000", "--set", "schedule.eval_every=0", "--set", "eval.held_out=4",
			"--set", "schedule.checkpoint_every=100000", "--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2")
		if code != 0 {
			t.Fatalf("submit %s --no-wait: exit %d\n%s%s", name, code, out, errOut)
		}
	}
	for name, dir := range dirs {
		waitUntil(t, 2*time.Minute, "job "+name+"'s RL steps", func() bool {
			b, _ := os.ReadFile(filepath.Join(dir, jobs.LogFile))
			return bytes.Contains(b, []byte("(RL 2/100000)"))
		})
	}
	out, errOut, code := runRlnode(t, home, "stop", "--all")
	if code != 0 || !strings.Contains(out, "node head stopped") || !strings.Contains(out, "node peer stopped") || !strings.Contains(out, "node other stopped") {
		t.Fatalf("stop --all with running jobs: exit %d\n%s%s", code, out, errOut)
	}
	for name, dir := range dirs {
		if !strings.Contains(out, "job "+name+" (RUNNING): asked to stop after its current step, which it checkpoints") ||
			!strings.Contains(out, "rlnode submit "+filepath.Join(dir, jobs.RecipeFile)+" --resume --out "+dir) {
			t.Errorf("stop --all did not ask job %s to stop first:\n%s%s", name, out, errOut)
		}
		if i := strings.Index(out, "job "+name+" STOPPED"); i < 0 || i > strings.Index(out, "node head stopped") {
			t.Errorf("job %s: not STOPPED before the nodes stopped:\n%s", name, out)
		}
		logged := string(readFileAt(t, filepath.Join(dir, jobs.LogFile)))
		m := regexp.MustCompile(`stopped after step (\d+); continue from checkpoint step-(\d+)`).FindStringSubmatch(logged)
		if m == nil || m[1] != m[2] || m[1] == "2" {
			t.Errorf("job %s's run did not checkpoint the step it stopped after (want a step past the warm-up's 2):\n%s", name, logged)
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "checkpoints", "step-"+m[1])); err != nil {
			t.Errorf("job %s: the stopped step's checkpoint: %v", name, err)
		}
	}
}

// TestStoppingTheLastJobNode: a node that stops while the others left do
// not run jobs (labelled rlnode.jobs=no, which a job's placement passes
// over) asks its jobs to stop after their step first too, and the other
// node stays up.
func TestStoppingTheLastJobNode(t *testing.T) {
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head")
	peer := startRlnode(t, home, "join", head.gossip, "--bind", "127.0.0.1:0", "--node-id", "peer", "--cpus", "1", "--label", "rlnode.jobs=no")
	dumpOnFailure(t, head, peer)
	dir := filepath.Join(t.TempDir(), "last")
	out, errOut, code := runRlnode(t, home, "submit", "quickstart", "--no-wait", "--name", "last", "--out", dir, "--address", head.gossip,
		"--set", "sft.steps=2", "--set", "schedule.steps=100000", "--set", "schedule.eval_every=0", "--set", "eval.held_out=4",
		"--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2")
	if code != 0 {
		t.Fatalf("submit --no-wait: exit %d\n%s%s", code, out, errOut)
	}
	waitUntil(t, 2*time.Minute, "the job's RL steps", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, jobs.LogFile))
		return bytes.Contains(b, []byte("(RL 2/100000)"))
	})
	out, errOut, code = runRlnode(t, home, "stop", "--address", head.gossip)
	if code != 0 || !strings.Contains(out, "job last (RUNNING): asked to stop after its current step") || !strings.Contains(out, "job last STOPPED") {
		t.Fatalf("stop head, the only node that runs jobs: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := runRlnode(t, home, "status", "--address", peer.gossip); code != 0 || !strings.Contains(out, "peer") {
		t.Errorf("status of the node left: exit %d\n%s%s", code, out, errOut)
	}
}

// TestOneClusterNeedsNoAddress: with README's cluster on one machine
// (several nodes on the host, one cluster), status, submit and job
// commands without --address ask any of its nodes, as README's sweep
// example does; each failed with "choose one with --address". Nodes of
// two clusters on the host still need it, and the error says why.
func TestOneClusterNeedsNoAddress(t *testing.T) {
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head")
	peer := startRlnode(t, home, "join", head.gossip, "--bind", "127.0.0.1:0", "--node-id", "peer", "--cpus", "1")
	dumpOnFailure(t, head, peer)
	waitUntil(t, time.Minute, "both nodes in head's status", func() bool {
		out, _, code := runRlnode(t, home, "status", "--address", head.gossip)
		return code == 0 && strings.Contains(out, "peer") && strings.Contains(out, "head")
	})
	dir := filepath.Join(t.TempDir(), "noaddr")
	out, errOut, code := runRlnode(t, home, append([]string{"submit", "quickstart", "--name", "noaddr", "--out", dir}, tinyRun...)...)
	if code != 0 || !strings.Contains(out, "job noaddr SUCCEEDED") {
		t.Fatalf("submit without --address: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{"job", "list"}, {"job", "status", "noaddr"}, {"job", "logs", "noaddr"}, {"status"}} {
		out, errOut, code := runRlnode(t, home, args...)
		want := "noaddr"
		if args[0] == "status" {
			want = "peer"
		}
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("rlnode %s without --address: exit %d, want %q in\n%s%s", strings.Join(args, " "), code, want, out, errOut)
		}
	}
	// stop stops one node: it needs --address, or --all.
	if _, errOut, code := runRlnode(t, home, "stop"); code != 1 || !strings.Contains(errOut, "choose one with --address, or stop them all with --all") {
		t.Errorf("rlnode stop without --address, two nodes here: exit %d, %q", code, errOut)
	}
	// A node of another cluster (its own key) on the same host.
	apart := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "apart", "--key-file", filepath.Join(t.TempDir(), "apart.key"))
	dumpOnFailure(t, apart)
	for _, args := range [][]string{{"job", "list"}, {"status"}} {
		_, errOut, code := runRlnode(t, home, args...)
		if code != 1 || !strings.Contains(errOut, "3 nodes run on this host") || !strings.Contains(errOut, "choose one with --address") ||
			!strings.Contains(errOut, "not all of one cluster") {
			t.Errorf("rlnode %s with nodes of two clusters here: exit %d, %q", strings.Join(args, " "), code, errOut)
		}
	}
}
