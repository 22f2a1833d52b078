package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// A spawn that finds no room is ErrNoRoom when room others hold would
// let it in: rlnode run exits 75 on it, and a job waits for room and
// starts its driver again. Two ways it was misjudged:
//   - the spawner's view was stale (gossip had not yet brought what
//     another node's actor took), so it asked the full node, was refused
//     and left that node out; placed again on the rest, the spawn was
//     ErrInfeasible alone, "never", and a job submitted while others
//     held the room failed instead of waiting (2 of 8 jobs of a sweep);
//   - the room it lacked was held by the spawner's own actors (a run
//     whose learner takes a CPU of the two its rollout actor wants): the
//     run exited 75 though that room frees only when it ends, so its job
//     would wait for ever, starting its driver again each time its own
//     driver's exit freed the learner's CPU. Such a spawn, and a group
//     likewise, is ErrHeldBySelf too (still ErrNoRoom: a program may
//     release its own actors, and a waiting group waits for them).
func TestSpawnNoRoomNowOrNever(t *testing.T) {
	start := lanNodes(t)
	a := start("snr-a", 0.5, nil)
	start("snr-b", 2, []string{a.GossipAddress()})
	c := start("snr-c", 0.5, []string{a.GossipAddress()})
	freeOnB := func(n *Node) float64 { return freeCPUOn(n, "snr-b") }
	waitFor(t, "a and c to see b with 2 free CPUs", 20*time.Second, func() bool { return freeOnB(a) == 2 && freeOnB(c) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := func(what string, err error, noRoom, self bool) {
		t.Helper()
		if !errors.Is(err, ErrInfeasible) {
			t.Fatalf("%s: %v, want ErrInfeasible", what, err)
		}
		if errors.Is(err, ErrNoRoom) != noRoom || errors.Is(err, ErrHeldBySelf) != self {
			t.Errorf("%s: %v: ErrNoRoom %v, ErrHeldBySelf %v; want %v, %v", what, err, errors.Is(err, ErrNoRoom), errors.Is(err, ErrHeldBySelf), noRoom, self)
		}
	}

	// The spawner's own actor holds most of b: its next one never fits
	// while it waits, fresh view or stale.
	own, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "snr-own", Node: "snr-b", Resources: Resources{CPU: 1.5}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to see b with 0.5 free", 20*time.Second, func() bool { return freeOnB(a) == 0.5 })
	_, err = a.Spawn(ctx, "test.counter", SpawnOptions{Name: "snr-x", Resources: Resources{CPU: 1}})
	want("the room held by the spawner's own actor", err, true, true)
	if !strings.Contains(fmt.Sprint(err), "actor snr-own {CPU:1.5} on snr-b") {
		t.Errorf("the error does not name the spawner's own actor: %v", err)
	}
	_, err = a.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 1}}}, Pack)
	want("a group whose room the creator's own actor holds", err, true, true)
	waitFor(t, "c to see b with 0.5 free", 20*time.Second, func() bool { return freeOnB(c) == 0.5 })
	_, err = c.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 1}}}, Pack)
	want("a group whose room another node's actor holds", err, true, false)
	if err := own.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a and c to see b with 2 free again", 20*time.Second, func() bool { return freeOnB(a) == 2 && freeOnB(c) == 2 })

	// Another node's actor holds it, and a's view of b is stale.
	a.cutOff(true)
	defer a.cutOff(false)
	if _, err := c.Spawn(ctx, "test.counter", SpawnOptions{Name: "snr-other", Node: "snr-b", Resources: Resources{CPU: 1.5}}); err != nil {
		t.Fatal(err)
	}
	if free := freeOnB(a); free != 2 {
		t.Skipf("a's view of b is already fresh (%v free): nothing stale to place on", free)
	}
	_, err = a.Spawn(ctx, "test.counter", SpawnOptions{Name: "snr-y", Resources: Resources{CPU: 1}})
	want("the room held by another node's actor, seen stale", err, true, false)
	t.Logf("seen stale: %v", err)
	// The per-node list names the node that refused, with the room it
	// said it had: it was left out of the list once placement skipped it,
	// so the error named only the two nodes that never could.
	if !strings.Contains(fmt.Sprint(err), "snr-b CPU 0.5/2") {
		t.Errorf("the error does not give the refusing node's free room: %v", err)
	}
	a.cutOff(false)
	waitFor(t, "a to see b with 0.5 free, and the actor that holds it", 20*time.Second, func() bool {
		rec, ok := a.dir.Actor("snr-other")
		return freeOnB(a) == 0.5 && ok && rec.State == Alive
	})
	_, err = a.Spawn(ctx, "test.counter", SpawnOptions{Name: "snr-z", Resources: Resources{CPU: 1}})
	want("the room held by another node's actor", err, true, false)
	// It names what holds the room, as a group's refusal does.
	if !strings.Contains(fmt.Sprint(err), "the room is held by actor snr-other ({CPU:1.5} on snr-b)") {
		t.Errorf("the error does not name the actor that holds the room: %v", err)
	}
}

