package actor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatherAsk waits, inside Receive, until N calls are inside at once (or
// the actor stops, or 30 s pass); the reply's N is the most it saw at once.
type gatherAsk struct {
	N       int
	Panic   bool
	Payload []byte
}

type gathered struct {
	Max     int
	Reached bool
	Payload []byte
}

func init() {
	RegisterMessage(gatherAsk{}, gathered{})
	RegisterKind("test.gather", func(*Context, any) (Actor, error) { return &gatherer{}, nil })
}

// gatherer counts the Receives running at once. It is built fresh on a
// restart, so its counts start again.
type gatherer struct {
	mu      sync.Mutex
	in, max int
	reached bool
	// log, when set, records "returned" as each Receive ends and
	// "stopped" from the Stopped hook.
	log chan string
}

func (g *gatherer) Receive(ctx *Context, msg any) (any, error) {
	m, ok := msg.(gatherAsk)
	if !ok {
		return nil, errors.New("want gatherAsk")
	}
	g.mu.Lock()
	g.in++
	g.max = max(g.max, g.in)
	if g.in >= m.N {
		g.reached = true
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.in--
		g.mu.Unlock()
		if g.log != nil {
			g.log <- "returned"
		}
	}()
	if m.Panic {
		panic("gather panic")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		g.mu.Lock()
		reached, most := g.reached, g.max
		g.mu.Unlock()
		if reached || ctx.Context().Err() != nil || time.Now().After(deadline) {
			return gathered{Max: most, Reached: reached, Payload: m.Payload}, nil
		}
		time.Sleep(time.Millisecond)
	}
}

func (g *gatherer) Stopped(*Context) {
	if g.log != nil {
		g.log <- "stopped"
	}
}

// waitInside waits until n of g's Receives are running.
func waitInside(t *testing.T, g *gatherer, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		g.mu.Lock()
		in := g.in
		g.mu.Unlock()
		if in == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Receives running, want %d", in, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// callAll makes n calls of msg at once and returns their replies.
func callAll(ctx context.Context, s *System, ref Ref, n int, msg any) ([]any, []error) {
	replies, errs := make([]any, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i], errs[i] = s.Call(ctx, ref, msg)
		}()
	}
	wg.Wait()
	return replies, errs
}

