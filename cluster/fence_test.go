package cluster

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// A node paused (SIGSTOP: a stalled host, a partition) while the cluster
// removes a placement group or moves its bundle off the node holds the
// bundle's reservation when it comes back: the request that would have
// released it could not reach it. It must give the reservation up when
// the group's record reaches it, or its resources stay set aside for
// nothing until it stops.
func TestPausedNodeReleasesBundlesItNoLongerHolds(t *testing.T) {
	for _, tc := range []struct {
		name string
		act  func(ctx context.Context, a *Node, g *PlacementGroup, paused string) error
	}{
		{"group_removed", func(ctx context.Context, a *Node, g *PlacementGroup, _ string) error {
			return a.RemovePlacementGroup(ctx, g.ID)
		}},
		{"bundle_moved", func(_ context.Context, a *Node, g *PlacementGroup, paused string) error {
			_, err := a.replaceBundle(g.ID, 0, paused)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := testKey(t)
			a := startLocalNode(t, "a-fence", key)
			procs := map[string]*testNode{}
			for _, id := range []string{"v-fence", "w-fence"} {
				procs[id] = startNodeProcess(t, id, key, a.GossipAddress(), 0, "role=worker")
			}
			waitFor(t, "3 nodes", 10*time.Second, func() bool { return nodeCount(a) == 3 })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			g, err := a.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 1}, Labels: map[string]string{"role": "worker"}}}, Pack)
			if err != nil {
				t.Fatal(err)
			}
			paused := g.Nodes[0]
			used := func() float64 {
				rec, _ := a.dir.Node(paused)
				return rec.Used[CPU]
			}
			waitFor(t, "the bundle's reservation on "+paused, 10*time.Second, func() bool { return used() == 1 })

			p := procs[paused].Cmd.Process
			if err := p.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			resumed := false
			defer func() {
				if !resumed {
					_ = p.Signal(syscall.SIGCONT)
				}
			}()
			waitFor(t, paused+" taken for lost", 20*time.Second, func() bool { return !a.isAlive(paused) })
			if err := tc.act(ctx, a, g, paused); err != nil {
				t.Fatal(err)
			}
			if err := p.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			resumed = true
			waitFor(t, paused+" back", 20*time.Second, func() bool { return a.isAlive(paused) })
			waitFor(t, paused+" releasing the bundle it no longer holds", 20*time.Second, func() bool { return used() == 0 })
			if tc.name == "bundle_moved" {
				rec, _ := a.dir.Group(g.ID)
				other, _ := a.dir.Node(rec.Nodes[0])
				if rec.Nodes[0] == paused || other.Used[CPU] != 1 {
					t.Errorf("bundle now on %s using CPU %v; want it on the other worker, reserved", rec.Nodes[0], other.Used[CPU])
				}
			}
		})
	}
}

// A member that does not answer its reservation (frozen and not yet
// taken for lost; a firewall that drops its actor port while gossip
// passes) is left out of a placement group, which goes to the nodes that
// answer, instead of failing the group. Here the frozen node is the one
// the placement prefers (most GPUs free).
func TestPlacementGroupLeavesOutANodeThatDoesNotAnswer(t *testing.T) {
	key := testKey(t)
	lan, err := ParseDetection("lan") // the frozen node stays a member for about 11 s
	if err != nil {
		t.Fatal(err)
	}
	a := startLocalNodeWith(t, "a-silent", key, lan)
	env := "RLNODE_TEST_DETECTION=lan"
	frozen := startNodeProcess(t, "v-silent", key, a.GossipAddress(), 8, "", env)
	startNodeProcess(t, "w-answers", key, a.GossipAddress(), 1, "", env)
	waitFor(t, "3 nodes", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	if err := frozen.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer frozen.Cmd.Process.Signal(syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := a.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{GPU: 1}}}, Pack)
	if err != nil {
		t.Fatalf("placement group with v-silent frozen: %v", err)
	}
	if g.Nodes[0] != "w-answers" {
		t.Errorf("bundle on %s, want w-answers (v-silent does not answer)", g.Nodes[0])
	}
}
