package cluster

import (
	"context"
	"errors"
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
