package actor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// hold asks a gate to note that call N began (telling Notify, when set)
// and then to wait until the call's Context ends.
type hold struct {
	N      int
	Notify Ref
}

// holdBegan is a gate's note that hold N began.
type holdBegan struct{ N int }

// gateCount asks a gate which holds began, and how many of them ended
// because their caller cancelled them.
type gateCount struct{}

type gateCounted struct {
	Began     []int
	Cancelled int
	Other     []string // causes other than ErrCallCancelled
}

type gate struct {
	mu        sync.Mutex
	began     []int
	cancelled int
	other     []string
	active    int           // holds not yet returned
	changed   chan struct{} // closed and replaced when active drops
}

// settled waits until no hold is running (one cancelled may still be on
// its way out when the count is asked for), within the call's Context.
func (g *gate) settled(ctx context.Context) error {
	for {
		g.mu.Lock()
		if g.active == 0 {
			return nil // locked: the caller reads and unlocks
		}
		if g.changed == nil {
			g.changed = make(chan struct{})
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (g *gate) Receive(ctx *Context, msg any) (any, error) {
	switch m := msg.(type) {
	case hold:
		g.mu.Lock()
		g.began = append(g.began, m.N)
		g.active++
		g.mu.Unlock()
		if !m.Notify.IsZero() {
			if err := ctx.System().Tell(m.Notify, holdBegan{N: m.N}); err != nil {
				return nil, err
			}
		}
		cctx := ctx.Context()
		<-cctx.Done()
		g.mu.Lock()
		if cause := context.Cause(cctx); errors.Is(cause, ErrCallCancelled) {
			g.cancelled++
		} else {
			g.other = append(g.other, fmt.Sprint(cause))
		}
		g.active--
		if g.changed != nil {
			close(g.changed)
			g.changed = nil
		}
		g.mu.Unlock()
		return nil, cctx.Err()
	case gateCount:
		if err := g.settled(ctx.Context()); err != nil {
			return nil, err
		}
		defer g.mu.Unlock()
		return gateCounted{Began: slices.Clone(g.began), Cancelled: g.cancelled, Other: slices.Clone(g.other)}, nil
	}
	return nil, fmt.Errorf("gate: unexpected %T", msg)
}

// noticeBox hands the notes it is told to a channel.
type noticeBox chan int

func (b noticeBox) Receive(_ *Context, msg any) (any, error) {
	if m, ok := msg.(holdBegan); ok {
		b <- m.N
	}
	return nil, nil
}

func init() {
	RegisterMessage(hold{}, holdBegan{}, gateCount{}, gateCounted{})
	RegisterKind("test.gate", func(*Context, any) (Actor, error) { return &gate{}, nil })
}

// TestCancelReachesTheActor: calls whose callers give up are cancelled at
// the actor, in-process and on another node, one at a time or two at
// once: those still queued are dropped without running, and those
// running see their Context end with ErrCallCancelled. Before, every
// call ran: the running ones until the actor stopped (their Context was
// the actor's life), the queued ones after them.
func TestCancelReachesTheActor(t *testing.T) {
	s := startTestSystem(t)
	p := startPeer(t)
	notes := make(noticeBox, 16)
	box, err := s.SpawnLocal(LocalSpawn{Name: "notes", Kind: "test.notes", Factory: func(*Context, any) (Actor, error) { return notes, nil }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		ref     Ref
		running int // calls the gate runs at once
	}{
		{"local, one at a time", spawnGate(t, s, "gate1", 1), 1},
		{"local, two at once", spawnGate(t, s, "gate2", 2), 2},
		{"remote, one at a time", Ref{Name: "gate1", Kind: "test.gate", Address: p.addr, ID: "a/gate1"}, 1},
		{"remote, two at once", Ref{Name: "gate2", Kind: "test.gate", Address: p.addr, ID: "a/gate2"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			before := s.Stats()
			const calls = 5
			callCtx, giveUp := context.WithCancel(ctx)
			errs := make(chan error, calls)
			call := func(n int) {
				_, err := s.Call(callCtx, tc.ref, hold{N: n, Notify: box})
				errs <- err
			}
			// The first calls begin (each says so); the rest queue behind
			// them, sent after, on the same connection.
			for n := range tc.running {
				go call(n)
			}
			for range tc.running {
				select {
				case <-notes:
				case <-ctx.Done():
					t.Fatal("the first calls did not begin")
				}
			}
			for n := tc.running; n < calls; n++ {
				go call(n)
			}
			giveUp()
			for range calls {
				if err := <-errs; !errors.Is(err, context.Canceled) {
					t.Fatalf("a call given up: %v, want context.Canceled", err)
				}
			}
			// Sent after every cancel: the gate answers it once the
			// running calls returned and the queued ones were dropped.
			got, err := CallAs[gateCounted](ctx, s, tc.ref, gateCount{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Began) != tc.running || got.Cancelled != tc.running || len(got.Other) != 0 {
				t.Fatalf("gate: began %v, %d ended by their cancel, other causes %q; want %d began and cancelled, the other %d dropped unrun",
					got.Began, got.Cancelled, got.Other, tc.running, calls-tc.running)
			}
			// Calls given up before they were sent are not sent at all.
			after := s.Stats()
			if tc.ref.Address == s.Address() {
				if d := after.CallsDropped - before.CallsDropped; d > uint64(calls-tc.running) {
					t.Errorf("CallsDropped grew by %d, more than the %d queued", d, calls-tc.running)
				}
			} else if d := after.CancelsSent - before.CancelsSent; d < uint64(tc.running) || d > calls {
				t.Errorf("CancelsSent grew by %d, want %d to %d", d, tc.running, calls)
			}
			select {
			case n := <-notes:
				t.Errorf("call %d began after its caller gave it up", n)
			default:
			}
		})
	}
}

func spawnGate(t *testing.T, s *System, name string, concurrency int) Ref {
	t.Helper()
	ref, err := s.SpawnLocal(LocalSpawn{Name: name, Kind: "test.gate", MaxConcurrency: concurrency})
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// answered's Receive takes its reply over and keeps the call's Context
// to look at after Receive returned.
type answered struct{ keep chan context.Context }

func (a answered) Receive(ctx *Context, msg any) (any, error) {
	switch msg.(type) {
	case Ping:
		a.keep <- ctx.Context()
		return Pong{}, nil
	case Echo: // answered later, from another goroutine
		r := ctx.ReplyLater()
		cctx := ctx.Context()
		go func() {
			a.keep <- cctx
			<-a.keep // the test looked: it was still live
			r.Send(Pong{N: 1}, nil)
		}()
		return nil, nil
	}
	a.keep <- ctx.Context()
	return nil, nil
}

// TestCallContextEndsWhenAnswered: a call's Context ends once the call is
// answered (Receive returned, or the Reply of ReplyLater was sent), with
// the actor still alive; a Tell's is the actor's life.
func TestCallContextEndsWhenAnswered(t *testing.T) {
	s := startTestSystem(t)
	keep := make(chan context.Context, 1)
	ref, err := s.SpawnLocal(LocalSpawn{Name: "answered", Kind: "test.answered", Factory: func(*Context, any) (Actor, error) { return answered{keep: keep}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Call(ctx, ref, Ping{}); err != nil {
		t.Fatal(err)
	}
	if c := <-keep; c.Err() == nil || errors.Is(context.Cause(c), ErrCallCancelled) {
		t.Errorf("a call's Context after its answer: %v (cause %v), want ended, not cancelled", c.Err(), context.Cause(c))
	}

	done := make(chan error, 1)
	go func() { _, err := s.Call(ctx, ref, Echo{}); done <- err }()
	c := <-keep
	if c.Err() != nil {
		t.Errorf("a ReplyLater call's Context before its reply: %v, want live", c.Err())
	}
	keep <- nil
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-c.Done() // ends with the reply; a hang here fails by the test's timeout

	if err := s.Tell(ref, Fail{}); err != nil {
		t.Fatal(err)
	}
	if c := <-keep; c.Err() != nil {
		t.Errorf("a Tell's Context: %v, want the actor's life", c.Err())
	}
}

// TestCancelsKeptAreBounded: cancels for calls a node has not begun (a
// peer that makes them up, or cancels crossing their replies) are kept
// up to maxCancelsKept, the oldest forgotten first; a call whose cancel
// is still kept is dropped, one whose cancel was forgotten runs.
func TestCancelsKeptAreBounded(t *testing.T) {
	var tbl inboundCalls
	const sent = 3 * maxCancelsKept
	for id := range uint64(sent) {
		tbl.cancel("10.0.0.9:7000", id)
	}
	if running, early := tbl.sizes(); running != 0 || early != maxCancelsKept {
		t.Fatalf("after %d cancels for unknown calls: %d running, %d kept; want 0 and %d", sent, running, early, maxCancelsKept)
	}
	if st := tbl.begin("10.0.0.9:7000", sent-1, nil); st != nil {
		t.Error("the newest cancelled call began")
	}
	st := tbl.begin("10.0.0.9:7000", 0, nil)
	if st == nil {
		t.Fatal("the call whose cancel was forgotten first did not begin")
	}
	// A cancel for a running call ends its Context and keeps nothing.
	c := st.context(context.Background())
	if tbl.cancel("10.0.0.9:7000", 0) != 1 || !errors.Is(context.Cause(c), ErrCallCancelled) {
		t.Errorf("a running call's cancel: cause %v", context.Cause(c))
	}
	tbl.finish(st)
	if running, early := tbl.sizes(); running != 0 || early != maxCancelsKept-1 {
		t.Errorf("after the calls: %d running, %d kept; want 0 and %d", running, early, maxCancelsKept-1)
	}
}
