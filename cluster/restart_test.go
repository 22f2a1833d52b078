package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// joinSlotX starts node id, 2 CPUs and the label slot=x, joined to a.
func joinSlotX(t *testing.T, a *Node, key []byte, id string) *Node {
	t.Helper()
	n, err := Start(context.Background(), Config{NodeID: id, Bind: "127.0.0.1:0", Key: key, CPUs: 2,
		Labels: map[string]string{"slot": "x"}, Join: []string{a.GossipAddress()}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

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
	join := func(id string) *Node { return joinSlotX(t, a, key, id) }
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

// gatedRestart builds at once the first time and, restarted after its
// node was lost, waits for gatedRelease (or its build's end), like a model
// that loads for a long time; gatedBegun counts the restarts begun.
var (
	gatedBegun   = make(chan string, 4)
	gatedRelease = make(chan struct{})
)

func init() {
	actor.RegisterKind("test.gatedrestart", func(ctx *actor.Context, _ any) (actor.Actor, error) {
		if ctx.Restarts() > 0 {
			gatedBegun <- ctx.Self().Name
			select {
			case <-gatedRelease:
			case <-ctx.Context().Done():
				return nil, ctx.Context().Err()
			}
		}
		return slowBuilt{}, nil
	})
}

// A restart after node loss is bounded by the actor's own
// SpawnOptions.RestartTimeout, not by one fixed 30 s: an actor that
// allows 1 s is marked DEAD saying so while one that allows 5 min, lost
// with it, goes on building and starts (restarted first: the leader goes
// through the actors by name). Before, every restart had 30 s
// (an actor whose model loads for longer was marked DEAD), and restarts
// ran one after another, so a slow one held up the others'.
func TestRestartTimeoutIsTheActors(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "rt-a", key) // the leader: lowest id
	join := func(id string) *Node { return joinSlotX(t, a, key, id) }
	b, _ := join("rt-b"), join("rt-c")
	waitFor(t, "3 nodes with directory records", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := a.Spawn(ctx, "test.gatedrestart", SpawnOptions{Name: "bad", RestartTimeout: 2 * time.Hour}); err == nil || !strings.Contains(err.Error(), "RestartTimeout 2h0m0s: want 0") {
		t.Errorf("spawn with a 2 h restart timeout: %v", err)
	}
	for name, limit := range map[string]time.Duration{"hasty": time.Second, "calm": 5 * time.Minute} {
		if _, err := a.Spawn(ctx, "test.gatedrestart", SpawnOptions{Name: name, Node: "rt-b", Labels: map[string]string{"slot": "x"},
			MaxRestarts: 1, RestartTimeout: limit}); err != nil {
			t.Fatal(err)
		}
	}
	b.shutdown() // a crash: no leave, no death records
	begun := map[string]bool{}
	for len(begun) < 2 {
		select {
		case name := <-gatedBegun: // both restarts build at once, on rt-c
			begun[name] = true
		case <-ctx.Done():
			t.Fatalf("restarts begun: %v; want hasty and calm building at once", begun)
		}
	}
	waitFor(t, "hasty DEAD", 20*time.Second, func() bool {
		rec, _ := a.Directory().Actor("hasty")
		return rec.State == Dead
	})
	if rec, _ := a.Directory().Actor("hasty"); !strings.Contains(rec.Cause, "restart did not finish within 1s (SpawnOptions.RestartTimeout)") {
		t.Errorf("hasty's cause %q", rec.Cause)
	}
	if rec, _ := a.Directory().Actor("calm"); rec.State != Restarting {
		t.Fatalf("calm is %s (%s) while it builds, want RESTARTING", rec.State, rec.Cause)
	}
	close(gatedRelease)
	waitFor(t, "calm alive on rt-c", 20*time.Second, func() bool {
		rec, _ := a.Directory().Actor("calm")
		return rec.State == Alive && rec.Node == "rt-c"
	})
}

// A node killed and started again under its id and gossip address before
// the others noticed the loss (a supervisor restarting it at once) loses
// the actors its earlier process ran, as a lost node does: one with
// restarts left restarts, one without is DEAD, the cause naming the
// restart. They stayed ALIVE on it for ever, calls going to the gone
// process's address (an rlnode job stuck RUNNING, which job stop could
// not stop).
func TestActorsOfANodeStartedAgainUnderItsID(t *testing.T) {
	key := testKey(t)
	a := startLocalNodeWith(t, "ra-a", key, LANDetection) // the leader, slow to notice a loss
	start := func(bind string) *Node {
		n, err := Start(context.Background(), Config{NodeID: "ra-c", Bind: bind, Key: key, CPUs: 2,
			Join: []string{a.GossipAddress()}, Detection: LANDetection, Logger: actor.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		return n
	}
	c := start("127.0.0.1:0")
	waitFor(t, "2 nodes with directory records", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for name, restarts := range map[string]int{"moves": 1, "ends": 0} {
		if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: name, Node: "ra-c", Detached: true, MaxRestarts: restarts}); err != nil {
			t.Fatal(err)
		}
	}
	gossip := c.GossipAddress()
	c.shutdown() // a crash: no leave, no death records
	start(gossip)
	waitFor(t, "moves restarted and ends DEAD", 60*time.Second, func() bool {
		m, _ := a.Directory().Actor("moves")
		e, _ := a.Directory().Actor("ends")
		return m.State == Alive && m.Restarts == 1 && e.State == Dead
	})
	if e, _ := a.Directory().Actor("ends"); !strings.Contains(e.Cause, "node ra-c restarted") {
		t.Errorf("ends: cause %q", e.Cause)
	}
	h, err := a.Lookup(ctx, "moves")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Call[Sum](ctx, h, WhereAreYou{}); err != nil {
		t.Errorf("moves, restarted: %v", err)
	}
}
