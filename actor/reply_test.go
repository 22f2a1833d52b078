package actor

import (
	"context"
	"errors"
	"testing"
	"time"
)

type slowAsk struct{ N int }
type slowDone struct{ N int }

func init() { RegisterMessage(slowAsk{}, slowDone{}) }

// deferring answers slowAsk from another goroutine once the test releases
// it, and Pings at once meanwhile.
type deferring struct {
	begun   chan int
	release chan error
}

func (d *deferring) Receive(ctx *Context, msg any) (any, error) {
	switch m := msg.(type) {
	case slowAsk:
		r := ctx.ReplyLater()
		go func() {
			d.begun <- m.N
			err := <-d.release
			r.Send(slowDone{N: m.N}, err)
			r.Send(slowDone{N: -1}, nil) // only the first Send counts
		}()
		return nil, nil
	case Fail:
		ctx.ReplyLater()
		return nil, errors.New(m.Text) // answers now despite ReplyLater
	case Ping:
		return Pong{N: m.N}, nil
	}
	return nil, nil
}

// A reply taken over with ReplyLater reaches its caller later, while the
// actor answers other calls in between; an error goes as an *ActorError.
func TestReplyLater(t *testing.T) {
	s := startTestSystem(t)
	d := &deferring{begun: make(chan int, 2), release: make(chan error)}
	ref, err := s.SpawnLocal(LocalSpawn{Name: "deferring", Kind: "test.deferring",
		Factory: func(*Context, any) (Actor, error) { return d, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		v   any
		err error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	go func() { v, err := s.Call(ctx, ref, slowAsk{N: 1}); first <- result{v, err} }()
	<-d.begun
	go func() { v, err := s.Call(ctx, ref, slowAsk{N: 2}); second <- result{v, err} }()
	<-d.begun // the actor took the second while the first waits
	if v, err := s.Call(ctx, ref, Ping{N: 7}); err != nil || v.(Pong).N != 7 {
		t.Fatalf("ping while two replies wait: %v, %v", v, err)
	}
	select {
	case r := <-first:
		t.Fatalf("first reply came before it was sent: %+v", r)
	default:
	}
	d.release <- nil
	d.release <- errors.New("no room")
	got := map[int]result{}
	for range 2 {
		select {
		case r := <-first:
			got[1] = r
		case r := <-second:
			got[2] = r
		}
	}
	if r := got[1]; r.err != nil || r.v.(slowDone).N != 1 {
		t.Errorf("first deferred call: %+v", r)
	}
	var ae *ActorError
	if r := got[2]; !errors.As(r.err, &ae) || ae.Message != "no room" {
		t.Errorf("second deferred call: %+v, want an ActorError \"no room\"", r)
	}
	if _, err := s.Call(ctx, ref, Fail{Text: "refused"}); !errors.As(err, &ae) || ae.Message != "refused" {
		t.Errorf("an error returned after ReplyLater: %v, want it at once", err)
	}
	// A Tell's deferred reply goes nowhere.
	if err := s.Tell(ref, slowAsk{N: 3}); err != nil {
		t.Fatal(err)
	}
	<-d.begun
	d.release <- nil
	if v, err := s.Call(ctx, ref, Ping{N: 8}); err != nil || v.(Pong).N != 8 {
		t.Fatalf("ping after a told slowAsk: %v, %v", v, err)
	}
}

// slowFactory's builds wait for the test; their actors note Stopped.
type buildGate struct {
	begun, release chan struct{}
	stopped        chan string
}

type gated struct {
	name    string
	stopped chan string
}

func (g *gated) Receive(*Context, any) (any, error) { return nil, nil }
func (g *gated) Stopped(*Context)                   { g.stopped <- g.name }

func (g *buildGate) factory(name string) Factory {
	return func(*Context, any) (Actor, error) {
		g.begun <- struct{}{}
		<-g.release // ignores its Context, as a slow model load might
		return &gated{name: name, stopped: g.stopped}, nil
	}
}

// A build cancelled while its factory runs does not start its actor: Run
// fails with ErrActorDied, the built instance's Stopped hook runs, and the
// name is free again. A build that started is not cancelled.
func TestBuildCancelledBeforeStart(t *testing.T) {
	s := startTestSystem(t)
	g := &buildGate{begun: make(chan struct{}, 1), release: make(chan struct{}), stopped: make(chan string, 2)}
	b, err := s.ReserveLocal(LocalSpawn{Name: "slow", Kind: "test.slow", Factory: g.factory("slow")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReserveLocal(LocalSpawn{Name: "slow", Kind: "test.slow", Factory: g.factory("dup")}); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("second reservation of a name being built: %v, want ErrNameTaken", err)
	}
	ran := make(chan error, 1)
	go func() { _, err := b.Run(); ran <- err }()
	<-g.begun
	if !b.Cancel("its caller left") {
		t.Fatal("Cancel of a build in its factory reported false")
	}
	close(g.release)
	if err := <-ran; !errors.Is(err, ErrActorDied) {
		t.Fatalf("cancelled build: %v, want ErrActorDied", err)
	}
	if name := <-g.stopped; name != "slow" {
		t.Fatalf("Stopped ran for %q", name)
	}
	if len(s.Local()) != 0 {
		t.Fatalf("a cancelled build left actors: %v", s.Local())
	}
	ref, err := s.SpawnLocal(LocalSpawn{Name: "slow", Kind: "test.slow", Factory: g.factory("again")})
	if err != nil {
		t.Fatalf("the name after a cancelled build: %v", err)
	}
	<-g.begun
	if b.Cancel("late") {
		t.Error("Cancel of a finished build reported true")
	}
	if err := s.StopLocal(ref.Name, "done"); err != nil {
		t.Fatal(err)
	}
	if name := <-g.stopped; name != "again" {
		t.Fatalf("Stopped ran for %q", name)
	}
}

// A node that stops while a factory runs does not start its actor
// afterwards: Run fails with ErrSystemStopped and Stopped runs.
func TestBuildAfterSystemStop(t *testing.T) {
	s, err := Start(Config{Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	g := &buildGate{begun: make(chan struct{}, 1), release: make(chan struct{}), stopped: make(chan string, 1)}
	ran := make(chan error, 1)
	go func() {
		_, err := s.SpawnLocal(LocalSpawn{Name: "slow", Kind: "test.slow", Factory: g.factory("slow")})
		ran <- err
	}()
	<-g.begun
	s.Stop()
	close(g.release)
	if err := <-ran; !errors.Is(err, ErrSystemStopped) {
		t.Fatalf("build after stop: %v, want ErrSystemStopped", err)
	}
	if name := <-g.stopped; name != "slow" {
		t.Fatalf("Stopped ran for %q", name)
	}
}
