package actor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	pa "github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/types/known/anypb"
)

// Cancellation of calls, as Ray's ray.cancel for actor tasks: a caller
// whose context ends before the reply tells the actor, so a call still in
// its mailbox is dropped without running and a running one sees its
// Context end. In-process the caller and the actor share the call's state;
// across nodes the caller sends a cancel envelope to the actor's node,
// whose cancel process (a bare protoactor process, no mailbox: the cancel
// does not queue behind the calls it cancels) marks the call. A call and
// its cancel travel on the one connection between the two nodes, in
// order, so the cancel never overtakes the call it names.

// ErrCallCancelled is the cause (context.Cause) of a call's Context when
// its caller gave the call up: its context ended, or its Future was
// cancelled.
var ErrCallCancelled = errors.New("call cancelled by its caller")

// errCallAnswered is the cause of a call's Context once the call has
// been answered: work it started and did not wait for ends with it.
var errCallAnswered = errors.New("call answered")

// cancelProcessID is the process every node's cancels go to.
const cancelProcessID = "rlnode$cancels"

// maxCancelsKept bounds the cancels a node keeps for calls it has not
// begun (still in a mailbox, or never seen: a cancel that crossed its
// call's reply, or one a peer made up). Past it the oldest is forgotten,
// and the call it named, should it come, runs: what every call did before
// cancels existed, never a table that grows.
const maxCancelsKept = 4096

// callState is one call's cancellation as the actor that handles it sees
// it: shared with the caller for an in-process call, kept in the node's
// table of running calls for one from another node.
type callState struct {
	mu        sync.Mutex
	cancelled bool // its caller gave it up
	ended     bool // answered
	ctx       context.Context
	cancel    context.CancelCauseFunc
	gone      chan struct{} // closed when cancelled; made on first use
	goneShut  bool

	// A remote stream's producer's credits (stream.go).
	credits    int
	creditInit bool
	creditSig  chan struct{}

	key   callKey // a remote call's key in the table
	owner *hosted // the actor handling a remote call
}

// callKey names a call from another node: the caller's address and its
// call id, unique per caller process (ids start at random: a restarted
// process at the same address does not meet its predecessor's cancels).
type callKey struct {
	from string
	id   uint64
}

// context is the call's context under the actor's life, made when
// Receive first asks for it.
func (c *callState) context(life context.Context) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithCancelCause(life)
		switch {
		case c.cancelled:
			c.cancel(ErrCallCancelled)
		case c.ended:
			c.cancel(errCallAnswered)
		}
	}
	return c.ctx
}

// abandon marks the call given up by its caller and ends its context;
// true when it was neither given up nor answered before.
func (c *callState) abandon() bool {
	if !c.mark() {
		return false
	}
	c.fire()
	return true
}

// mark marks the call given up, so that it is dropped if not begun, but
// leaves a running one's context alone until fire: the calls a caller
// gives up at once are all marked before any running one ends, so that
// none still queued can take the turn a running one frees.
func (c *callState) mark() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelled || c.ended {
		return false
	}
	c.cancelled = true
	return true
}

// fire ends a marked call's context.
func (c *callState) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel(ErrCallCancelled)
	}
	if c.gone != nil && !c.goneShut {
		close(c.gone)
		c.goneShut = true
	}
}

// end marks the call answered: its context ends.
func (c *callState) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended = true
	if c.cancel != nil {
		c.cancel(errCallAnswered)
	}
}

func (c *callState) isCancelled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancelled
}

// goneCh is closed once the call is given up.
func (c *callState) goneCh() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone == nil {
		c.gone = make(chan struct{})
		if c.cancelled {
			close(c.gone)
			c.goneShut = true
		}
	}
	return c.gone
}

// inboundCalls is a node's table of the calls from other nodes that its
// actors are handling, and of the cancels that came before their calls
// were begun.
type inboundCalls struct {
	mu      sync.Mutex
	running map[callKey]*callState
	early   map[callKey]struct{}
	ring    []callKey // early's keys in arrival order, overwritten in turn
	next    int
}

// begin registers a remote call its actor is about to handle; nil when
// its caller cancelled it already (the call is dropped).
func (t *inboundCalls) begin(from string, id uint64, h *hosted) *callState {
	k := callKey{from: from, id: id}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.early[k]; ok {
		delete(t.early, k)
		return nil
	}
	if t.running == nil {
		t.running = map[callKey]*callState{}
	}
	st := &callState{key: k, owner: h}
	t.running[k] = st
	return st
}

// cancel applies a cancel from node from for its call ids, all at once
// (callState.mark); it returns how many running calls it reached.
func (t *inboundCalls) cancel(from string, ids ...uint64) int {
	var fire []*callState
	t.mu.Lock()
	for _, id := range ids {
		if st := t.running[callKey{from: from, id: id}]; st != nil {
			if st.mark() {
				fire = append(fire, st)
			}
			continue
		}
		t.keep(callKey{from: from, id: id})
	}
	t.mu.Unlock()
	for _, st := range fire {
		st.fire()
	}
	return len(fire)
}

