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
