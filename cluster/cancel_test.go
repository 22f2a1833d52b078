package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// HoldCall asks a holder to note that call N began (a Began told to Notes)
// and then, on the node BlockOn names ("*": any), to wait until the call's
// Context ends; elsewhere it is answered at once with the node's id.
type HoldCall struct {
	N       int
	Notes   *Handle
	BlockOn string
}

// Began is a holder's note that HoldCall N began, on node Node.
type Began struct {
	N    int
	Node string
}

// HolderCount asks a holder what it saw; HolderCounted is its answer.
type HolderCount struct{}
type HolderCounted struct {
	Started, Cancelled, Told int
	Node                     string
	StreamStopped            string // why its last stream stopped early
}

// CountTo asks a holder to stream the replies Sum{N: 1} to Sum{N: N}.
type CountTo struct{ N int }

// HolderArgs: a holder restarted (not first built) waits in its factory
// until Gate answers, so a test sees it RESTARTING as long as it needs.
type HolderArgs struct{ Gate *Handle }

// GateWait is answered by the gatekeeper once the test opens its gate.
type GateWait struct{}

type holderActor struct {
	node string

	mu                       sync.Mutex
	started, cancelled, told int
	streamStopped            string
	active                   int
	changed                  chan struct{}
}

func (a *holderActor) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case HoldCall:
		a.mu.Lock()
		a.started++
		a.active++
		a.mu.Unlock()
		defer a.done()
		if m.Notes != nil {
			if err := m.Notes.TellContext(ctx.Context(), Began{N: m.N, Node: a.node}); err != nil {
				return nil, err
			}
		}
		if m.BlockOn != "*" && m.BlockOn != a.node {
			return Sum{N: m.N, Node: a.node}, nil
		}
		cctx := ctx.Context()
		<-cctx.Done()
		if errors.Is(context.Cause(cctx), actor.ErrCallCancelled) {
			a.mu.Lock()
			a.cancelled++
			a.mu.Unlock()
		}
		return nil, cctx.Err()
	case Add:
		a.mu.Lock()
		a.told += m.N
		a.mu.Unlock()
		return nil, nil
	case CountTo:
		w, err := ctx.StreamReplies()
		if err != nil {
			return nil, err
		}
		for i := 1; i <= m.N; i++ {
			if err := w.Send(Sum{N: i, Node: a.node}); err != nil {
				a.mu.Lock()
				a.streamStopped = err.Error()
				a.mu.Unlock()
				w.Close(err)
				return nil, nil
			}
		}
		w.Close(nil)
		return nil, nil
	case HolderCount:
		// A hold cancelled may still be on its way out (MaxConcurrency):
		// the count waits for it.
		for {
			a.mu.Lock()
			if a.active == 0 {
				defer a.mu.Unlock()
				return HolderCounted{Started: a.started, Cancelled: a.cancelled, Told: a.told, Node: a.node, StreamStopped: a.streamStopped}, nil
			}
			if a.changed == nil {
				a.changed = make(chan struct{})
			}
			ch := a.changed
			a.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Context().Done():
				return nil, ctx.Context().Err()
			}
		}
	}
	return nil, fmt.Errorf("holder: unexpected %T", msg)
}

func (a *holderActor) done() {
	a.mu.Lock()
	a.active--
	if a.changed != nil {
		close(a.changed)
		a.changed = nil
	}
	a.mu.Unlock()
}

// began receives the notes told to this process's test.notes actor.
var began = make(chan Began, 64)

type notesActor struct{}

func (notesActor) Receive(_ *actor.Context, msg any) (any, error) {
	if b, ok := msg.(Began); ok {
		began <- b
	}
	return nil, nil
}

// restartGateOpen, closed by a test, lets this process's gatekeeper answer.
var restartGateOpen = make(chan struct{})

type gatekeeper struct{}

