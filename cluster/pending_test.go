package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
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

// waitResult is what a waiting CreatePlacementGroupWith returned.
type waitResult struct {
	pg  *PlacementGroup
	err error
}

// waitInBackground starts a waiting group and returns where it tells
// what it waits for and where its result comes.
func waitInBackground(ctx context.Context, n *Node, bundles []Bundle, st Strategy) (<-chan string, <-chan waitResult) {
	pending := make(chan string, 100)
	res := make(chan waitResult, 1)
	go func() {
		pg, err := n.CreatePlacementGroupWith(ctx, bundles, st, GroupOptions{Wait: true, Pending: func(why string) {
			select {
			case pending <- why:
			default:
			}
		}})
		res <- waitResult{pg, err}
	}()
	return pending, res
}

// pendingIn is the status of group-less PENDING groups n's directory
// shows, by what they wait for.
func pendingIn(n *Node) []GroupStatus {
	var out []GroupStatus
	for _, g := range n.Status().Groups {
		if g.State == "PENDING" {
			out = append(out, g)
		}
	}
	return out
}

// usedOn is what n's view says node id has in use.
func usedOn(n *Node, id string) Resources {
	for _, v := range n.Views() {
		if v.ID == id {
			return v.Total.Sub(v.Free)
		}
	}
	return nil
}

// A group whose room an actor and then a task hold waits for it, shows
// as PENDING naming them, and is created once they let it go, as Ray's
// placement groups wait. A group the cluster could never hold still
// fails at once.
func TestWaitingGroupGetsTheRoomWhenReleased(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "wait-a", key)
	startNodeProcess(t, "wait-b", key, a.GossipAddress(), 2, "role=gpu")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	onB := map[string]string{"role": "gpu"}
	whole := []Bundle{{Resources: Resources{GPU: 1}, Labels: onB}, {Resources: Resources{GPU: 1}, Labels: onB}}

	// Infeasible on the cluster's total: refused at once, not left waiting.
	_, err := a.CreatePlacementGroupWith(ctx, []Bundle{{Resources: Resources{GPU: 4}, Labels: onB}}, StrictPack, GroupOptions{Wait: true})
	if !errors.Is(err, ErrInfeasible) || errors.Is(err, ErrNoRoom) || ctx.Err() != nil || !strings.Contains(err.Error(), "the group needs GPU 4 (has 2)") {
		t.Fatalf("a group no node could ever hold: %v; want it refused at once, naming what is missing", err)
	}

	// Held by an actor.
	holder, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "gpu-holder", Labels: onB, Resources: Resources{GPU: 2}})
	if err != nil {
		t.Fatal(err)
	}
	// a's own actor: ErrHeldBySelf names it.
	if _, err := a.CreatePlacementGroup(ctx, whole, StrictPack); !errors.Is(err, ErrHeldBySelf) || !strings.Contains(err.Error(), "actor gpu-holder {GPU:2} on wait-b") {
		t.Fatalf("without Wait, a group whose room is held: %v; want it refused at once, naming what holds the room", err)
	}
	pending, res := waitInBackground(ctx, a, whole, StrictPack)
	why := <-pending
	if !strings.Contains(why, "missing GPU 2 (has 0) free") || !strings.Contains(why, "actor gpu-holder ({GPU:2} on wait-b)") {
		t.Fatalf("waits for: %q; want what is missing and the actor that holds it", why)
	}
	if ps := pendingIn(a); len(ps) != 1 || ps[0].Pending != why || len(ps[0].Nodes) != 0 {
		t.Fatalf("status shows %+v; want the group PENDING with what it waits for", ps)
	}
	if err := holder.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatalf("after the actor let the room go: %v", r.err)
	}
	if r.pg.Nodes[0] != "wait-b" || r.pg.Nodes[1] != "wait-b" {
		t.Fatalf("placed on %v", r.pg.Nodes)
	}
	if ps := pendingIn(a); len(ps) != 0 {
		t.Fatalf("status still shows %+v PENDING once it is created", ps)
	}
	if err := a.RemovePlacementGroup(ctx, r.pg.ID); err != nil {
		t.Fatal(err)
	}

	// Held by a task.
	done := t.TempDir() + "/done"
	f := Submit[bool](ctx, a, "test.hold", done, TaskOptions{Resources: Resources{GPU: 1.5}, Labels: onB})
	waitFor(t, "this node to see the task's GPU taken", 10*time.Second, func() bool { return freeOn(a, "wait-b")[GPU] == 0.5 })
	pending, res = waitInBackground(ctx, a, whole, Spread)
	if why := <-pending; !strings.Contains(why, "1 task ({GPU:1.5} on wait-b)") {
		t.Fatalf("waits for: %q; want the task that holds the room", why)
	}
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-res; r.err != nil {
		t.Fatalf("after the task let the room go: %v", r.err)
	} else if err := a.RemovePlacementGroup(ctx, r.pg.ID); err != nil {
		t.Fatal(err)
	}
}

