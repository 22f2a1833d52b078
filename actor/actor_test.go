package actor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

type Ping struct {
	N       int
	Payload []byte
}
type Pong struct {
	N   int
	Len int
}
type Boom struct{ Text string }
type Fail struct{ Text string }
type Echo struct{ Payload []byte }
type Unregistered struct{}

type counterArgs struct{ Start int }

func init() {
	RegisterMessage(Ping{}, Pong{}, &Boom{}, Fail{}, Echo{}, counterArgs{})
	RegisterKind("test.counter", func(ctx *Context, args any) (Actor, error) {
		c := &counter{}
		if a, ok := args.(counterArgs); ok {
			c.n = a.Start
		}
		return c, nil
	})
	RegisterKind("test.badfactory", func(ctx *Context, args any) (Actor, error) {
		return nil, errors.New("no GPU here")
	})
}

// counter counts Pings, echoes payloads, fails and panics on request.
type counter struct {
	n       int
	stopped *atomic.Bool
}

func (c *counter) Receive(ctx *Context, msg any) (any, error) {
	switch m := msg.(type) {
	case Ping:
		c.n += m.N
		return Pong{N: c.n, Len: len(m.Payload)}, nil
	case Echo:
		return m, nil
	case *Boom:
		panic(m.Text)
	case Fail:
		return nil, errors.New(m.Text)
	}
	return nil, fmt.Errorf("unexpected %T", msg)
}