func (gatekeeper) Receive(ctx *actor.Context, msg any) (any, error) {
	r := ctx.ReplyLater()
	go func() {
		<-restartGateOpen
		r.Send(Sum{}, nil)
	}()
	return nil, nil
}

func init() {
	actor.RegisterMessage(HoldCall{}, Began{}, HolderCount{}, HolderCounted{}, HolderArgs{}, GateWait{}, CountTo{})
	actor.RegisterKind("test.holder", func(ctx *actor.Context, args any) (actor.Actor, error) {
		if a, ok := args.(HolderArgs); ok && a.Gate != nil && ctx.Restarts() > 0 {
			if _, err := a.Gate.Call(ctx.Life(), GateWait{}); err != nil {
				return nil, err
			}
		}
		node := os.Getenv("RLNODE_TEST_NODE_ID")
		if n := ActorNode(ctx); n != nil {
			node = n.ID()
		}
		return &holderActor{node: node}, nil
	})
	actor.RegisterKind("test.notes", func(*actor.Context, any) (actor.Actor, error) { return notesActor{}, nil })
	actor.RegisterKind("test.gatekeeper", func(*actor.Context, any) (actor.Actor, error) { return gatekeeper{}, nil })
}

// nextBegan waits for a holder's note.
func nextBegan(t *testing.T, ctx context.Context) Began {
	t.Helper()
	select {
	case b := <-began:
		return b
	case <-ctx.Done():
		t.Fatal("no hold began")
		return Began{}
	}
}

