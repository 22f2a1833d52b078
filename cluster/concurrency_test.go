package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// atOnceAsk waits inside Receive until N calls are inside at once (or 30 s
// pass, or the actor stops).
type atOnceAsk struct{ N int }

type atOnceDone struct {
	Max     int
	Reached bool
}

type atOnce struct {
	mu      sync.Mutex
	in, max int
	reached bool
}

func init() {
	actor.RegisterMessage(atOnceAsk{}, atOnceDone{})
	actor.RegisterKind("test.atonce", func(*actor.Context, any) (actor.Actor, error) { return &atOnce{}, nil })
}

func (a *atOnce) Receive(ctx *actor.Context, msg any) (any, error) {
	m, ok := msg.(atOnceAsk)
	if !ok {
		return nil, errors.New("want atOnceAsk")
	}
	a.mu.Lock()
	a.in++
	a.max = max(a.max, a.in)
	a.reached = a.reached || a.in >= m.N
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.in--
		a.mu.Unlock()
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		a.mu.Lock()
		done := atOnceDone{Max: a.max, Reached: a.reached}
		a.mu.Unlock()
		if done.Reached || ctx.Context().Err() != nil || time.Now().After(deadline) {
			return done, nil
		}
		time.Sleep(time.Millisecond)
	}
}

// A spawn's MaxConcurrency reaches the node that hosts the actor, its
// record, and the node that hosts it after its first node is lost.
func TestSpawnMaxConcurrency(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "mc-a", key)
	join := func(id string) *Node { return joinSlotX(t, a, key, id) }
	b, _ := join("mc-b"), join("mc-c")
	waitFor(t, "3 nodes with directory records", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, n := range []int{-1, actor.ConcurrencyLimit + 1} {
		if _, err := a.Spawn(ctx, "test.atonce", SpawnOptions{Name: "bad", MaxConcurrency: n}); err == nil || !strings.Contains(err.Error(), "MaxConcurrency") {
			t.Errorf("MaxConcurrency %d: %v, want a refusal naming it", n, err)
		}
	}
	h, err := a.Spawn(ctx, "test.atonce", SpawnOptions{Name: "server", Node: "mc-b", Labels: map[string]string{"slot": "x"},
		MaxRestarts: 1, MaxConcurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	threeAtOnce := func(when string) {
		t.Helper()
		var wg sync.WaitGroup
		got, errs := make([]atOnceDone, 3), make([]error, 3)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = Call[atOnceDone](ctx, h, atOnceAsk{N: 3})
			}()
		}
		wg.Wait()
		for i := range got {
			if errs[i] != nil || !got[i].Reached || got[i].Max != 3 {
				t.Errorf("%s, call %d: %+v, %v; want 3 calls inside at once", when, i, got[i], errs[i])
			}
		}
	}
	threeAtOnce("on mc-b")
	if rec, _ := a.Directory().Actor("server"); rec.MaxConcurrency != 3 {
		t.Errorf("record's MaxConcurrency %d, want 3", rec.MaxConcurrency)
	}
	b.shutdown() // a crash: the actor restarts on mc-c
	waitFor(t, "server alive on mc-c", 30*time.Second, func() bool {
		rec, _ := a.Directory().Actor("server")
		return rec.State == Alive && rec.Node == "mc-c"
	})
	if rec, _ := a.Directory().Actor("server"); rec.MaxConcurrency != 3 {
		t.Errorf("restarted record's MaxConcurrency %d, want 3", rec.MaxConcurrency)
	}
	threeAtOnce("restarted on mc-c")
}
