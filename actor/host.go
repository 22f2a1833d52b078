package actor

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"

	pa "github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/types/known/anypb"
)

// LocalSpawn describes an actor to start on this node.
type LocalSpawn struct {
	Name string
	Kind string
	Args any // spawn argument passed to the kind's Factory (a registered type, or nil)
	// MaxRestarts is how often a panicking actor is rebuilt in place before
	// it dies; -1 means without limit.
	MaxRestarts int
	// Restarts is the number of restarts already used (an actor respawned
	// after its node was lost keeps its count).
	Restarts int
	// MaxConcurrency is how many messages Receive may handle at once, as
	// Ray's max_concurrency: 0 or 1 is one at a time (in order); N > 1
	// handles up to N at once, each in its own goroutine, in no given
	// order, and the next waits in the mailbox until one returns. At most
	// ConcurrencyLimit.
	MaxConcurrency int
	// Factory, when set, builds the actor instead of the registered kind's
	// factory (for actors private to a package, like a node's own actor).
	Factory Factory
	// LoadArgs, when set, gives Args when the build runs (Build.Run, not
	// ReserveLocal): arguments that must be fetched first, such as a
	// spawn's large arguments on the spawner's bulk path. Its context ends
	// when the build is cancelled or the node stops. Restarts in place
	// reuse what it gave.
	LoadArgs func(ctx context.Context) (any, error)
}

// ConcurrencyLimit bounds LocalSpawn.MaxConcurrency (and a cluster
// spawn's): each message handled at once is a goroutine.
const ConcurrencyLimit = 10000

// hosted is one actor living on this node.
type hosted struct {
	sys  *System
	spec LocalSpawn
	ref  Ref
	pid  *pa.PID
	ctx  *Context
	inst Actor
	// endLife cancels ctx's Context: at a stop's request, and once stopped.
	endLife context.CancelFunc
	// slots holds a token per message being handled at once when
	// spec.MaxConcurrency > 1 (nil otherwise); inflight counts their
	// goroutines, which the actor's stop waits for.
	slots    chan struct{}
	inflight sync.WaitGroup

	mu        sync.Mutex
	stopCause string
}

func (h *hosted) setStopCause(c string) {
	h.mu.Lock()
	if h.stopCause == "" {
		h.stopCause = c
	}
	h.mu.Unlock()
}

// SpawnLocal starts an actor on this node. The kind's factory runs before
// SpawnLocal returns, so its error reaches the spawner.
func (s *System) SpawnLocal(spec LocalSpawn) (Ref, error) {
	b, err := s.ReserveLocal(spec)
	if err != nil {
		return Ref{}, err
	}
	return b.Run()
}

// Build is an actor whose name is reserved on this node and whose factory
// has not run yet: ReserveLocal's result. A caller that must not wait for
// the factory (a node's own actor, whose factories may load models for
// tens of seconds) reserves in its own goroutine and runs the build in
// another.
type Build struct {
	h   *hosted
	f   Factory
	ran atomic.Bool
}

// ReserveLocal checks spec and reserves its name on this node; Run then
// builds and starts the actor. Run must be called once, or the name stays
// taken.
func (s *System) ReserveLocal(spec LocalSpawn) (*Build, error) {
	select {
	case <-s.closed:
		return nil, ErrSystemStopped
	default:
	}
	f, ok := spec.Factory, spec.Factory != nil
	if !ok {
		f, ok = lookupKind(spec.Kind)
	}
	if !ok {
		return nil, fmt.Errorf("kind %q on node %s (registered: %s): %w",
			spec.Kind, s.addr, strings.Join(Kinds(), ", "), ErrUnknownKind)
	}
	if spec.Name == "" {
		return nil, fmt.Errorf("spawn %s: empty actor name", spec.Kind)
	}
	if spec.MaxConcurrency < 0 || spec.MaxConcurrency > ConcurrencyLimit {
		return nil, fmt.Errorf("spawn %s %q: MaxConcurrency %d: want 0 or 1 (one message at a time) up to %d", spec.Kind, spec.Name, spec.MaxConcurrency, ConcurrencyLimit)
	}
	id := "a/" + spec.Name
	h := &hosted{sys: s, spec: spec}
	if spec.MaxConcurrency > 1 {
		h.slots = make(chan struct{}, spec.MaxConcurrency)
	}
	h.ref = Ref{Name: spec.Name, Kind: spec.Kind, Address: s.addr, ID: id}
	life, endLife := context.WithCancel(s.life)
	h.ctx = &Context{sys: s, self: h.ref, restarts: spec.Restarts, life: life}
	h.endLife = endLife

	s.amu.Lock()
	if _, dup := s.actors[spec.Name]; dup {
		s.amu.Unlock()
		endLife()
		return nil, fmt.Errorf("actor %q on node %s: %w", spec.Name, s.addr, ErrNameTaken)
	}
	s.actors[spec.Name] = h // reserve the name while the factory runs
	s.amu.Unlock()
	return &Build{h: h, f: f}, nil
}

