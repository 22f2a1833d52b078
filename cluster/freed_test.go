package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// What StopActor and RemovePlacementGroup free is counted by the caller's
// next placement at once: their answer brings the node's own record.
// Before, a program that stopped its actors and created a placement group
// (or spawned) straight after was told the node had no free room (its
// view waited for gossip), e.g. "w1 free {} of {CPU:2}".
func TestFreedRoomIsSeenAtOnce(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "freed-a", key)
	startNodeProcess(t, "freed-b", key, a.GossipAddress(), 0, "role=b")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	onB := map[string]string{"role": "b"}
	whole := Resources{CPU: 2}
	full := func() bool {
		for _, v := range a.Views() {
			if v.ID == "freed-b" {
				return v.Free[CPU] == 0
			}
		}
		return false
	}
	for round := range 3 {
		name := fmt.Sprintf("freed-%d", round)
		if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: name, Labels: onB, Resources: whole}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "this node to see freed-b full", 10*time.Second, full)
		if err := a.StopActor(ctx, name); err != nil {
			t.Fatal(err)
		}
		pg, err := a.CreatePlacementGroup(ctx, []Bundle{{Resources: whole, Labels: onB}}, StrictPack)
		if err != nil {
			t.Fatalf("round %d: a group right after StopActor freed its room: %v", round, err)
		}
		waitFor(t, "this node to see freed-b full", 10*time.Second, full)
		if err := a.RemovePlacementGroup(ctx, pg.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: name + "b", Labels: onB, Resources: whole}); err != nil {
			t.Fatalf("round %d: a spawn right after RemovePlacementGroup freed its room: %v", round, err)
		}
		if err := a.StopActor(ctx, name+"b"); err != nil {
			t.Fatal(err)
		}
	}
}

// An actor stopped is DEAD in the stopper's directory when StopActor
// returns, so its name can be spawned again at once (a learner replaced
// by a new one of the same name). Before, the record said ALIVE until
// gossip came, and the spawn was refused "actor name already in use (on
// node freed-b, ALIVE)".
func TestStoppedNameCanBeSpawnedAtOnce(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "again-a", key)
	startNodeProcess(t, "again-b", key, a.GossipAddress(), 0, "")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := range 3 {
		h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "learner", Node: "again-b"})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := h.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if rec, _ := h.Record(); rec.State != Dead || rec.Cause != "stopped" {
			t.Fatalf("round %d: after Stop the record says %s (%s); want DEAD (stopped)", round, rec.State, rec.Cause)
		}
	}
}

// A STRICT_SPREAD bundle that cannot be placed again after its node is
// lost says which nodes it may not go to and why: the error listed what
// the other nodes offer and left those out without a word, so a node
// with room free seemed ignored.
func TestStrictSpreadBundleNotReplacedSaysWhy(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "spread-a", key)
	b := startNodeProcess(t, "spread-b", key, a.GossipAddress(), 0, "role=x")
	startNodeProcess(t, "spread-c", key, a.GossipAddress(), 0, "role=x")
	waitFor(t, "3 nodes", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := Bundle{Resources: Resources{CPU: 1}, Labels: map[string]string{"role": "x"}}
	pg, err := a.CreatePlacementGroup(ctx, []Bundle{x, x}, StrictSpread)
	if err != nil {
		t.Fatal(err)
	}
	onB := 0
	if pg.Nodes[1] == "spread-b" {
		onB = 1
	}
	if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "spread-0", Group: pg, Bundle: onB, MaxRestarts: 1, Resources: x.Resources}); err != nil {
		t.Fatal(err)
	}
	w := a.Watch(ctx, "spread-0")
	_ = b.Cmd.Process.Kill()
	for n := range w {
		if n.State != Dead {
			continue
		}
		if !strings.Contains(n.Cause, "STRICT_SPREAD: not on spread-c, which holds its other bundles") {
			t.Errorf("cause: %s; want the node left out named", n.Cause)
		}
		return
	}
	t.Fatal("no DEAD notice")
}