// Waiters racing for the same room across two nodes neither deadlock nor
// keep half of it each: one gets the group, the other waits on, holding
// nothing, and gets it when the first is removed. A waiter whose ctx
// ends leaves nothing reserved on any node and no record in status.
func TestWaitingGroupsRaceAndGiveUpCleanly(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "race-a", key)
	startNodeProcess(t, "race-b", key, a.GossipAddress(), 0, "role=x")
	startNodeProcess(t, "race-c", key, a.GossipAddress(), 0, "role=x")
	waitFor(t, "3 nodes", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	onX := map[string]string{"role": "x"}
	var holders []*Handle
	for _, node := range []string{"race-b", "race-c"} {
		h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "holder-" + node, Node: node, Resources: Resources{CPU: 2}})
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, h)
	}
	both := []Bundle{{Resources: Resources{CPU: 2}, Labels: onX}, {Resources: Resources{CPU: 2}, Labels: onX}}
	const waiters = 3
	type waiter struct {
		pending <-chan string
		res     <-chan waitResult
		cancel  context.CancelFunc
	}
	ws := make([]waiter, waiters)
	for i := range ws {
		wctx, wcancel := context.WithCancel(ctx)
		p, r := waitInBackground(wctx, a, both, StrictSpread)
		ws[i] = waiter{p, r, wcancel}
		<-p
	}
	if ps := pendingIn(a); len(ps) != waiters {
		t.Fatalf("status shows %d PENDING groups, want %d", len(ps), waiters)
	}
	// The last waiter gives up while the room is still held.
	ws[waiters-1].cancel()
	if r := <-ws[waiters-1].res; r.err == nil || !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), "held by actor holder-race-") {
		t.Fatalf("a waiter whose ctx ended: %v; want its ctx's end and what held the room", r.err)
	}
	ws = ws[:waiters-1]
	for _, h := range holders {
		if err := h.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// One waiter gets both nodes; the other keeps waiting, holding none.
	var got waitResult
	var rest waiter
	select {
	case got = <-ws[0].res:
		rest = ws[1]
	case got = <-ws[1].res:
		rest = ws[0]
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	waitFor(t, "one PENDING group left", 10*time.Second, func() bool { return len(pendingIn(a)) == 1 })
	select {
	case r := <-rest.res:
		t.Fatalf("the second waiter got %+v, %v while the first holds the room", r.pg, r.err)
	default:
	}
	if err := a.RemovePlacementGroup(ctx, got.pg.ID); err != nil {
		t.Fatal(err)
	}
	second := <-rest.res
	if second.err != nil {
		t.Fatalf("the second waiter, once the first group was removed: %v", second.err)
	}
	// The second gives its room back; the one that gave up left none
	// held: every node's record comes back to nothing in use.
	if err := a.RemovePlacementGroup(ctx, second.pg.ID); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"race-b", "race-c"} {
		waitFor(t, node+" to hold nothing", 10*time.Second, func() bool { return usedOn(a, node)[CPU] == 0 })
	}
	if gs := a.Status().Groups; len(gs) != 0 {
		t.Fatalf("status still shows %+v", gs)
	}
}

// A caller that gives up (ctx ends) while a node is still asked for its
// bundle leaves nothing reserved on the nodes that already said yes.
// Before, those were released with the caller's ended ctx, which failed:
// they stayed reserved until the node stopped.
func TestGivenUpGroupLeavesNothingReserved(t *testing.T) {
	key := testKey(t)
	// LAN detection: the frozen node is not taken for lost while asked.
	a := startLocalNodeWith(t, "giveup-a", key, LANDetection)
	startNodeProcess(t, "giveup-b", key, a.GossipAddress(), 0, "role=x")
	m := startNodeProcess(t, "giveup-m", key, a.GossipAddress(), 0, "role=x")
	waitFor(t, "3 nodes", 20*time.Second, func() bool { return nodeCount(a) == 3 })
	// Frozen: its reservation is never answered (a stalled host).
	if err := m.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Cmd.Process.Signal(syscall.SIGCONT) })
	onX := map[string]string{"role": "x"}
	two := []Bundle{{Resources: Resources{CPU: 1}, Labels: onX}, {Resources: Resources{CPU: 1}, Labels: onX}}
	for _, wait := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() {
			_, err := a.CreatePlacementGroupWith(ctx, two, StrictSpread, GroupOptions{Wait: wait})
			res <- err
		}()
		// giveup-b (first in id order) said yes; giveup-m is being asked.
		waitFor(t, "giveup-b's bundle reserved", 20*time.Second, func() bool { return usedOn(a, "giveup-b")[CPU] == 1 })
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Fatalf("wait %v: %v; want the caller's ctx's end", wait, err)
		}
		waitFor(t, "giveup-b to hold nothing", 20*time.Second, func() bool { return usedOn(a, "giveup-b")[CPU] == 0 })
	}
}