// Cancel asks a build that has not started its actor yet not to: the
// factory's Context ends (a factory that checks it gives up) and Run
// returns an error wrapping ErrActorDied with cause, whatever the factory
// returns. It reports whether the build was still before its start; a
// build that started its actor is not touched (stop it with StopLocal).
func (b *Build) Cancel(cause string) bool {
	h := b.h
	s := h.sys
	s.amu.Lock()
	defer s.amu.Unlock()
	if h.pid != nil || s.actors[h.ref.Name] != h {
		return false // started, or failed and gone
	}
	h.setStopCause(cause)
	h.endLife()
	return true
}

// Run runs the factory and starts the actor. A build cancelled (Cancel) or
// whose node began to stop while the factory ran does not start: the
// built instance's Stopped hook runs, so what it holds is released, and
// Run returns an error wrapping ErrActorDied or ErrSystemStopped.
func (b *Build) Run() (Ref, error) {
	if !b.ran.CompareAndSwap(false, true) {
		return Ref{}, fmt.Errorf("spawn %q: build run twice", b.h.ref.Name)
	}
	h, s, spec := b.h, b.h.sys, b.h.spec
	forget := func() {
		h.endLife()
		s.amu.Lock()
		if s.actors[spec.Name] == h {
			delete(s.actors, spec.Name)
		}
		s.amu.Unlock()
	}
	if spec.LoadArgs != nil {
		args, err := spec.LoadArgs(h.ctx.life)
		if err != nil {
			if why := b.cancelled(); why != nil {
				err = fmt.Errorf("%w (args: %w)", why, err)
			}
			forget()
			return Ref{}, fmt.Errorf("spawn %s %q on node %s: args: %w", spec.Kind, spec.Name, s.addr, err)
		}
		h.spec.Args, h.spec.LoadArgs = args, nil
		spec = h.spec
	}
	inst, err := buildInstance(b.f, h.ctx, spec.Args)
	if err != nil {
		if why := b.cancelled(); why != nil {
			err = fmt.Errorf("%w (factory: %w)", why, err)
		}
		forget()
		return Ref{}, fmt.Errorf("spawn %s %q on node %s: %w", spec.Kind, spec.Name, s.addr, err)
	}
	h.inst = inst
	// The check and the start happen under amu, so a Cancel or a System.Stop
	// either comes first (no start) or finds the pid and stops the actor.
	s.amu.Lock()
	why := b.cancelled()
	var pid *pa.PID
	if why == nil {
		pid, err = s.as.Root.SpawnNamed(pa.PropsFromFunc(h.receive), h.ref.ID)
		h.pid = pid
	}
	s.amu.Unlock()
	if why != nil {
		h.runStopped()
		forget()
		return Ref{}, fmt.Errorf("spawn %s %q on node %s: %w", spec.Kind, spec.Name, s.addr, why)
	}
	if err != nil {
		forget()
		return Ref{}, fmt.Errorf("spawn %s %q on node %s: %w", spec.Kind, spec.Name, s.addr, err)
	}
	s.emit(Event{Type: EventStarted, Ref: h.ref, Restarts: spec.Restarts})
	return h.ref, nil
}