// A spawn pinned to a node that lacks room is ErrNoRoom as an unpinned
// one is, and ErrHeldBySelf where the spawner's own actors hold that
// room: rlnode run exits 75 on it and its job waits PENDING. When the
// spawner's view of the node was stale, the node's refusal came back as
// its text alone (neither ErrNoRoom nor ErrInfeasible): the run exited 1
// and its job FAILED.
func TestPinnedSpawnNoRoom(t *testing.T) {
	start := lanNodes(t)
	a := start("pin-a", 0.5, nil)
	start("pin-b", 2, []string{a.GossipAddress()})
	c := start("pin-c", 0.5, []string{a.GossipAddress()})
	freeOnB := func(n *Node) float64 { return freeCPUOn(n, "pin-b") }
	bothSeeAllFree := func() bool { return freeOnB(a) == 2 && freeOnB(c) == 2 }
	waitFor(t, "a and c to see b with 2 free CPUs", 20*time.Second, bothSeeAllFree)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pinned := func(what string, name string, cpus float64, noRoom, self bool) {
		t.Helper()
		_, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: name, Node: "pin-b", Resources: Resources{CPU: cpus}})
		t.Logf("%s: %v", what, err)
		if !errors.Is(err, ErrInfeasible) || !strings.Contains(fmt.Sprint(err), "pin-b") {
			t.Errorf("%s: %v; want ErrInfeasible naming pin-b", what, err)
			return
		}
		if errors.Is(err, ErrNoRoom) != noRoom || errors.Is(err, ErrHeldBySelf) != self {
			t.Errorf("%s: %v: ErrNoRoom %v, ErrHeldBySelf %v; want %v, %v", what, err, errors.Is(err, ErrNoRoom), errors.Is(err, ErrHeldBySelf), noRoom, self)
		}
	}
	stale := func() bool {
		t.Helper()
		if free := freeOnB(a); free != 2 {
			t.Logf("a's view of b is already fresh (%v free): the stale case is not tried", free)
			return false
		}
		return true
	}

	// a's own actor holds most of b, as a's view shows.
	own, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "pin-own", Node: "pin-b", Resources: Resources{CPU: 1.5}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to see b with 0.5 free", 20*time.Second, func() bool { return freeOnB(a) == 0.5 })
	pinned("pinned where the spawner's own actor holds the room", "pin-1", 1, true, true)
	pinned("pinned, more than the node has", "pin-2", 4, false, false)
	if err := own.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a and c to see b with 2 free again", 20*time.Second, bothSeeAllFree)

	// The same, with a's view of b stale: b refuses.
	a.cutOff(true)
	own, err = a.Spawn(ctx, "test.counter", SpawnOptions{Name: "pin-own2", Node: "pin-b", Resources: Resources{CPU: 1.5}})
	if err != nil {
		t.Fatal(err)
	}
	if stale() {
		pinned("pinned where the spawner's own actor holds the room, seen stale", "pin-3", 1, true, true)
	}
	a.cutOff(false)
	if err := own.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a and c to see b with 2 free again", 20*time.Second, bothSeeAllFree)

	// Another node's actor holds it, first seen stale, then fresh.
	a.cutOff(true)
	if _, err := c.Spawn(ctx, "test.counter", SpawnOptions{Name: "pin-other", Node: "pin-b", Resources: Resources{CPU: 1.5}}); err != nil {
		t.Fatal(err)
	}
	if stale() {
		pinned("pinned where another node's actor holds the room, seen stale", "pin-4", 1, true, false)
	}
	a.cutOff(false)
	waitFor(t, "a to see b with 0.5 free", 20*time.Second, func() bool { return freeOnB(a) == 0.5 })
	pinned("pinned where another node's actor holds the room", "pin-5", 1, true, false)
}

