package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// cutOff drops (on) or passes again (off) every gossip packet and stream
// to and from n, as a network partition around it would: the others take
// it for lost and it takes them for lost, while both sides run on.
func (n *Node) cutOff(on bool) { n.gossipNet.cut.Store(on) }

// A node cut off from the rest of the cluster sees every other node lost
// and, as the only member it can see, is its own leader. It used to take
// the actors of all the others for lost too and record them DEAD ("node
// lost"): its status showed actors that ran as dead, then, once the dead
// records' time was up, no actors at all; a node cut off only one way
// (it can send, not receive) sent those records to the others, whose
// hosts then stopped their actors that ran. And when the partition healed,
// neither side joined the other again: each went on alone for good.
// Now a node that sees fewer than half of the cluster's nodes leaves the
// actors of the nodes it lost as they are, and lost members are joined
// again once they can be reached.
func TestCutOffNodeLeavesOthersActorsAndRejoins(t *testing.T) {
	// memberlist still gossips to members it declared dead for 30 s,
	// which heals a shorter partition by itself; the test does not wait
	// that long.
	gossipToTheDead = 100 * time.Millisecond
	defer func() { gossipToTheDead = 0 }()
	key := testKey(t)
	a := startLocalNode(t, "a-cut", key) // the lowest id: the leader of the side it is on
	for _, id := range []string{"b-far", "c-far"} {
		startNodeProcess(t, id, key, a.GossipAddress(), 0, "", "RLNODE_TEST_GOSSIP_TO_DEAD=100ms")
	}
	waitFor(t, "3 nodes", 20*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := map[string]string{"far-b": "b-far", "far-c": "c-far"}
	for name, node := range names {
		if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: name, Node: node, Detached: true}); err != nil {
			t.Fatal(err)
		}
	}

	a.cutOff(true)
	cut := true
	defer func() {
		if cut {
			a.cutOff(false)
		}
	}()
	waitFor(t, "a-cut to take b-far and c-far for lost", 30*time.Second, func() bool {
		return !a.isAlive("b-far") && !a.isAlive("c-far") && a.sawLeave("b-far") && a.sawLeave("c-far")
	})
	// b-far and c-far take a-cut for lost as soon (they probe it as
	// often), so by the time a-cut's membership has settled below, neither
	// side gossips to the other any more.
	waitFor(t, "a-cut's membership to settle", 30*time.Second, func() bool { return !a.settling(time.Now()) })
	a.reconcile() // a pass as the reconcile loop runs it every second
	for name, node := range names {
		rec, _ := a.dir.Actor(name)
		if rec.State != Alive || rec.Node != node {
			t.Errorf("cut off: a-cut records %s %s on %q (%s), want it left ALIVE on %s", name, rec.State, rec.Node, rec.Cause, node)
		}
	}
	// Ten minutes on, the dead records a cut-off node wrote were dropped,
	// and rlnode status on it listed no actors at all.
	a.dir.collect(time.Now().Add(time.Second), a.isAlive)
	if got := len(a.Status().Actors); got != len(names) {
		t.Errorf("cut off, once dead records are collected: status lists %d actors, want %d", got, len(names))
	}

	a.cutOff(false)
	cut = false
	waitFor(t, "a-cut to see b-far and c-far again after the partition healed", 60*time.Second, func() bool {
		return a.isAlive("b-far") && a.isAlive("c-far") && nodeCount(a) == 3
	})
	for name, node := range names {
		h, err := a.Lookup(ctx, name)
		if err != nil {
			t.Fatalf("after the heal: %v", err)
		}
		if s, err := Call[Sum](ctx, h, WhereAreYou{}); err != nil || s.Node != node {
			t.Errorf("after the heal: %s answers %+v, %v; want it alive on %s", name, s, err, node)
		}
	}
}