// keep keeps the cancel of call k, not begun here; t.mu held.
func (t *inboundCalls) keep(k callKey) {
	if _, ok := t.early[k]; ok {
		return
	}
	if t.early == nil {
		t.early = map[callKey]struct{}{}
		t.ring = make([]callKey, 0, 64)
	}
	if len(t.ring) < maxCancelsKept {
		t.ring = append(t.ring, k)
	} else {
		delete(t.early, t.ring[t.next])
		t.ring[t.next] = k
		t.next = (t.next + 1) % maxCancelsKept
	}
	t.early[k] = struct{}{}
}

// finish drops a remote call from the table once answered.
func (t *inboundCalls) finish(st *callState) {
	t.mu.Lock()
	if t.running[st.key] == st {
		delete(t.running, st.key)
	}
	t.mu.Unlock()
}

// forget drops the calls h was handling (it stopped; those it never
// answered would stay otherwise).
func (t *inboundCalls) forget(h *hosted) {
	t.mu.Lock()
	for k, st := range t.running {
		if st.owner == h {
			delete(t.running, k)
		}
	}
	t.mu.Unlock()
}

// sizes are the table's entries, for tests of its bound.
func (t *inboundCalls) sizes() (running, early int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.running), len(t.early)
}

// endCall marks a handled call answered (nil: a Tell, nothing to do).
func (s *System) endCall(st *callState) {
	if st == nil {
		return
	}
	if st.owner != nil {
		s.inbound.finish(st)
	}
	st.end()
}

// maxCancelBatch bounds the call ids of one cancel envelope.
const maxCancelBatch = 1024

// sendCancel tells the node at addr that this node gave its calls ids up,
// in envelopes of up to maxCancelBatch ids applied at once there: the call
// id, and the others as uvarints in the body.
func (s *System) sendCancel(addr string, ids ...uint64) {
	for len(ids) > 0 {
		n := min(len(ids), maxCancelBatch)
		e := wireEnvelope{Kind: kindCancel, Call: ids[0], From: s.addr}
		for _, id := range ids[1:n] {
			e.Body = binary.AppendUvarint(e.Body, id)
		}
		a, _ := marshalEnvelope(&e)
		s.stats.cancelsSent.Add(uint64(n))
		s.as.Root.Send(&pa.PID{Address: addr, Id: cancelProcessID}, a)
		ids = ids[n:]
	}
}

// abandonGroup gives up the pending calls made with the context whose
// Done channel is done (a Map's calls, say), call id among them, at once:
// in-process ones are all marked before any is fired, and each node gets
// one cancel envelope for all of its, so that a call still queued behind a
// running one is dropped, not begun in the turn the running one frees.
// Another call's goroutine may have taken the group already: then none.
func (s *System) abandonGroup(done <-chan struct{}, id uint64) {
	s.pmu.Lock()
	if _, ok := s.pending[id]; !ok {
		s.pmu.Unlock()
		return
	}
	var group []*pendingCall
	for k, p := range s.pending {
		if k == id || (p.done == done && p.fail == nil) {
			group = append(group, p)
			delete(s.pending, k)
		}
	}
	s.pmu.Unlock()
	var local []*callState
	remote := map[string][]uint64{}
	for _, p := range group {
		switch {
		case p.lc != nil:
			if p.lc.state.mark() {
				local = append(local, &p.lc.state)
			}
		case p.addr != s.addr:
			remote[p.addr] = append(remote[p.addr], p.id)
		}
	}
	for addr, ids := range remote {
		s.sendCancel(addr, ids...)
	}
	for _, st := range local {
		st.fire()
	}
}

// cancelProcess receives other nodes' cancels. Like the reply process it
// has no mailbox: a cancel is applied in the transport's goroutine, at
// once, not behind the calls queued for the actor.
type cancelProcess struct{ s *System }

func (p *cancelProcess) SendUserMessage(_ *pa.PID, message any) {
	s := p.s
	if env, ok := message.(*pa.MessageEnvelope); ok {
		message = env.Message
	}
	a, ok := message.(*anypb.Any)
	if !ok {
		return
	}
	e, err := unmarshalEnvelope(a)
	if err == nil && e.Kind != kindCancel && e.Kind != kindCredit {
		err = fmt.Errorf("envelope of kind %d sent to the cancel process", e.Kind)
	}
	if err != nil {
		s.stats.dropped.Add(1)
		s.warn.Warn(s.log, "dropping a malformed cancel", "err", err)
		return
	}
	if !s.allowed(e.From) {
		s.stats.dropped.Add(1)
		s.warn.Warn(s.log, "dropping a cancel from a non-member", "from", e.From)
		return
	}
	if e.Kind == kindCredit {
		n, k := binary.Uvarint(e.Body)
		if k <= 0 {
			s.stats.dropped.Add(1)
			return
		}
		s.inbound.credit(e.From, e.Call, n)
		return
	}
	ids := []uint64{e.Call}
	for b := e.Body; len(b) > 0 && len(ids) < maxCancelBatch; {
		id, k := binary.Uvarint(b)
		if k <= 0 {
			break
		}
		ids, b = append(ids, id), b[k:]
	}
	s.stats.cancelsReceived.Add(uint64(len(ids)))
	s.stats.callsInterrupted.Add(uint64(s.inbound.cancel(e.From, ids...)))
}

func (p *cancelProcess) SendSystemMessage(*pa.PID, any) {}
func (p *cancelProcess) Stop(*pa.PID)                   {}