// With MaxConcurrency N, N calls run inside Receive at once and never
// more; without it, one at a time.
func TestMaxConcurrency(t *testing.T) {
	s := startTestSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ref, err := s.SpawnLocal(LocalSpawn{Name: "gather3", Kind: "test.gather", MaxConcurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Seven calls, each waiting until 3 are inside: they pass in groups,
	// and no more than 3 are ever inside.
	replies, errs := callAll(ctx, s, ref, 7, gatherAsk{N: 3})
	for i := range replies {
		g, ok := replies[i].(gathered)
		if errs[i] != nil || !ok || !g.Reached || g.Max != 3 {
			t.Errorf("call %d: %+v, %v; want 3 calls inside at once, never more", i, replies[i], errs[i])
		}
	}

	// One at a time (the default): a call waiting for a second one inside
	// never sees it; its Context ends when the actor is stopped.
	one, err := s.SpawnLocal(LocalSpawn{Name: "gather1", Kind: "test.gather"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, errs = callAll(short, s, one, 2, gatherAsk{N: 2})
	cancelShort()
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("sequential actor, call %d: %v, want the caller's deadline (the two never run at once)", i, err)
		}
	}
	if err := s.StopLocal("gather1", "test over"); err != nil {
		t.Fatal(err)
	}

	for _, n := range []int{-1, ConcurrencyLimit + 1} {
		_, err := s.SpawnLocal(LocalSpawn{Name: "bad", Kind: "test.gather", MaxConcurrency: n})
		if err == nil || !strings.Contains(err.Error(), "MaxConcurrency") {
			t.Errorf("MaxConcurrency %d: %v, want a refusal naming it", n, err)
		}
	}
}

// A panic in one of the calls running at once answers that caller with
// the panic, lets the others finish on the old instance, and restarts the
// actor once in place.
func TestMaxConcurrencyPanic(t *testing.T) {
	s := startTestSystem(t)
	events := make(chan Event, 16)
	s.SetObserver(func(e Event) { events <- e })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var first *gatherer
	ref, err := s.SpawnLocal(LocalSpawn{Name: "gather", Kind: "test.gather", MaxConcurrency: 4, MaxRestarts: 1,
		Factory: func(*Context, any) (Actor, error) {
			g := &gatherer{}
			if first == nil { // the factory's runs are one after another
				first = g
			}
			return g, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	<-events // started

	// Two calls wait for a third inside; the third panics once inside,
	// which counts: the two go on and reply.
	var wg sync.WaitGroup
	waiting := make([]error, 2)
	for i := range waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := s.Call(ctx, ref, gatherAsk{N: 3})
			if g, ok := v.(gathered); err == nil && (!ok || !g.Reached) {
				err = errors.New("the third call was not seen inside")
			}
			waiting[i] = err
		}()
	}
	waitInside(t, first, 2)
	_, err = s.Call(ctx, ref, gatherAsk{N: 3, Panic: true})
	var ae *ActorError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "panic: gather panic") {
		t.Fatalf("panicking call: %v, want the panic as an ActorError", err)
	}
	wg.Wait()
	for i, err := range waiting {
		if err != nil {
			t.Errorf("call %d running beside the panic: %v", i, err)
		}
	}
	select {
	case e := <-events:
		if e.Type != EventRestarted || e.Restarts != 1 {
			t.Fatalf("after the panic: %+v, want one restart", e)
		}
	case <-ctx.Done():
		t.Fatal("no restart after the panic")
	}
	// The rebuilt instance serves calls at once again.
	replies, errs := callAll(ctx, s, ref, 2, gatherAsk{N: 2})
	for i := range replies {
		if g, ok := replies[i].(gathered); errs[i] != nil || !ok || g.Max != 2 {
			t.Errorf("after the restart, call %d: %+v, %v", i, replies[i], errs[i])
		}
	}
}

// Stopping an actor with calls running at once ends their Context and
// waits for them to return before its Stopped hook runs.
func TestMaxConcurrencyStopWaits(t *testing.T) {
	s := startTestSystem(t)
	g := &gatherer{log: make(chan string, 8)}
	ref, err := s.SpawnLocal(LocalSpawn{Name: "gather", Kind: "test.gather", MaxConcurrency: 3,
		Factory: func(*Context, any) (Actor, error) { return g, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan []error, 1)
	go func() {
		_, errs := callAll(ctx, s, ref, 2, gatherAsk{N: 3}) // never 3: they wait for the stop
		done <- errs
	}()
	waitInside(t, g, 2)
	if err := s.StopLocal("gather", "test over"); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 3 {
		order = append(order, <-g.log)
	}
	if strings.Join(order, ",") != "returned,returned,stopped" {
		t.Errorf("order: %v, want both Receives returned before Stopped", order)
	}
	for i, err := range <-done {
		if err != nil {
			t.Errorf("call %d: %v, want the reply its Receive gave when the stop ended its Context", i, err)
		}
	}
}

// Calls from another process run at once too, and their replies (one
// large enough for the bulk path) reach their callers.
func TestMaxConcurrencyRemote(t *testing.T) {
	s := startTestSystem(t)
	p := startPeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := Ref{Name: "gather", Kind: "test.gather", Address: p.addr, ID: "a/gather"}
	payload := make([]byte, 300<<10)
	payload[1234] = 9
	replies, errs := callAll(ctx, s, ref, 4, gatherAsk{N: 4, Payload: payload})
	for i := range replies {
		g, ok := replies[i].(gathered)
		if errs[i] != nil || !ok || !g.Reached || g.Max != 4 || len(g.Payload) != len(payload) || g.Payload[1234] != 9 {
			t.Errorf("remote call %d: reached %v max %d payload %d bytes, %v; want 4 inside at once and the payload back",
				i, g.Reached, g.Max, len(g.Payload), errs[i])
		}
	}
}

// The cost of handing each message to a goroutine of its own: in-process
// Echo calls, 8 callers at once, to an actor taking one at a time and to
// one taking up to 8.
func BenchmarkCallMaxConcurrency(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("max=%d", n), func(b *testing.B) {
			s, err := Start(Config{Logger: DiscardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Stop()
			ref, err := s.SpawnLocal(LocalSpawn{Name: "echo", Kind: "test.counter", MaxConcurrency: n})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.SetParallelism(4) // 8 callers on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Call(ctx, ref, Echo{Payload: []byte("x")}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
