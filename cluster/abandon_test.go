package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// slowBuild's factory takes as long as a model load: it says it has begun,
// then waits until the test lets it finish (channels the test makes).
var slowBuildBegun, slowBuildRelease chan struct{}

type slowBuilt struct{}

func (slowBuilt) Receive(*actor.Context, any) (any, error) { return nil, nil }

func init() {
	actor.RegisterKind("test.slowbuild", func(*actor.Context, any) (actor.Actor, error) {
		slowBuildBegun <- struct{}{}
		<-slowBuildRelease
		return slowBuilt{}, nil
	})
}

// A spawn whose caller gives up while the actor is built on another node
// (Ctrl-C during a rollout actor's model load) leaves no actor behind: the
// node stops it once built and frees its resources. It used to stay alive
// with nobody holding it, its CPU taken until the node stopped.
func TestAbandonedSpawnLeavesNoActor(t *testing.T) {
	slowBuildBegun, slowBuildRelease = make(chan struct{}, 1), make(chan struct{})
	key := testKey(t)
	a := startLocalNode(t, "abandon-a", key)
	b, err := Start(context.Background(), Config{NodeID: "abandon-b", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Join: []string{a.GossipAddress()}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	waitFor(t, "2 nodes with directory records", 10*time.Second, func() bool { return nodeCount(a) == 2 })

	ctx, cancel := context.WithCancel(context.Background())
	spawned := make(chan error, 1)
	go func() {
		_, err := a.Spawn(ctx, "test.slowbuild", SpawnOptions{Name: "abandoned", Node: "abandon-b", Resources: Resources{CPU: 1}})
		spawned <- err
	}()
	select {
	case <-slowBuildBegun:
	case err := <-spawned:
		t.Fatalf("the spawn ended before its actor was being built: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the actor's build did not begin within 30 s")
	}
	cancel()
	if err := <-spawned; !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned spawn: %v, want context.Canceled", err)
	}
	close(slowBuildRelease) // the build ends after its caller gave up
	freeCPU := func() float64 {
		for _, v := range b.Views() {
			if v.ID == "abandon-b" {
				return v.Free[CPU]
			}
		}
		return -1
	}
	waitFor(t, "the abandoned actor stopped and its CPU free", 20*time.Second, func() bool {
		rec, ok := b.Directory().Actor("abandoned")
		return ok && rec.State == Dead && freeCPU() == 2
	})
	if rec, _ := b.Directory().Actor("abandoned"); rec.Cause == "" {
		t.Errorf("the abandoned actor's record has no death cause: %+v", rec)
	}
}

// While a node builds an actor (a model load of tens of seconds), it
// answers the rest at once: lookups, other spawns and stops, placement
// group reservations. A second spawn of the name being built is refused,
// and the first ends well once its factory returns. The node actor used to
// run the factory itself, so all of these waited behind it and callers
// timed out against a healthy node.
func TestSlowBuildDoesNotHoldUpItsNode(t *testing.T) {
	slowBuildBegun, slowBuildRelease = make(chan struct{}, 1), make(chan struct{})
	key := testKey(t)
	a := startLocalNode(t, "busy-a", key)
	b, err := Start(context.Background(), Config{NodeID: "busy-b", Bind: "127.0.0.1:0", Key: key, CPUs: 4,
		Labels: map[string]string{"host": "b"}, Join: []string{a.GossipAddress()}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	waitFor(t, "2 nodes with directory records", 10*time.Second, func() bool { return nodeCount(a) == 2 })

	spawned := make(chan error, 1)
	go func() {
		_, err := a.Spawn(context.Background(), "test.slowbuild", SpawnOptions{Name: "loading", Node: "busy-b", Resources: Resources{CPU: 1}})
		spawned <- err
	}()
	select {
	case <-slowBuildBegun:
	case err := <-spawned:
		t.Fatalf("the spawn ended before its actor was being built: %v", err)
	}
	// Each request below is bounded; before, each waited out its bound.
	bounded := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 10*time.Second)
	}
	ctx, cancel := bounded()
	defer cancel()
	// Node.Lookup swallows each node's error: ask busy-b's node actor.
	nref, err := a.nodeRef("busy-b")
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := actor.CallAs[lookupReply](ctx, a.sys, nref, lookupRequest{Name: "nobody"}); err != nil || rep.Found {
		t.Fatalf("lookup while busy-b builds: %+v, %v", rep, err)
	}
	ctx, cancel = bounded()
	defer cancel()
	h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "quick", Node: "busy-b"})
	if err != nil {
		t.Fatalf("a second spawn while busy-b builds: %v", err)
	}
	if err := h.Stop(ctx); err != nil {
		t.Fatalf("a stop while busy-b builds: %v", err)
	}
	ctx, cancel = bounded()
	defer cancel()
	g, err := a.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 1}, Labels: map[string]string{"host": "b"}}}, Pack)
	if err != nil {
		t.Fatalf("a reservation while busy-b builds: %v", err)
	}
	if err := a.RemovePlacementGroup(ctx, g.ID); err != nil {
		t.Fatalf("an unreservation while busy-b builds: %v", err)
	}
	ctx, cancel = bounded()
	defer cancel()
	if _, err := a.Spawn(ctx, "test.slowbuild", SpawnOptions{Name: "loading", Node: "busy-b"}); err == nil || !strings.Contains(err.Error(), `"loading" is being built`) {
		t.Fatalf("a second spawn of the name being built: %v, want a refusal naming it", err)
	}
	select {
	case err := <-spawned:
		t.Fatalf("the slow spawn ended before its factory returned: %v", err)
	default:
	}
	close(slowBuildRelease)
	if err := <-spawned; err != nil {
		t.Fatalf("the slow spawn: %v", err)
	}
	rec, ok := a.Directory().Actor("loading")
	if !ok || rec.State != Alive || rec.Node != "busy-b" {
		t.Fatalf("the slow actor's record: %+v, %v", rec, ok)
	}
}
