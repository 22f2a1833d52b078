package cluster

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/logbuf"
)

// argSize answers WhereAreYou with the size of the Blob it was spawned with.
type argSize struct{ n int }

func (a *argSize) Receive(ctx *actor.Context, msg any) (any, error) {
	return Sum{N: a.n, Node: ctx.Self().Address}, nil
}

func init() {
	actor.RegisterKind("test.argsize", func(ctx *actor.Context, args any) (actor.Actor, error) {
		b, _ := args.(Blob)
		return &argSize{n: len(b.Data)}, nil
	})
}

// Spawn arguments of megabytes (a tokenizer sent with a rollout actor)
// stay on the spawning node: three actors with 7 MiB each left the
// directory over memberlist's 20 MB push/pull limit, and no node could
// join ("user state length (22021042) exceeds limit"). Now a node joins,
// the directory stays small, the actors get their arguments, also when
// restarted on another node, and the offer goes once they are all DEAD.
func TestLargeArgsStayOnTheSpawningNode(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "args-a", key)
	b := startLocalNodeJoin(t, "args-b", key, a.GossipAddress())
	waitFor(t, "two nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 && nodeCount(b) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const size = 7 << 20
	big := Blob{Data: make([]byte, size)}
	for i := range big.Data {
		big.Data[i] = byte(i)
	}
	var hs []*Handle
	for _, name := range []string{"args-0", "args-1", "args-2"} {
		h, err := a.Spawn(ctx, "test.argsize", SpawnOptions{Name: name, Args: big, Node: "args-b", MaxRestarts: 1})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	a.args.mu.Lock()
	offers := len(a.args.blobs)
	a.args.mu.Unlock()
	if offers != 1 {
		t.Errorf("%d offers of the same arguments, want 1", offers)
	}
	c := startLocalNodeJoin(t, "args-c", key, a.GossipAddress())
	waitFor(t, "c to see the three actors", 10*time.Second, func() bool {
		n := 0
		for _, r := range c.dir.Actors() {
			if strings.HasPrefix(r.Name, "args-") && r.State == Alive {
				n++
			}
		}
		return n == 3
	})
	if st, _ := encodeUpdate(a.dir.snapshot()); len(st) > InlineArgsMax {
		t.Errorf("directory state of %d bytes, want under %d", len(st), InlineArgsMax)
	}
	check := func(when string) {
		t.Helper()
		for _, h := range hs {
			s, err := Call[Sum](ctx, h, WhereAreYou{})
			if err != nil || s.N != size {
				t.Errorf("%s: %s: %+v, %v; want the %d-byte arguments", when, h.Name(), s, err, size)
			}
		}
	}
	check("spawned")
	b.Stop() // its actors restart on a or c, fetching their arguments from a
	waitFor(t, "the actors restarted off args-b", 20*time.Second, func() bool {
		for _, h := range hs {
			r, ok := a.dir.Actor(h.Name())
			if !ok || r.State != Alive || r.Node == "args-b" {
				return false
			}
		}
		return true
	})
	check("restarted")
	for _, h := range hs {
		if err := h.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the offer withdrawn", 10*time.Second, func() bool {
		a.args.mu.Lock()
		defer a.args.mu.Unlock()
		return len(a.args.blobs) == 0
	})

	_, err := a.Spawn(ctx, "test.argsize", SpawnOptions{Name: "args-huge", Args: Blob{Data: make([]byte, MaxArgs)}})
	if err == nil || !strings.Contains(err.Error(), "bound") {
		t.Errorf("spawn with %d bytes of arguments: %v, want the bound named", MaxArgs, err)
	}
}

// A directory state near memberlist's limit is warned about, naming its
// size; a small one is not.
func TestLargeDirectoryStateWarns(t *testing.T) {
	var log logbuf.Buffer
	n := &Node{dir: newDirectory(), log: slog.New(slog.NewTextHandler(&log, nil))}
	g := &gossipDelegate{n: n}
	n.dir.merge(&update{Actors: []ActorRecord{{Name: "small", Version: 1}}})
	g.LocalState(false)
	if strings.Contains(log.String(), "directory state") {
		t.Fatalf("warned about a one-record state: %s", log.String())
	}
	n.dir.merge(&update{Actors: []ActorRecord{{Name: "huge", Version: 1, Args: make([]byte, directoryStateWarn)}}})
	if b := g.LocalState(false); len(b) <= directoryStateWarn || !strings.Contains(log.String(), "directory state near memberlist's 20 MB limit") {
		t.Errorf("a %d-byte state: log %q", len(b), log.String())
	}
}

// A Detached actor that may restart outlives its spawner, which keeps its
// large arguments: Spawn refuses them up front. (Before, the spawn
// succeeded and the actor died at its first node loss after the spawner
// had gone: "fetch the N bytes kept by node ...: connection refused".)
// Small arguments, no restarts, or an attached actor are fine.
func TestDetachedRestartableRefusesLargeArgs(t *testing.T) {
	a := startLocalNode(t, "detached-args", testKey(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := Blob{Data: make([]byte, InlineArgsMax+1)}
	_, err := a.Spawn(ctx, "test.argsize", SpawnOptions{Name: "d-big", Args: big, Detached: true, MaxRestarts: -1})
	if err == nil || !strings.Contains(err.Error(), "InlineArgsMax") || !strings.Contains(err.Error(), "d-big") {
		t.Fatalf("a restartable Detached actor with %d bytes of arguments: %v; want a refusal naming it and cluster.InlineArgsMax", len(big.Data), err)
	}
	if _, ok := a.dir.Actor("d-big"); ok {
		t.Error("the refused spawn left a record")
	}
	for _, o := range []SpawnOptions{
		{Name: "d-once", Args: big, Detached: true},
		{Name: "attached", Args: big, MaxRestarts: -1},
		{Name: "d-small", Args: Blob{Data: make([]byte, 1024)}, Detached: true, MaxRestarts: -1},
	} {
		if _, err := a.Spawn(ctx, "test.argsize", o); err != nil {
			t.Errorf("spawn %s: %v", o.Name, err)
		}
	}
}
