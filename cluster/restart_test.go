package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// slowRestart builds at once the first time and, restarted (after its
// node was lost), waits for the test like a model load.
var slowRestartBegun, slowRestartRelease chan struct{}

func init() {
	actor.RegisterKind("test.slowrestart", func(ctx *actor.Context, _ any) (actor.Actor, error) {
		if ctx.Restarts() > 0 {
			slowRestartBegun <- struct{}{}
			select {
			case <-slowRestartRelease:
			case <-ctx.Context().Done():
				return nil, ctx.Context().Err()
			}
		}
		return slowBuilt{}, nil
	})
}

// While the leader restarts a lost node's actor, whose build takes long,
// it still takes in membership changes: a node joining meanwhile becomes
// a member at once. The leader's event loop ran the restart itself and
// saw no join, leave or failure until the build ended (up to 30 s).
func TestMembershipWhileARestartBuilds(t *testing.T) {
	slowRestartBegun, slowRestartRelease = make(chan struct{}, 1), make(chan struct{})
	key := testKey(t)
	a := startLocalNode(t, "mr-a", key) // the leader: lowest id
	join := func(id string) *Node {
		n, err := Start(context.Background(), Config{NodeID: id, Bind: "127.0.0.1:0", Key: key, CPUs: 2,
			Labels: map[string]string{"slot": "x"}, Join: []string{a.GossipAddress()}, Logger: actor.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		return n
	}
	b, _ := join("mr-b"), join("mr-c")
	waitFor(t, "3 nodes with directory records", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := a.Spawn(ctx, "test.slowrestart", SpawnOptions{Name: "mover", Node: "mr-b", Labels: map[string]string{"slot": "x"}, MaxRestarts: 1}); err != nil {
		t.Fatal(err)
	}
	b.shutdown() // a crash: no leave, no death records
	select {
	case <-slowRestartBegun: // the leader respawns mover on mr-c
	case <-time.After(30 * time.Second):
		t.Fatal("mover's restart did not begin within 30 s")
	}
	join("mr-d")
	waitFor(t, "mr-d to be a member at the leader while mover builds", 20*time.Second, func() bool { return a.isAlive("mr-d") })
	close(slowRestartRelease)
	waitFor(t, "mover alive on mr-c", 20*time.Second, func() bool {
		rec, _ := a.Directory().Actor("mover")
		return rec.State == Alive && rec.Node == "mr-c"
	})
}
