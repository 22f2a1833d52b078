package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// A record change reaches every node by gossip, not only the few its
// writer's broadcast reaches: the writer sends a broadcast a few times
// (3 × ⌈log10(N+1)⌉), so with six nodes some never got it until the next
// full-state push/pull, 5 s later with fast detection, 30 s with lan, and
// never under a partition. Each node that learns a change now passes it on
// once. Push/pull is an hour here, so only gossip can deliver.
func TestRecordChangesReachEveryNode(t *testing.T) {
	key := testKey(t)
	det := FastDetection
	det.PushPull = time.Hour
	var nodes []*Node
	for i := range 6 {
		var join []string
		if i > 0 {
			join = []string{nodes[0].GossipAddress()}
		}
		n, err := Start(context.Background(), Config{NodeID: fmt.Sprintf("rg-%d", i), Bind: "127.0.0.1:0", Key: key, CPUs: 2,
			Join: join, Detection: det, Logger: actor.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		nodes = append(nodes, n)
	}
	waitFor(t, "six members everywhere", 20*time.Second, func() bool {
		for _, n := range nodes {
			if len(n.aliveIDs()) != 6 {
				return false
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		name := fmt.Sprintf("rg-actor-%d", i)
		if _, err := nodes[0].Spawn(ctx, "test.counter", SpawnOptions{Name: name, Node: "rg-0"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, name+" ALIVE on every node", 15*time.Second, func() bool {
			for _, n := range nodes {
				if r, ok := n.dir.Actor(name); !ok || r.State != Alive {
					return false
				}
			}
			return true
		})
	}
}

// A placement group chosen from a stale view (gossip has not brought the
// resources a node just gave an actor) is placed again on the refusing
// node's own record, which its refusal carries: before, every try read
// the same stale view and the group failed with "nodes kept refusing
// reservations" (seen now and then with mlmt_math on 2 learner shards).
// The creating node's gossip is cut here, so its view stays stale.
func TestPlacementGroupRetriesOnTheRefusingNodesRecord(t *testing.T) {
	key := testKey(t)
	start := func(id string, cpus float64, join []string) *Node {
		n, err := Start(context.Background(), Config{NodeID: id, Bind: "127.0.0.1:0", Key: key, CPUs: cpus,
			Join: join, Detection: LANDetection, Logger: actor.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		return n
	}
	a := start("pgr-a", 1, nil)
	start("pgr-b", 2, []string{a.GossipAddress()})
	start("pgr-c", 2, []string{a.GossipAddress()})
	waitFor(t, "a to see b and c with 2 free CPUs", 20*time.Second, func() bool {
		free := 0
		for _, v := range a.Views() {
			if v.ID != "pgr-a" && v.Free[CPU] == 2 {
				free++
			}
		}
		return free == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a.cutOff(true)
	defer a.cutOff(false)
	if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "pgr-x", Node: "pgr-b", Resources: Resources{CPU: 2}}); err != nil {
		t.Fatal(err)
	}
	for _, v := range a.Views() {
		if v.ID == "pgr-b" && v.Free[CPU] != 2 {
			t.Skipf("a's view of pgr-b is already fresh (%v free): nothing stale to place on", v.Free)
		}
	}
	g, err := a.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 2}}}, Pack)
	if err != nil {
		t.Fatalf("placement group from a stale view: %v", err)
	}
	if g.Nodes[0] != "pgr-c" {
		t.Errorf("placed on %v, want pgr-c (pgr-b is full)", g.Nodes)
	}
}
