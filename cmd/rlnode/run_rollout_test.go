package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunSurvivesRolloutNodeKill: `rlnode run --address` on a cluster of
// real processes — `rlnode start` (it alone offers the learner's custom
// resource) and two `rlnode join` nodes that each offer one rollout
// actor's — generates on two rollout actors. The rollout nodes run with
// their own RLNODE_HOME and, where mount namespaces can be had, with the
// run's output directory covered by an empty tmpfs: they cannot read OUT,
// so the actors' starting weights must come from the weight syncer.
// One rollout node is frozen (SIGSTOP) after a few RL steps are logged
// and SIGKILLed once its chunk was regenerated: the run completes on the other,
// metrics.jsonl has every step exactly once and in order, the chunks the
// lost actor held were regenerated (rollout_regenerated, and the
// end-of-run line), and the learner's last checkpoint is the last step.
// Synchronous and asynchronous (max staleness 1: the next batch
// generates while a step trains): no node has room for a replacement, so
// rollout_live stays 1. "replaced": a third rollout node joins after the
// kill and the pool's replacement actor starts there (rollout_live back
// to 2, rollout_replaced 1); that run is then stopped with SIGINT.
// "only-actor": one rollout actor, on the node killed; a node that joined
// after it was placed gets the replacement and the run completes on it
// (its chunk, if the kill landed in generation, waits for the
// replacement; a weight push with no actor left is kept for it).
func TestRunSurvivesRolloutNodeKill(t *testing.T) {
	for _, c := range []struct {
		name  string
		sets  []string
		third bool
	}{
		{"sync", nil, false},
		{"async", []string{"--set", "sync.mode=async"}, false},
		{"replaced", nil, true},
	} {
		t.Run(c.name, func(t *testing.T) { rolloutNodeKill(t, c.sets, c.third) })
	}
	t.Run("only-actor", onlyRolloutActorKilled)
}

func rolloutNodeKill(t *testing.T, extra []string, third bool) {
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head", "--resource", "learner=1")
	key := filepath.Join(home, "cluster.key")
	outParent := t.TempDir()
	out := filepath.Join(outParent, "run")
	joinRollout := func(id string) *runningNode {
		return startHidden(t, outParent, "join", head.gossip, "--bind", "127.0.0.1:0", "--key-file", key, "--node-id", id, "--resource", "rollout=1")
	}
	victim := joinRollout("roll-a")
	other := joinRollout("roll-b")
	dumpOnFailure(t, head, victim, other)

	const warmup = 3
	rl := 12
	if third {
		rl = 400 // ended with SIGINT once the replacement generates
	}
	args := []string{"run", "quickstart", "--address", head.gossip, "--key-file", key, "--bind", "127.0.0.1:0", "--out", out,
		"--set", "deterministic=false", "--set", "engines.policy.replicas=2",
		// One actor per rollout node, none elsewhere; the learner on the head.
		"--set", "placement.rollout={cpus: 0, custom: {rollout: 1}}", "--set", "placement.learner.custom={learner: 1}",
		"--set", fmt.Sprintf("sft.steps=%d", warmup), "--set", fmt.Sprintf("schedule.steps=%d", rl), "--set", "eval.held_out=16", "--set", "schedule.eval_every=10"}
	run := startRun(t, home, append(args, extra...)...)
	metrics := filepath.Join(out, "metrics.jsonl")
	// Once three RL steps are logged the victim is frozen (SIGSTOP): it
	// answers nothing but is not known lost until the cluster's failure
	// detection says so, seconds later, so the next generation gives it a
	// chunk, which must run again elsewhere, whenever the freeze landed.
	// It is SIGKILLed once that regeneration is logged.
	run.waitFor(t, "three RL steps", func() bool { return len(readLines(t, metrics)) >= warmup+3 })
	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	killedAt := len(readLines(t, metrics))
	run.waitFor(t, "a chunk regenerated after the freeze", func() bool {
		lines := readLines(t, metrics)
		for _, m := range lines[min(killedAt, len(lines)):] {
			if n, _ := m["rollout_regenerated"].(float64); n >= 1 {
				return true
			}
		}
		return false
	})
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if third {
		spare := joinRollout("roll-c")
		dumpOnFailure(t, spare)
		run.waitFor(t, "a replacement actor (rollout_replaced 1, rollout_live 2)", func() bool {
			lines := readLines(t, metrics)
			for _, m := range lines[min(killedAt, len(lines)):] {
				live, _ := m["rollout_live"].(float64)
				if replaced, _ := m["rollout_replaced"].(float64); live == 2 && replaced == 1 {
					return true
				}
			}
			return false
		})
		if err := run.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
	}
	stdout := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(run.stdout) // EOF once the process ends
		stdout <- string(b)
	}()
	var printed string
	select {
	case printed = <-stdout:
	case <-time.After(60 * time.Second):
		t.Fatalf("the run did not end within 60 s of the kill\n%s", run.dump())
	}
	<-run.done
	code := run.cmd.ProcessState.ExitCode()
	if want := map[bool]int{false: 0, true: 130}[third]; code != want {
		t.Fatalf("run exit %d after the rollout node's kill, want %d\nstderr:\n%s", code, want, run.stderr)
	}
	<-victim.done

	lines := readLines(t, metrics)
	if !third && len(lines) != warmup+rl {
		t.Fatalf("%d metrics lines, want %d (every step once)", len(lines), warmup+rl)
	}
	var regenerated, replaced float64
	liveAfter := -1.0
	for i, m := range lines {
		if step := m["step"].(float64); int(step) != i+1 {
			t.Fatalf("metrics line %d is step %v: a step trained twice or skipped", i+1, step)
		}
		regenerated, _ = m["rollout_regenerated"].(float64)
		replaced, _ = m["rollout_replaced"].(float64)
		liveAfter, _ = m["rollout_live"].(float64)
	}
	if regenerated < 1 {
		t.Errorf("rollout_regenerated %v: the killed actor's chunk was not regenerated", regenerated)
	}
	t.Logf("%v chunks regenerated, %v actors replaced; metrics lines %d, the freeze after %d", regenerated, replaced, len(lines), killedAt)
	if third {
		if liveAfter != 2 || replaced != 1 {
			t.Errorf("rollout_live %v and rollout_replaced %v at the end, want 2 and 1 (a replacement on the node that joined)", liveAfter, replaced)
		}
		return
	}
	if liveAfter != 1 || replaced != 0 {
		t.Errorf("rollout_live %v and rollout_replaced %v at the end, want 1 and 0 (the killed node's actor dropped, no room for another)", liveAfter, replaced)
	}
	if want := fmt.Sprintf("rollout: %d generation chunks regenerated", int(regenerated)); !strings.Contains(printed, want) {
		t.Errorf("no line %q in the run's output:\n%s", want, printed)
	}
	if _, err := os.Stat(filepath.Join(out, "checkpoints", fmt.Sprintf("step-%d", warmup+rl), "driver_state.json")); err != nil {
		t.Errorf("last checkpoint: %v", err)
	}
}