func countOn(t *testing.T, ctx context.Context, h *Handle) HolderCounted {
	t.Helper()
	c, err := Call[HolderCounted](ctx, h, HolderCount{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEarlyStopCancelsQueuedCalls: a Map over two replicas on other
// nodes, three calls outstanding on each, stopped once each replica has
// begun one: the replicas run only the two they had begun (their Context
// ends, cause ErrCallCancelled) and drop the four queued behind them;
// the six never sent stay unsent. Before, the running calls went on until
// their actors stopped and the queued ones ran after them. A Future's
// Cancel does the same to one call, queued or running.
func TestEarlyStopCancelsQueuedCalls(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "es-a", key)
	startNodeProcess(t, "es-b", key, a.GossipAddress(), 0, "")
	startNodeProcess(t, "es-c", key, a.GossipAddress(), 0, "")
	waitFor(t, "3 nodes", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	notes, err := a.Spawn(ctx, "test.notes", SpawnOptions{Name: "es-notes", Node: "es-a"})
	if err != nil {
		t.Fatal(err)
	}
	var hs []*Handle
	for _, node := range []string{"es-b", "es-c"} {
		h, err := a.Spawn(ctx, "test.holder", SpawnOptions{Name: "es-holder-" + node, Node: node})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	pool, err := NewPool(hs...)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("Map stopped early", func(t *testing.T) {
		before := a.System().Stats().CancelsSent
		msgs := make([]HoldCall, 12)
		for i := range msgs {
			msgs[i] = HoldCall{N: i, Notes: notes, BlockOn: "*"}
		}
		mctx, stop := context.WithCancel(ctx)
		go func() {
			// Stop once each replica has begun a call (the others it
			// was sent queue behind it).
			for range hs {
				select {
				case <-began:
				case <-ctx.Done():
				}
			}
			stop()
		}()
		got := 0
		for m := range Map[Sum](mctx, pool, msgs, 3) {
			got++
			if !errors.Is(m.Err, context.Canceled) {
				t.Errorf("message %d: %+v, want context.Canceled", m.Index, m)
			}
		}
		if got != len(msgs) {
			t.Fatalf("Map yielded %d of %d messages", got, len(msgs))
		}
		for _, h := range hs {
			if c := countOn(t, ctx, h); c.Started != 1 || c.Cancelled != 1 {
				t.Errorf("%s: %d calls began, %d ended by their cancel; want 1 and 1 (its 2 queued dropped)", h.Name(), c.Started, c.Cancelled)
			}
		}
		// One per call sent: the running 2 and those queued (a goroutine
		// that had not sent its call by the stop does not send it).
		if d := a.System().Stats().CancelsSent - before; d < 2 || d > 6 {
			t.Errorf("%d cancels sent, want 2 to 6", d)
		}
		select {
		case b := <-began:
			t.Errorf("hold %d began on %s after the stop", b.N, b.Node)
		default:
		}
	})

	t.Run("Future.Cancel", func(t *testing.T) {
		h := hs[0]
		was := countOn(t, ctx, h)
		running := CallAsync[Sum](ctx, h, HoldCall{N: 100, Notes: notes, BlockOn: "*"})
		if b := nextBegan(t, ctx); b.N != 100 {
			t.Fatalf("hold %d began, want 100", b.N)
		}
		queued := CallAsync[Sum](ctx, h, HoldCall{N: 101, Notes: notes, BlockOn: "*"})
		queued.Cancel()
		if _, err := queued.Get(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("queued future after Cancel: %v", err)
		}
		running.Cancel()
		if _, err := running.Get(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("running future after Cancel: %v", err)
		}
		running.Cancel() // a second time: nothing
		c := countOn(t, ctx, h)
		if c.Started-was.Started != 1 || c.Cancelled-was.Cancelled != 1 {
			t.Errorf("%s: %d more began, %d more cancelled; want 1 and 1 (the queued one dropped)", h.Name(), c.Started-was.Started, c.Cancelled-was.Cancelled)
		}
	})
}

// TestStreamFromAnotherNode: cluster.Stream yields a replica's streamed
// replies in order, from another node; a break out of the loop cancels the
// producer there.
func TestStreamFromAnotherNode(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "st-a", key)
	startNodeProcess(t, "st-b", key, a.GossipAddress(), 0, "")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := a.Spawn(ctx, "test.holder", SpawnOptions{Name: "st-holder", Node: "st-b"})
	if err != nil {
		t.Fatal(err)
	}
	want := 1
	for s, err := range Stream[Sum](ctx, h, CountTo{N: 3 * actor.StreamWindow}) {
		if err != nil {
			t.Fatal(err)
		}
		if s.N != want || s.Node != "st-b" {
			t.Fatalf("reply %d: %+v", want, s)
		}
		want++
	}
	if want != 3*actor.StreamWindow+1 {
		t.Fatalf("%d replies, want %d", want-1, 3*actor.StreamWindow)
	}
	for s, err := range Stream[Sum](ctx, h, CountTo{N: 1 << 20}) {
		if err != nil || s.N >= 5 {
			break
		}
	}
	if c := countOn(t, ctx, h); !strings.Contains(c.StreamStopped, actor.ErrCallCancelled.Error()) {
		t.Errorf("producer after the break: stopped by %q, want the cancel", c.StreamStopped)
	}
}

// TestCallRetriesAfterRestart: calls in flight to three actors on node b
// when b is SIGKILLed. The one spawned with MaxCallRetries 1 is sent again
// to its restarted incarnation and answered there; the one without fails
// as before (the call is not assumed idempotent), and a handle from
// WithRetries retries it; one that cannot restart fails with a RetryError
// saying it was tried once. A Tell to an actor still restarting fails at
// once with ErrActorRestarting naming it; TellContext waits for the
// restart and delivers.
func TestCallRetriesAfterRestart(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "rt-a", key)
	b := startNodeProcess(t, "rt-b", key, a.GossipAddress(), 0, "")
	startNodeProcess(t, "rt-c", key, a.GossipAddress(), 0, "")
	waitFor(t, "3 nodes", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	notes, err := a.Spawn(ctx, "test.notes", SpawnOptions{Name: "rt-notes", Node: "rt-a"})
	if err != nil {
		t.Fatal(err)
	}
	gate, err := a.Spawn(ctx, "test.gatekeeper", SpawnOptions{Name: "rt-gate", Node: "rt-a"})
	if err != nil {
		t.Fatal(err)
	}
	spawn := func(name string, o SpawnOptions) *Handle {
		t.Helper()
		o.Name, o.Node = name, "rt-b"
		h, err := a.Spawn(ctx, "test.holder", o)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	retried := spawn("rt-retried", SpawnOptions{MaxRestarts: 1, MaxCallRetries: 1})
	plain := spawn("rt-plain", SpawnOptions{MaxRestarts: 1})
	byHandle := spawn("rt-by-handle", SpawnOptions{MaxRestarts: 1}).WithRetries(2)
	mortal := spawn("rt-mortal", SpawnOptions{MaxCallRetries: 3})
	told := spawn("rt-told", SpawnOptions{MaxRestarts: 1, Args: HolderArgs{Gate: gate}})
	if _, err := a.Spawn(ctx, "test.holder", SpawnOptions{MaxCallRetries: -2}); err == nil {
		t.Error("MaxCallRetries -2 was taken")
	}

	type outcome struct {
		name  string
		reply Sum
		err   error
	}
	out := make(chan outcome, 4)
	for _, h := range []*Handle{retried, plain, byHandle, mortal} {
		go func() {
			s, err := Call[Sum](ctx, h, HoldCall{Notes: notes, BlockOn: "rt-b"})
			out <- outcome{h.Name(), s, err}
		}()
	}
	for range 4 {
		if b := nextBegan(t, ctx); b.Node != "rt-b" {
			t.Fatalf("a hold began on %q, want rt-b", b.Node)
		}
	}
	restarting := a.Watch(ctx, told.Name())
	if err := b.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	results := map[string]outcome{}
	for range 4 {
		o := <-out
		results[o.name] = o
	}
	for _, name := range []string{"rt-retried", "rt-by-handle"} {
		if o := results[name]; o.err != nil || o.reply.Node == "rt-b" {
			t.Errorf("%s: %+v, %v; want answered by its restarted incarnation", name, o.reply, o.err)
		}
	}
	// The resent holds began on the new nodes too.
	for range 2 {
		if b := nextBegan(t, ctx); b.Node == "rt-b" {
			t.Errorf("a resent hold began on %q", b.Node)
		}
	}
	var re *RetryError
	if o := results["rt-plain"]; o.err == nil || errors.As(o.err, &re) || !incarnationLost(o.err) {
		t.Errorf("rt-plain (no retries): %+v, %v; want its node's loss, not retried", o.reply, o.err)
	}
	if o := results["rt-mortal"]; !errors.As(o.err, &re) || re.Tries != 1 || re.MaxRetries != 3 || !incarnationLost(o.err) {
		t.Errorf("rt-mortal (no restarts): %v; want a RetryError after 1 try", o.err)
	} else {
		t.Logf("rt-mortal: %v", o.err)
	}
	select {
	case b := <-began:
		t.Errorf("hold began on %s after the results: a call ran twice", b.Node)
	default:
	}

	// rt-told waits in its factory for the gate: RESTARTING until then.
	for n := range restarting {
		if n.State == Restarting {
			break
		}
	}
	err = told.Tell(Add{N: 1})
	if !errors.Is(err, ErrActorRestarting) || !strings.Contains(fmt.Sprint(err), "rt-told") {
		t.Fatalf("Tell to a restarting actor: %v, want ErrActorRestarting naming it", err)
	}
	delivered := make(chan error, 1)
	go func() { delivered <- told.TellContext(ctx, Add{N: 2}) }()
	close(restartGateOpen)
	if err := <-delivered; err != nil {
		t.Fatalf("TellContext across the restart: %v", err)
	}
	if c := countOn(t, ctx, told); c.Told != 2 || c.Node == "rt-b" {
		t.Errorf("rt-told after its restart: %+v; want the TellContext's 2 only, on another node", c)
	}
}
