package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// Generate stands for a rollout request: the replica works DelayMs on it.
type Generate struct {
	N       int
	DelayMs int
}

// Generated is a replica's answer, with the most Generates it has worked
// on at once so far.
type Generated struct {
	N, Peak int
	Node    string
}

// Started asks a replica how many Generates it has begun, and the most at once.
type Started struct{}
type StartedCount struct{ Count, Peak int }

type generatorActor struct {
	node                  string
	active, peak, started atomic.Int64
}

func (g *generatorActor) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case Generate:
		g.started.Add(1)
		now := g.active.Add(1)
		defer g.active.Add(-1)
		for p := g.peak.Load(); now > p && !g.peak.CompareAndSwap(p, now); p = g.peak.Load() {
		}
		select {
		case <-time.After(time.Duration(m.DelayMs) * time.Millisecond):
		case <-ctx.Context().Done():
			return nil, ctx.Context().Err()
		}
		return Generated{N: m.N * m.N, Peak: int(g.peak.Load()), Node: g.node}, nil
	case Started:
		return StartedCount{Count: int(g.started.Load()), Peak: int(g.peak.Load())}, nil
	}
	return nil, fmt.Errorf("unexpected %T", msg)
}

func init() {
	actor.RegisterMessage(Generate{}, Generated{}, Started{}, StartedCount{})
	actor.RegisterKind("test.generator", func(*actor.Context, any) (actor.Actor, error) {
		return &generatorActor{node: os.Getenv("RLNODE_TEST_NODE_ID")}, nil
	})
}

// generates makes n Generate messages of delay ms each.
func generates(n, delay int) []Generate {
	msgs := make([]Generate, n)
	for i := range msgs {
		msgs[i] = Generate{N: i, DelayMs: delay}
	}
	return msgs
}

// startedOn sums how many Generates the replicas have begun.
func startedOn(t *testing.T, ctx context.Context, hs []*Handle) (total, peak int) {
	t.Helper()
	for _, h := range hs {
		s, err := Call[StartedCount](ctx, h, Started{})
		if err != nil {
			t.Fatal(err)
		}
		total, peak = total+s.Count, max(peak, s.Peak)
	}
	return total, peak
}