func onlyRolloutActorKilled(t *testing.T) {
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head", "--resource", "learner=1")
	key := filepath.Join(home, "cluster.key")
	outParent := t.TempDir()
	out := filepath.Join(outParent, "run")
	joinRollout := func(id string) *runningNode {
		return startHidden(t, outParent, "join", head.gossip, "--bind", "127.0.0.1:0", "--key-file", key, "--node-id", id, "--resource", "rollout=1")
	}
	victim := joinRollout("roll-a")
	dumpOnFailure(t, head, victim)
	const warmup, rl = 3, 12
	run := startRun(t, home, "run", "quickstart", "--address", head.gossip, "--key-file", key, "--bind", "127.0.0.1:0", "--out", out,
		"--set", "deterministic=false", "--set", "placement.rollout={cpus: 0, custom: {rollout: 1}}", "--set", "placement.learner.custom={learner: 1}",
		"--set", fmt.Sprintf("sft.steps=%d", warmup), "--set", fmt.Sprintf("schedule.steps=%d", rl), "--set", "eval.held_out=16", "--set", "schedule.eval_every=10")
	metrics := filepath.Join(out, "metrics.jsonl")
	// The actor is on roll-a once a step is logged; roll-b joins after.
	run.waitFor(t, "the first step", func() bool { return len(readLines(t, metrics)) >= 1 })
	spare := joinRollout("roll-b")
	dumpOnFailure(t, spare)
	run.waitFor(t, "three RL steps", func() bool { return len(readLines(t, metrics)) >= warmup+3 })
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := run.wait(t); code != 0 {
		t.Fatalf("run exit %d after its only rollout node's kill\nstderr:\n%s", code, run.stderr)
	}
	lines := readLines(t, metrics)
	if len(lines) != warmup+rl {
		t.Fatalf("%d metrics lines, want %d (every step once)", len(lines), warmup+rl)
	}
	for i, m := range lines {
		if step := m["step"].(float64); int(step) != i+1 {
			t.Fatalf("metrics line %d is step %v: a step trained twice or skipped", i+1, step)
		}
	}
	last := lines[len(lines)-1]
	if last["rollout_live"] != 1.0 || last["rollout_replaced"] != 1.0 {
		t.Errorf("the last step: rollout_live %v, rollout_replaced %v; want 1 and 1 (the replacement on roll-b)", last["rollout_live"], last["rollout_replaced"])
	}
	t.Logf("rollout_regenerated %v at the end", last["rollout_regenerated"])
}

// readLines reads metrics.jsonl; a missing file or a partly written last
// line reads as the lines before it.
func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []map[string]any
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasSuffix(l, "\n") {
			break
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%s:%d: %v", path, len(out)+1, err)
		}
		out = append(out, m)
	}
	return out
}
