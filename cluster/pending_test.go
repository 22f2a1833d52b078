package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

func init() {
	// test.hold holds its resources until the file named exists (or its
	// context ends): the test decides when it ends, with no timing.
	RegisterTask("test.hold", func(ctx context.Context, path string) (bool, error) {
		for {
			if _, err := os.Stat(path); err == nil {
				return true, nil
			}
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
}

// freeOn is what n's view says node id has free.
func freeOn(n *Node, id string) Resources {
	for _, v := range n.Views() {
		if v.ID == id {
			return v.Free
		}
	}
	return nil
}

// A placement group created right after GPU tasks end counts the room
// they freed: a task's answer brings its node's record, as a stop's
// does. Before, the creator's view still charged the tasks until gossip
// came, and the group was refused "missing GPU 2 (has 1.75)".
func TestRoomFreedByTasksIsSeenAtOnce(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "tfreed-a", key)
	startNodeProcess(t, "tfreed-b", key, a.GossipAddress(), 2, "role=gpu")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	onB := map[string]string{"role": "gpu"}
	for round := range 3 {
		done := fmt.Sprintf("%s/done-%d", t.TempDir(), round)
		f := Submit[bool](ctx, a, "test.hold", done, TaskOptions{Resources: Resources{GPU: 0.25}, Labels: onB})
		waitFor(t, "this node to see the task's GPU taken", 10*time.Second, func() bool { return freeOn(a, "tfreed-b")[GPU] == 1.75 })
		if err := os.WriteFile(done, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Get(ctx); err != nil {
			t.Fatal(err)
		}
		pg, err := a.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{GPU: 2}, Labels: onB}}, StrictPack)
		if err != nil {
			t.Fatalf("round %d: a group right after the task that held the room ended: %v", round, err)
		}
		if err := a.RemovePlacementGroup(ctx, pg.ID); err != nil {
			t.Fatal(err)
		}
	}
}