// A member whose actor port cannot be reached while its gossip passes (a
// firewall; here its actor transport is closed) still looks free to
// placement. A spawn placed on it failed at once with "connection ... closed:
// node lost", though other nodes had room: rlnode run, whose rollout pool
// spawns its actors on any node, gave up. The spawn now goes to the next
// node that fits.
func TestSpawnGoesElsewhereWhenTheChosenNodeCannotBeReached(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "a-reachable", key)
	startNodeProcess(t, "b-mute", key, a.GossipAddress(), 0, "", "RLNODE_TEST_MUTE_ACTORS=1")
	waitFor(t, "2 nodes", 20*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Half of a-reachable's CPUs taken: placement prefers b-mute, idle.
	if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "filler", Node: "a-reachable", Resources: Resources{CPU: 1}}); err != nil {
		t.Fatal(err)
	}
	h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "placed", Resources: Resources{CPU: 0.5}})
	if err != nil {
		t.Fatalf("spawn with b-mute unreachable and room on a-reachable: %v", err)
	}
	if rec, _ := h.Record(); rec.Node != "a-reachable" || rec.State != Alive {
		t.Fatalf("placed on %s (%s), want ALIVE on a-reachable", rec.Node, rec.State)
	}
}

// Most of the cluster killed at once (SIGKILL, a crash) is not a
// partition: their hosts refuse connections on the gossip port, so the
// survivor stops counting them for hasQuorum and restarts their actors as
// it did before quorum, instead of waiting as if it were the one cut off.
func TestSurvivorOfKilledNodesRestartsTheirActors(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "a-survives", key)
	var killed []*testNode
	for _, id := range []string{"b-killed", "c-killed"} {
		killed = append(killed, startNodeProcess(t, id, key, a.GossipAddress(), 0, ""))
	}
	waitFor(t, "3 nodes", 20*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "moves", Node: "b-killed", MaxRestarts: 1, Detached: true}); err != nil {
		t.Fatal(err)
	}
	for _, k := range killed {
		_ = k.Cmd.Process.Kill()
	}
	waitFor(t, "the actor of b-killed restarted on a-survives", 60*time.Second, func() bool {
		rec, _ := a.dir.Actor("moves")
		return rec.State == Alive && rec.Node == "a-survives"
	})
}

// The first node of a cluster (`rlnode start`, which joins no one) killed
// and started again with the same command, at the same address, must be
// one cluster with the nodes that joined through it. Before, the members
// that had joined through it dropped its address at the first refused
// connection after the kill (a crash is not a partition), so the node
// started again there stayed a cluster of its own for good: `rlnode
// status` and `rlnode run --address` at its address saw it alone, the
// others went on without it. Now they go on trying that address (one
// they joined through; any other killed member's is given up), and the
// first try after it is up again joins it.
func TestRestartedFirstNodeIsJoinedAgain(t *testing.T) {
	key := testKey(t)
	first := startNodeProcess(t, "s-first", key, "", 0, "", "RLNODE_TEST_BIND=127.0.0.1:0")
	a, err := Start(context.Background(), Config{NodeID: "a-joined", Bind: "127.0.0.1:0", Key: key, CPUs: 2,
		Join: []string{first.gossip}, Detection: FastDetection, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	other := startNodeProcess(t, "o-other", key, a.GossipAddress(), 0, "")
	waitFor(t, "3 nodes", 20*time.Second, func() bool { return nodeCount(a) == 3 })

	// A killed member a-joined did not join through is given up once its
	// host refuses: its port may be another process's by now (seen: the
	// next run's driver took it and got join attempts every 5 s).
	_ = other.Cmd.Process.Kill()
	<-other.Exited
	waitFor(t, "a-joined to drop o-other once its address refuses", 30*time.Second, func() bool {
		a.lmu.Lock()
		defer a.lmu.Unlock()
		_, ok := a.lost["o-other"]
		return a.sawLeave("o-other") && !ok
	})

	_ = first.Cmd.Process.Kill()
	<-first.Exited
	waitFor(t, "a-joined to take s-first for lost", 30*time.Second, func() bool { return !a.isAlive("s-first") && a.sawLeave("s-first") })
	// The node started again must find a-joined past its first try of the
	// address, which finds nothing listening there.
	waitFor(t, "a-joined to find s-first's address refused", 30*time.Second, func() bool {
		a.lmu.Lock()
		defer a.lmu.Unlock()
		l, ok := a.lost["s-first"]
		return !ok || l.ended
	})

	again := startNodeProcess(t, "s-again", key, "", 0, "", "RLNODE_TEST_BIND="+first.gossip)
	if again.gossip != first.gossip {
		t.Fatalf("the node started again listens on %s, want %s", again.gossip, first.gossip)
	}
	waitFor(t, "a-joined and the first node started again to be one cluster", 60*time.Second, func() bool {
		return a.isAlive("s-again") && nodeCount(a) == 2
	})
}