// cancelled says why the build must not start its actor, or nil.
func (b *Build) cancelled() error {
	h := b.h
	if h.ctx.life.Err() == nil {
		return nil
	}
	if h.sys.life.Err() != nil {
		return fmt.Errorf("its node stopped while it was being built: %w", ErrSystemStopped)
	}
	h.mu.Lock()
	cause := h.stopCause
	h.mu.Unlock()
	return fmt.Errorf("stopped while it was being built (%s): %w", cause, ErrActorDied)
}

// buildInstance runs a factory, turning its panic into an error.
func buildInstance(f Factory, ctx *Context, args any) (a Actor, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("factory panicked: %v", p)
		}
	}()
	a, err = f(ctx, args)
	if err == nil && a == nil {
		err = fmt.Errorf("factory returned no actor")
	}
	return a, err
}

// StopLocal stops a hosted actor by name, with cause as its death cause, and
// waits until it has stopped. The actor's Context ends first, so a Receive
// that checks it gives up; one that does not is waited for (protoactor
// bounds the wait at 10 s: an actor stuck in Receive stops when Receive
// returns, and StopLocal reports the timeout).
func (s *System) StopLocal(name, cause string) error {
	s.amu.Lock()
	h := s.actors[name]
	var pid *pa.PID
	if h != nil {
		pid = h.pid
	}
	s.amu.Unlock()
	if pid == nil {
		return fmt.Errorf("actor %q on node %s: %w", name, s.addr, ErrActorNotFound)
	}
	h.setStopCause(cause)
	h.endLife()
	return s.as.Root.StopFuture(pid).Wait()
}

// Local lists the refs of the actors hosted on this node.
func (s *System) Local() []Ref {
	s.amu.Lock()
	defer s.amu.Unlock()
	out := make([]Ref, 0, len(s.actors))
	for _, h := range s.actors {
		if h.pid != nil {
			out = append(out, h.ref)
		}
	}
	return out
}

func (h *hosted) receive(c pa.Context) {
	switch m := c.Message().(type) {
	case *localEnvelope:
		var st *callState
		if m.call != nil {
			st = &m.call.state
			if st.isCancelled() {
				h.sys.stats.callsDropped.Add(1) // its caller gave it up while it queued
				return
			}
		}
		h.sys.stats.received.Add(1)
		h.handle(c, m.msg, m.call, nil, st)
	case *anypb.Any:
		h.handleWire(c, m, false)
	case *heldRelease:
		h.handleWire(c, m.a, true)
	case *concurrentPanic:
		if m.inst == h.inst { // not restarted for this instance yet
			h.afterPanic(c, m.cause)
		}
	case *pa.Stopped:
		h.stopped()
	}
}

// handleWire delivers a message that came over the transport; released is
// true for one that was held (held.go) and now comes back.
func (h *hosted) handleWire(c pa.Context, a *anypb.Any, released bool) {
	s := h.sys
	e, err := unmarshalEnvelope(a)
	if err != nil {
		s.stats.dropped.Add(1)
		s.warn.Warn(s.log, "dropping malformed message", "actor", h.ref.Name, "err", err)
		return
	}
	switch e.Kind {
	case kindReply, kindCancel, kindItem, kindCredit:
		return
	}
	if released {
		s.released(e.From, h.pid.Id)
	} else if !s.allowed(e.From) || s.senderHeld(e.From, h.pid.Id) {
		if !s.hold(h, c, a, e) {
			s.refuseHeld(heldMsg{sender: c.Sender(), env: e, actor: h.ref.Name}, "not held")
		}
		return
	}
	var st *callState
	if isCall(e.Kind) {
		// Before its body is fetched: a call given up while it queued
		// costs nothing more.
		if st = s.inbound.begin(e.From, e.Call, h); st == nil {
			s.stats.callsDropped.Add(1)
			return
		}
	}
	body := e.Body
	if e.Bulk != nil {
		if e.Bulk.Size > int64(s.cfg.MaxMessageSize) {
			h.replyWire(c, e, nil, fmt.Errorf("message body of %d bytes over the %d-byte limit: %w", e.Bulk.Size, s.cfg.MaxMessageSize, ErrTooLarge))
			s.endCall(st)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), bulkFetchTimeout)
		body, err = s.bulk.Fetch(ctx, *e.Bulk)
		cancel()
		if err != nil {
			h.replyWire(c, e, nil, fmt.Errorf("fetch message body: %w", err))
			s.endCall(st)
			return
		}
	}
	msg, err := decodeBody(e.Type, body)
	if err != nil {
		s.stats.dropped.Add(1)
		s.warn.Warn(s.log, "dropping undecodable message", "actor", h.ref.Name, "from", e.From, "err", err)
		h.replyWire(c, e, nil, err)
		s.endCall(st)
		return
	}
	s.stats.received.Add(1)
	h.handle(c, msg, nil, e, st)
}