// TestPoolMap: Map over replicas on two other nodes, each able to take 8
// calls at once, keeps at most perReplica of its calls on each; every
// message comes back once with its index; a break or ctx's end leaves the
// rest unsent; a dead replica fails at most the calls it held.
func TestPoolMap(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "pm-a", key)
	startNodeProcess(t, "pm-b", key, a.GossipAddress(), 0, "")
	startNodeProcess(t, "pm-c", key, a.GossipAddress(), 0, "")
	waitFor(t, "3 nodes", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var hs []*Handle
	for i, node := range []string{"pm-b", "pm-c", "pm-b"} {
		h, err := a.Spawn(ctx, "test.generator", SpawnOptions{Name: fmt.Sprintf("pm-gen-%d", i), Node: node, MaxConcurrency: 8})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	pool, err := NewPool(hs...)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("at most perReplica each", func(t *testing.T) {
		msgs := generates(24, 20)
		seen := make([]int, len(msgs))
		for m := range Map[Generated](ctx, pool, msgs, 2) {
			if m.Err != nil {
				t.Fatalf("message %d: %v", m.Index, m.Err)
			}
			seen[m.Index]++
			if m.Reply.N != m.Index*m.Index {
				t.Errorf("message %d answered %d, want %d", m.Index, m.Reply.N, m.Index*m.Index)
			}
		}
		for i, c := range seen {
			if c != 1 {
				t.Errorf("message %d yielded %d times, want once", i, c)
			}
		}
		if total, peak := startedOn(t, ctx, hs); total != len(msgs) || peak > 2 {
			t.Errorf("replicas began %d Generates, at most %d at once; want %d, at most 2", total, peak, len(msgs))
		}
	})

	t.Run("break leaves the rest unsent", func(t *testing.T) {
		before, _ := startedOn(t, ctx, hs)
		got := 0
		for m := range Map[Generated](ctx, pool, generates(40, 20), 1) {
			if m.Err != nil {
				t.Fatalf("message %d: %v", m.Index, m.Err)
			}
			if got++; got == 3 {
				break
			}
		}
		// Three answered, and at most one in flight per replica when the
		// loop broke.
		if after, _ := startedOn(t, ctx, hs); after-before > 3+len(hs) {
			t.Errorf("replicas began %d of 40 Generates after a break at the third reply, want at most %d", after-before, 3+len(hs))
		}
	})

	t.Run("ctx's end fails the unsent", func(t *testing.T) {
		mctx, mcancel := context.WithCancel(ctx)
		defer mcancel()
		msgs := generates(30, 20)
		seen := make([]int, len(msgs))
		ok, cancelled := 0, 0
		for m := range Map[Generated](mctx, pool, msgs, 1) {
			seen[m.Index]++
			switch {
			case m.Err == nil:
				ok++
				mcancel()
			case errors.Is(m.Err, context.Canceled):
				cancelled++
			default:
				t.Errorf("message %d: %v, want a reply or context.Canceled", m.Index, m.Err)
			}
		}
		for i, c := range seen {
			if c != 1 {
				t.Errorf("message %d yielded %d times, want once", i, c)
			}
		}
		// At most one call per replica was out when the first reply came.
		if ok < 1 || ok > len(hs) || cancelled < len(msgs)-len(hs) {
			t.Errorf("%d replies, %d cancelled of %d, want 1 to %d replies and the rest cancelled", ok, cancelled, len(msgs), len(hs))
		}
	})

	t.Run("a reply of another type", func(t *testing.T) {
		ctr, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "pm-counter", Node: "pm-c"})
		if err != nil {
			t.Fatal(err)
		}
		other, err := NewPool(ctr)
		if err != nil {
			t.Fatal(err)
		}
		count := 0
		for m := range Map[Generated](ctx, other, []Add{{N: 1}, {N: 2}}, 1) {
			count++
			if m.Err == nil || !strings.Contains(m.Err.Error(), "reply is cluster.Sum, want cluster.Generated") {
				t.Errorf("message %d: a Sum reply read as Generated: %+v", m.Index, m)
			}
		}
		if count != 2 {
			t.Errorf("%d of 2 messages yielded", count)
		}
	})

	t.Run("a dead replica takes no more", func(t *testing.T) {
		if err := hs[2].Stop(ctx); err != nil {
			t.Fatal(err)
		}
		msgs := generates(12, 5)
		ok := 0
		var died []error
		for m := range Map[Generated](ctx, pool, msgs, 2) {
			switch {
			case m.Err == nil:
				ok++
			case errors.Is(m.Err, actor.ErrActorDied):
				died = append(died, m.Err)
			default:
				t.Errorf("message %d: %v", m.Index, m.Err)
			}
		}
		if len(died) > 2 || ok+len(died) != len(msgs) {
			t.Errorf("%d replies and %d deaths of %d (%v), want at most 2 deaths, the rest answered", ok, len(died), len(msgs), died)
		}
	})
}

// TestPoolMapBadArguments: what Map cannot do fails every message with
// the reason.
func TestPoolMapBadArguments(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	idle, err := NewPool(&Handle{name: "unused"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		pool       *Pool
		perReplica int
		want       string
	}{
		{"nil pool", nil, 1, "nil pool"},
		{"zero per replica", idle, 0, "0 calls per replica"},
		{"negative per replica", idle, -3, "-3 calls per replica"},
		{"over the limit", idle, actor.ConcurrencyLimit + 1, "want 1 to"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count := 0
			for m := range Map[Generated](ctx, tc.pool, generates(3, 0), tc.perReplica) {
				count++
				if m.Err == nil || !strings.Contains(m.Err.Error(), tc.want) {
					t.Errorf("message %d: %v, want an error saying %q", m.Index, m.Err, tc.want)
				}
			}
			if count != 3 {
				t.Errorf("%d of 3 messages yielded", count)
			}
		})
	}
	if _, err := NewPool(&Handle{name: "x"}, nil); err == nil || !strings.Contains(err.Error(), "replica 1 of 2") {
		t.Errorf("NewPool with a nil handle: %v", err)
	}
}
