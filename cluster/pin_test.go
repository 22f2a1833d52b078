package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// An actor pinned to a node that is stopping is restarted elsewhere even
// while that node is still a live member: the leader used to keep the pin
// to the leaving node, which the respawn excludes, so the restart failed
// ("no such live node") and the actor died whenever the leader's pass ran
// before the node's leave was seen (TestThreeNodesSpawnKillRespawn failed
// so on a loaded host).
func TestPinnedActorLeavesAStoppingNode(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "pin-a", key) // the leader: lowest id
	b, err := Start(context.Background(), Config{NodeID: "pin-b", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Join: []string{a.GossipAddress()}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// Node.Stop would wait for a stop this test only begins: shut b down.
	t.Cleanup(b.shutdown)
	waitFor(t, "2 nodes with directory records", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "pinned", Node: "pin-b", MaxRestarts: 1}); err != nil {
		t.Fatal(err)
	}
	// The first steps of b's Stop, with b kept a member: it says it is
	// leaving, and its actor dies with "node stopped".
	b.stopMu.Lock()
	b.leaving = true
	b.stopMu.Unlock()
	b.publishNode()
	if err := b.sys.StopLocal("pinned", "node stopped"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the leader to restart or bury pinned", 20*time.Second, func() bool {
		rec, _ := a.Directory().Actor("pinned")
		return rec.State == Dead || rec.State == Alive && rec.Node == "pin-a"
	})
	if rec, _ := a.Directory().Actor("pinned"); rec.State != Alive || rec.Node != "pin-a" || !a.isAlive("pin-b") {
		t.Fatalf("pinned after its node began to stop: %s on %q (%s); pin-b alive: %v", rec.State, rec.Node, rec.Cause, a.isAlive("pin-b"))
	}
}
