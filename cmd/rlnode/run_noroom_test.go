package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/rollout"
)

// A run exits 75 (a job waits for room, then continues it) when it
// could not place what it needs for want of room others hold. Its
// rollout actors all lost mid-run, with no replacement placed within a
// minute because others held the room, failed with rollout.ErrAllLost,
// which carries the last try's ErrNoRoom as text only: the run exited 1
// and its job FAILED, though it could go on from its checkpoint once
// the room freed (seen with the node of a run's only rollout actor
// killed while another run held the other node's room).
func TestRunNoRoomNow(t *testing.T) {
	_, noRoom := cluster.PlaceOne([]cluster.NodeView{{ID: "head", Total: cluster.Resources{cluster.CPU: 2}, Free: cluster.Resources{}}},
		cluster.Request{Resources: cluster.Resources{cluster.CPU: 1}})
	_, never := cluster.PlaceOne([]cluster.NodeView{{ID: "head", Total: cluster.Resources{cluster.CPU: 2}, Free: cluster.Resources{}}},
		cluster.Request{Resources: cluster.Resources{cluster.CPU: 4}})
	if !errors.Is(noRoom, cluster.ErrNoRoom) || errors.Is(never, cluster.ErrNoRoom) {
		t.Fatalf("placement: %v; %v", noRoom, never)
	}
	// The room its own actors hold (its learner's CPU): it frees only
	// when the run ends, and its job would wait for it for ever.
	self := fmt.Errorf("no node can host {CPU:2}; %w: node vm-1 (actor learner-1 {CPU:1} on head): %w", cluster.ErrHeldBySelf, cluster.ErrNoRoom)
	allLost := func(last error) error {
		return fmt.Errorf("generate for step 53: %w (no replacement started within 1m0s; the last try: rollout actors: start one on any node: spawn r-1: %s)", rollout.ErrAllLost, last)
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"placing an actor, no room now", fmt.Errorf("place the learner: spawn l: %w", noRoom), true},
		{"placing an actor, never", fmt.Errorf("place the learner: spawn l: %w", never), false},
		{"every rollout actor lost, the last try no room now", allLost(noRoom), true},
		{"every rollout actor lost, the last try never", allLost(never), false},
		{"placing an actor, the room its own actors hold", fmt.Errorf("rollout actors: start one on any node: spawn r: %w", self), false},
		{"every rollout actor lost, the last try held by its own", allLost(self), false},
		{"every rollout actor lost, none tried", fmt.Errorf("generate: %w (no replacement was tried)", rollout.ErrAllLost), false},
		{"another failure naming no room", fmt.Errorf("verifier: %s", noRoom), false},
	} {
		if got := noRoomNow(c.err); got != c.want {
			t.Errorf("%s: noRoomNow(%q) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// A run whose own learner holds the room its rollout actor needs (a
// one-node cluster of one CPU) fails saying the cluster is too small for
// it and what to do, before the placement error, which stays the last
// line (a job's FAILED cause). It printed the placement error alone,
// which a new user read as someone else holding the room.
func TestRunClusterTooSmallSaysSo(t *testing.T) {
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--cpus", "1", "--gpus", "0")
	_, errOut, code := runRlnode(t, home, "run", "quickstart", "--address", head.gossip, "--bind", "127.0.0.1:0", "--driver-only",
		"--out", filepath.Join(t.TempDir(), "run"), "--set", "sft.steps=1", "--set", "schedule.steps=1")
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	last := lines[len(lines)-1]
	if code != 1 || !strings.Contains(errOut, "the cluster is too small for this run") || !strings.Contains(errOut, "add nodes (rlnode join)") ||
		!strings.Contains(last, cluster.ErrHeldBySelf.Error()) {
		t.Errorf("run on a cluster of one CPU: exit %d, want 1, the hint, then the placement error last:\n%s", code, errOut)
	}
}
