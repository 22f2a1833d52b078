package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
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

// test.parentonly is a kind only the test process registers, not the
// child nodes it starts: a node of another program, as an `rlnode join`
// node is to a user's program.
func init() {
	if os.Getenv("RLNODE_TEST_NODE") != "1" {
		actor.RegisterKind("test.parentonly", func(ctx *actor.Context, args any) (actor.Actor, error) {
			return &counterActor{}, nil
		})
	}
}

// A spawn that placement sends to a node whose program lacks the kind
// goes on to another node that fits: before, it failed ("unknown actor
// kind"), and so did a restart after node loss, which buried an actor of
// unlimited restarts while nodes that have its kind had room (seen with
// real processes: a user's nodes beside an `rlnode start` node). A kind
// no fitting node has still fails, naming each node's refusal.
func TestSpawnGoesPastNodesWithoutTheKind(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "kinds-a", key)
	startNodeProcess(t, "kinds-b", key, a.GossipAddress(), 0, "")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// This node busier than the child: placement picks the child first.
	if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "kinds-filler", Node: "kinds-a", Resources: Resources{CPU: 1}}); err != nil {
		t.Fatal(err)
	}
	h, err := a.Spawn(ctx, "test.parentonly", SpawnOptions{Name: "kinds-here", Resources: Resources{CPU: 1}})
	if err != nil {
		t.Fatalf("a kind only this node has: %v", err)
	}
	if rec, _ := h.Record(); rec.Node != "kinds-a" {
		t.Fatalf("placed on %s", rec.Node)
	}
	_, err = a.Spawn(ctx, "test.nowhere", SpawnOptions{Name: "kinds-none"})
	if !errors.Is(err, actor.ErrUnknownKind) || !strings.Contains(err.Error(), "node kinds-a") || !strings.Contains(err.Error(), "node kinds-b") {
		t.Fatalf("a kind no node has: %v; want each node's refusal", err)
	}
}

// test.parentsquare is a task only the test process registers (as
// test.parentonly is a kind).
func init() {
	if os.Getenv("RLNODE_TEST_NODE") != "1" {
		RegisterTask("test.parentsquare", func(_ context.Context, x int) (int, error) { return x * x, nil })
	}
}

// A task placed on a node whose program lacks it goes on to one that has
// it; before, it failed with that node's "no task ... is registered here".
// One that this process has not registered either fails at the first
// refusal (a typo must not wait for room on busy nodes).
func TestTaskGoesPastNodesWithoutIt(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "tkinds-a", key)
	startNodeProcess(t, "tkinds-b", key, a.GossipAddress(), 0, "")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// This node busier than the child: placement picks the child first.
	if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "tkinds-filler", Node: "tkinds-a", Resources: Resources{CPU: 1}}); err != nil {
		t.Fatal(err)
	}
	if v, err := Submit[int](ctx, a, "test.parentsquare", 4, TaskOptions{}).Get(ctx); err != nil || v != 16 {
		t.Fatalf("a task only this node has: %v, %v", v, err)
	}
	// A name no node has, this one included (a typo), while this node is
	// too busy to be asked: refused at once, not left waiting for room.
	_, err := Submit[int](ctx, a, "test.nowhere", 4, TaskOptions{Resources: Resources{CPU: 2}}).Get(ctx)
	if err == nil || !strings.Contains(err.Error(), "not registered in this process either") || !strings.Contains(err.Error(), "node tkinds-b: no task") {
		t.Fatalf("a task no node has: %v; want the child's refusal at once", err)
	}
}

// Lookup refuses an actor that is DEAD, with its death cause, as Ray's
// get_actor does (it returned a handle whose calls then failed); Record
// still reads how it ended.
func TestLookupRefusesADeadActor(t *testing.T) {
	n, err := Start(context.Background(), Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := n.Spawn(ctx, "test.counter", SpawnOptions{Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Lookup(ctx, "gone"); err != nil {
		t.Fatalf("lookup of a live actor: %v", err)
	}
	if err := h.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Lookup(ctx, "gone"); !errors.Is(err, actor.ErrActorDied) || !strings.Contains(err.Error(), "it died (stopped)") {
		t.Errorf("lookup of a stopped actor: %v", err)
	}
	if rec, ok := n.Record("gone"); !ok || rec.State != Dead || rec.Cause != "stopped" {
		t.Errorf("Record of a stopped actor: %+v, %v", rec, ok)
	}
}