// handle runs Receive and routes its result to the local caller (call) or
// the remote caller (wire); both nil means a Tell. st is a call's
// cancellation: its Receive gets a Context of its own, whose Context ends
// with the call.
func (h *hosted) handle(c pa.Context, msg any, call *localCall, wire *wireEnvelope, st *callState) {
	to := delivery{call: call, wire: wire, sender: c.Sender(), state: st}
	if h.slots != nil {
		h.handleAtOnce(msg, to)
		return
	}
	ctx := h.ctx
	if st != nil {
		ctx = &Context{sys: h.sys, self: h.ref, restarts: h.ctx.restarts, life: h.ctx.life, call: st}
	}
	ctx.cur = to
	reply, err, panicked := h.invoke(h.inst, ctx, msg)
	later := ctx.later
	ctx.cur, ctx.later = delivery{}, nil
	if panicked != "" {
		err = fmt.Errorf("%s", panicked)
	}
	switch {
	case later != nil:
		// Receive took the reply over (Context.ReplyLater); an error it
		// returned or a panic still answers now.
		if err != nil {
			later.Send(nil, err)
		}
	case call != nil:
		if err != nil {
			err = &ActorError{Actor: h.ref.Name, Message: err.Error(), err: err}
		}
		h.sys.complete(call.id, callResult{value: reply, err: err})
	case wire != nil && isCall(wire.Kind):
		h.replyWire(c, wire, reply, err)
	}
	if later == nil {
		h.sys.endCall(st)
	}
	if panicked != "" {
		h.afterPanic(c, panicked)
	}
}

// concurrentPanic tells the mailbox that a Receive running at once with
// others (MaxConcurrency > 1) panicked in inst: the restart in place
// happens there, once per instance.
type concurrentPanic struct {
	inst  Actor
	cause string
}

// handleAtOnce runs Receive in a goroutine of its own once a slot is free
// (MaxConcurrency > 1). The mailbox waits for the slot, so messages past
// the bound stay queued; an actor asked to stop meanwhile refuses them.
// Each message gets a Context of its own (its delivery, its ReplyLater),
// and runs on the instance current when it was taken: after a panic, the
// messages already running finish on the old instance while the next ones
// go to the rebuilt one.
// A call given up while it waits for a slot is dropped at once.
func (h *hosted) handleAtOnce(msg any, to delivery) {
	var gone <-chan struct{}
	if to.state != nil {
		gone = to.state.goneCh()
	}
	select {
	case h.slots <- struct{}{}:
	case <-h.ctx.life.Done():
		(&Reply{sys: h.sys, to: to, name: h.ref.Name}).Send(nil, fmt.Errorf("actor %s is stopping: %w", h.ref.Name, ErrActorDied))
		return
	case <-gone:
		h.sys.stats.callsDropped.Add(1)
		h.sys.endCall(to.state)
		return
	}
	if to.state != nil && to.state.isCancelled() { // given up as the slot freed
		<-h.slots
		h.sys.stats.callsDropped.Add(1)
		h.sys.endCall(to.state)
		return
	}
	mc := &Context{sys: h.sys, self: h.ref, restarts: h.ctx.restarts, life: h.ctx.life, cur: to, call: to.state}
	inst := h.inst
	h.inflight.Add(1)
	go func() {
		defer h.inflight.Done()
		defer func() { <-h.slots }()
		reply, err, panicked := h.invoke(inst, mc, msg)
		if panicked != "" {
			err = fmt.Errorf("%s", panicked)
		}
		r := mc.later
		switch {
		case r == nil:
			(&Reply{sys: h.sys, to: to, name: h.ref.Name}).Send(reply, err)
		case err != nil:
			r.Send(nil, err) // as in handle: an error answers at once
		}
		if panicked != "" {
			h.sys.as.Root.Send(h.pid, &concurrentPanic{inst: inst, cause: panicked})
		}
	}()
}

