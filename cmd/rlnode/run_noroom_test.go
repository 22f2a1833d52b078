package main

import (
	"errors"
	"fmt"
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
		return fmt.Errorf("generate for step 53: %w (no replacement started within 1m0s; the last try: rollout pool: start r-1: spawn r-1: %s)", rollout.ErrAllLost, last)
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
		{"placing an actor, the room its own actors hold", fmt.Errorf("rollout pool: spawn r: %w", self), false},
		{"every rollout actor lost, the last try held by its own", allLost(self), false},
		{"every rollout actor lost, none tried", fmt.Errorf("generate: %w (no replacement was tried)", rollout.ErrAllLost), false},
		{"another failure naming no room", fmt.Errorf("verifier: %s", noRoom), false},
	} {
		if got := noRoomNow(c.err); got != c.want {
			t.Errorf("%s: noRoomNow(%q) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