func startTestSystem(t *testing.T) *System {
	t.Helper()
	s, err := Start(Config{Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func TestLocalCallTellAndErrors(t *testing.T) {
	s := startTestSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ref, err := s.SpawnLocal(LocalSpawn{Name: "c1", Kind: "test.counter", Args: counterArgs{Start: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Tell(ref, Ping{N: 5}); err != nil {
		t.Fatal(err)
	}
	got, err := CallAs[Pong](ctx, s, ref, Ping{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got.N != 16 {
		t.Fatalf("counter = %d, want 16 (10 start + 5 told + 1 called, in order)", got.N)
	}

	_, err = s.Call(ctx, ref, Fail{Text: "bad input"})
	var ae *ActorError
	if !errors.As(err, &ae) || ae.Actor != "c1" || ae.Message != "bad input" {
		t.Fatalf("callee error = %v, want ActorError{c1, bad input}", err)
	}
	if _, err := s.Call(ctx, ref, Unregistered{}); !errors.Is(err, ErrUnregistered) {
		t.Fatalf("unregistered message: err = %v, want ErrUnregistered", err)
	}
	if _, err := s.SpawnLocal(LocalSpawn{Name: "c1", Kind: "test.counter"}); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("duplicate name: err = %v", err)
	}
	_, err = s.SpawnLocal(LocalSpawn{Name: "x", Kind: "no.such.kind"})
	if !errors.Is(err, ErrUnknownKind) || !strings.Contains(err.Error(), "no.such.kind") || !strings.Contains(err.Error(), s.Address()) {
		t.Fatalf("unknown kind: err = %v, want it to name the kind and node", err)
	}
	_, err = s.SpawnLocal(LocalSpawn{Name: "y", Kind: "test.badfactory"})
	if err == nil || !strings.Contains(err.Error(), "no GPU here") {
		t.Fatalf("factory error not returned: %v", err)
	}
}

func TestPanicRestartsThenDies(t *testing.T) {
	s := startTestSystem(t)
	events := make(chan Event, 16)
	s.SetObserver(func(ev Event) { events <- ev })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ref, err := s.SpawnLocal(LocalSpawn{Name: "p", Kind: "test.counter", MaxRestarts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.Type != EventStarted {
		t.Fatalf("first event %+v, want started", ev)
	}
	if _, err := s.Call(ctx, ref, Ping{N: 3}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Call(ctx, ref, &Boom{Text: "kaboom"})
	if err == nil || !strings.Contains(err.Error(), "panic: kaboom") {
		t.Fatalf("panic not reported to caller: %v", err)
	}
	if ev := <-events; ev.Type != EventRestarted || ev.Restarts != 1 || ev.Cause != "panic: kaboom" {
		t.Fatalf("restart event = %+v", ev)
	}
	// The restarted instance starts from scratch (state is not kept).
	p, err := CallAs[Pong](ctx, s, ref, Ping{N: 1})
	if err != nil || p.N != 1 {
		t.Fatalf("after restart: %+v, %v", p, err)
	}
	_, _ = s.Call(ctx, ref, &Boom{Text: "again"})
	ev := <-events
	if ev.Type != EventDied || ev.Cause != "panic: again" {
		t.Fatalf("death event = %+v", ev)
	}
	if _, err := s.Call(ctx, ref, Ping{N: 1}); !errors.Is(err, ErrActorNotFound) {
		t.Fatalf("call to dead actor: %v", err)
	}
}

func TestCallContextCancel(t *testing.T) {
	s := startTestSystem(t)
	RegisterKind("test.sleeper", func(*Context, any) (Actor, error) { return sleeper{}, nil })
	ref, err := s.SpawnLocal(LocalSpawn{Name: "z", Kind: "test.sleeper"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = s.Call(ctx, ref, Ping{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
}

type sleeper struct{}

func (sleeper) Receive(*Context, any) (any, error) {
	time.Sleep(300 * time.Millisecond)
	return nil, nil
}

func TestStopFailsPendingAndRunsHook(t *testing.T) {
	s := startTestSystem(t)
	var stopped atomic.Bool
	RegisterKind("test.hooked", func(*Context, any) (Actor, error) { return &hooked{flag: &stopped}, nil })
	ref, err := s.SpawnLocal(LocalSpawn{Name: "h", Kind: "test.hooked"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StopLocal("h", "stopped by test"); err != nil {
		t.Fatal(err)
	}
	if !stopped.Load() {
		t.Fatal("Stopped hook not run")
	}
	if err := s.StopLocal("h", "again"); !errors.Is(err, ErrActorNotFound) {
		t.Fatalf("second stop: %v", err)
	}
	if _, err := s.Call(context.Background(), ref, Ping{}); !errors.Is(err, ErrActorNotFound) {
		t.Fatalf("call after stop: %v", err)
	}
}

type hooked struct{ flag *atomic.Bool }

func (h *hooked) Receive(*Context, any) (any, error) { return nil, nil }
func (h *hooked) Stopped(*Context)                   { h.flag.Store(true) }

// Stop while a factory is still building an actor: the factory's Context
// is cancelled so it can give up, and Stop neither panics on the actor
// that has no process yet (it once called protoactor's StopFuture with a
// nil PID) nor waits for it.
func TestStopWhileAFactoryRuns(t *testing.T) {
	s, err := Start(Config{Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	building := make(chan struct{})
	spawned := make(chan error, 1)
	go func() {
		_, err := s.SpawnLocal(LocalSpawn{Name: "slow", Kind: "slow", Factory: func(ctx *Context, _ any) (Actor, error) {
			close(building)
			<-ctx.Context().Done()
			return nil, ctx.Context().Err()
		}})
		spawned <- err
	}()
	<-building
	s.Stop()
	if err := <-spawned; !errors.Is(err, context.Canceled) {
		t.Errorf("spawn during Stop: %v, want the factory's context.Canceled", err)
	}
}

// ctxWaiter's Receive works until its actor's Context ends (as a learner
// encoding a large model's weights checks it), then returns its error.
type ctxWaiter struct{ working chan struct{} }

func (w ctxWaiter) Receive(ctx *Context, msg any) (any, error) {
	if _, ok := msg.(Echo); ok {
		return Fail{Text: fmt.Sprint(ctx.Context().Err())}, nil
	}
	close(w.working)
	<-ctx.Context().Done()
	return nil, ctx.Context().Err()
}

// StopLocal ends the actor's Context before it waits: a Receive that
// checks it gives up and the actor stops at once, with no error. Before,
// the Context was the node's life alone: the stop waited protoactor's 10 s
// bound, failed with its timeout, and left the Receive working until the
// node stopped. Other actors' Contexts live on.
func TestStopLocalEndsTheActorsContext(t *testing.T) {
	s := startTestSystem(t)
	working := make(chan struct{})
	ref, err := s.SpawnLocal(LocalSpawn{Name: "busy", Kind: "test.ctxwaiter", Factory: func(*Context, any) (Actor, error) {
		return ctxWaiter{working: working}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.SpawnLocal(LocalSpawn{Name: "idle", Kind: "test.ctxwaiter", Factory: func(*Context, any) (Actor, error) {
		return ctxWaiter{}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan error, 1)
	go func() {
		_, err := s.Call(context.Background(), ref, Ping{})
		called <- err
	}()
	<-working
	if err := s.StopLocal("busy", "stopped by test"); err != nil {
		t.Fatalf("StopLocal of an actor whose Receive checks its Context: %v", err)
	}
	if err := <-called; !errors.Is(err, context.Canceled) {
		t.Errorf("the call of the stopped Receive: %v, want its context.Canceled", err)
	}
	v, err := s.Call(context.Background(), other, Echo{})
	if f, ok := v.(Fail); err != nil || !ok || f.Text != "<nil>" {
		t.Errorf("the other actor's Context: %v, %v; want it alive", v, err)
	}
}