func (h *hosted) invoke(inst Actor, ctx *Context, msg any) (reply any, err error, panicked string) {
	defer func() {
		if p := recover(); p != nil {
			panicked = fmt.Sprintf("panic: %v", p)
			h.sys.log.Error("actor panicked", "actor", h.ref.Name, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	reply, err = inst.Receive(ctx, msg)
	return reply, err, ""
}

func (h *hosted) replyWire(c pa.Context, req *wireEnvelope, reply any, err error) {
	if !isCall(req.Kind) {
		return
	}
	sender := c.Sender()
	if sender == nil {
		return
	}
	c.Send(sender, h.sys.wireReply(req, reply, err))
}

// wireReply is the reply envelope to the remote call req.
func (s *System) wireReply(req *wireEnvelope, reply any, err error) *anypb.Any {
	var a *anypb.Any
	if err == nil && reply != nil {
		a, err = s.encodeWire(kindReply, req.Call, reply)
	}
	if err != nil || a == nil {
		out := &wireEnvelope{Kind: kindReply, Call: req.Call, From: s.addr}
		if err != nil {
			out.Err = err.Error()
		}
		a, _ = marshalEnvelope(out)
	}
	return a
}

// afterPanic restarts the actor in place while it has restarts left, and
// stops it for good otherwise.
func (h *hosted) afterPanic(c pa.Context, cause string) {
	h.ctx.restarts++
	max := h.spec.MaxRestarts
	if max >= 0 && h.ctx.restarts > max {
		h.setStopCause(cause)
		c.Stop(c.Self())
		return
	}
	f := h.spec.Factory
	if f == nil {
		f, _ = lookupKind(h.spec.Kind)
	}
	inst, err := buildInstance(f, h.ctx, h.spec.Args)
	if err != nil {
		h.setStopCause(cause + "; restart failed: " + err.Error())
		c.Stop(c.Self())
		return
	}
	h.inst = inst
	h.sys.emit(Event{Type: EventRestarted, Ref: h.ref, Cause: cause, Restarts: h.ctx.restarts})
}

// runStopped runs the instance's Stopped hook, if it has one.
func (h *hosted) runStopped() {
	if st, ok := h.inst.(Stopper); ok {
		defer func() {
			if p := recover(); p != nil {
				h.sys.log.Error("actor panicked in Stopped", "actor", h.ref.Name, "panic", p)
			}
		}()
		st.Stopped(h.ctx)
	}
}

func (h *hosted) stopped() {
	defer h.endLife()
	if h.slots != nil {
		// Receives running at once (MaxConcurrency) end before the
		// Stopped hook releases what they may use: their Context ends.
		h.endLife()
		h.inflight.Wait()
	}
	h.runStopped()
	h.sys.forgetHeld(h.pid.Id)
	h.sys.inbound.forget(h)
	h.mu.Lock()
	cause := h.stopCause
	h.mu.Unlock()
	if cause == "" {
		cause = "stopped"
	}
	s := h.sys
	s.amu.Lock()
	if s.actors[h.ref.Name] == h {
		delete(s.actors, h.ref.Name)
	}
	s.amu.Unlock()
	s.FailActor(h.ref, fmt.Errorf("%s: %s: %w", h.ref.Name, cause, ErrActorDied))
	s.emit(Event{Type: EventDied, Ref: h.ref, Cause: cause, Restarts: h.ctx.restarts})
}