// lanNodes returns a starter of nodes with LAN detection under one key,
// each stopped when the test ends.
func lanNodes(t *testing.T) func(id string, cpus float64, join []string) *Node {
	key := testKey(t)
	return func(id string, cpus float64, join []string) *Node {
		t.Helper()
		n, err := Start(context.Background(), Config{NodeID: id, Bind: "127.0.0.1:0", Key: key, CPUs: cpus,
			Join: join, Detection: LANDetection, Logger: actor.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		return n
	}
}

// freeCPUOn is the free CPU that n's view gives node id, -1 when it has
// no view of it.
func freeCPUOn(n *Node, id string) float64 {
	for _, v := range n.Views() {
		if v.ID == id {
			return v.Free[CPU]
		}
	}
	return -1
}

// A spawn into a placement-group bundle that the group's own actors
// already fill is ErrNoRoom and, the group being the spawner's own,
// ErrHeldBySelf, saying who holds the bundle; one larger than the bundle
// is ErrInfeasible alone. Both came back as plain text, so a caller could
// not tell "wait" from "never" (a pinned spawn's refusal was typed already,
// TestPinnedSpawnNoRoom).
func TestBundleSpawnNoRoom(t *testing.T) {
	n := startLocalNode(t, "bundle-a", testKey(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := n.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 1}}}, Pack)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Spawn(ctx, "test.counter", SpawnOptions{Name: "in-bundle", Group: g, Bundle: 0, Resources: Resources{CPU: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name          string
		cpus          float64
		noRoom, self  bool
		says, notSays string
	}{
		{"bundle-full", 1, true, true, "the group's own actors hold the bundle (in-bundle {CPU:1})", "others hold"},
		{"bundle-too-small", 2, false, false, "reserves {CPU:1} in all, lacks CPU", "own actors"},
	} {
		_, err := n.Spawn(ctx, "test.counter", SpawnOptions{Name: c.name, Group: g, Bundle: 0, Resources: Resources{CPU: c.cpus}})
		t.Logf("%s: %v", c.name, err)
		if !errors.Is(err, ErrInfeasible) || errors.Is(err, ErrNoRoom) != c.noRoom || errors.Is(err, ErrHeldBySelf) != c.self {
			t.Errorf("%s: %v: ErrInfeasible %v, ErrNoRoom %v, ErrHeldBySelf %v; want true, %v, %v", c.name, err,
				errors.Is(err, ErrInfeasible), errors.Is(err, ErrNoRoom), errors.Is(err, ErrHeldBySelf), c.noRoom, c.self)
		}
		if msg := fmt.Sprint(err); !strings.Contains(msg, c.says) || c.notSays != "" && strings.Contains(msg, c.notSays) {
			t.Errorf("%s: %q: want it to say %q (and not %q)", c.name, msg, c.says, c.notSays)
		}
	}
}

// A group whose room only the creator's own actors hold says so, once,
// and not that others hold it, nor that a waiting group would get it:
// such room frees only when the creator releases it. The error named the
// creator's actor twice, ended "(no room now: others hold it)" and
// advised GroupOptions.Wait, which would wait for ever.
func TestGroupHeldBySelfSaysSo(t *testing.T) {
	n := startLocalNode(t, "self-a", testKey(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := n.Spawn(ctx, "test.counter", SpawnOptions{Name: "self-holder", Resources: Resources{CPU: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Spawn(ctx, "test.counter", SpawnOptions{Name: "self-empty"}); err != nil {
		t.Fatal(err)
	}
	_, err := n.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 2}}}, Pack)
	t.Logf("%v", err)
	if !errors.Is(err, ErrHeldBySelf) {
		t.Fatalf("%v: want ErrHeldBySelf", err)
	}
	msg := err.Error()
	for _, bad := range []string{"others hold", "GroupOptions.Wait", "self-empty", "1 bundles"} {
		if strings.Contains(msg, bad) {
			t.Errorf("%q says %q", msg, bad)
		}
	}
	if strings.Count(msg, "self-holder") != 1 {
		t.Errorf("%q: want the holder named once", msg)
	}
}
