package actor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
)

// Streamed replies, as Ray's num_returns="streaming": a call made with
// System.Stream may be answered with several replies in order, which the
// caller reads as they come (Stream.Next). The producer is held to
// StreamWindow replies its caller has not read yet: in-process by a
// channel of that size, across nodes by credits the caller sends back as
// it reads (half a window at a time). The caller's Close, or its context's
// end while it waits, cancels the call as any call is cancelled, and the
// producer's Send then fails.

// StreamWindow is how many replies a stream's producer may send before
// its caller has read them.
const StreamWindow = 16

// ErrStreamClosed is Next's error after Close, and Send's once the
// stream was ended.
var ErrStreamClosed = errors.New("stream closed")

// ErrNotStreamed is StreamReplies' error for a message that came by Call
// or Tell, not by Stream.
var ErrNotStreamed = errors.New("message was not sent with Stream")

// Stream is the caller's side of a streamed call.
type Stream struct {
	s     *System
	ref   Ref
	id    uint64
	ch    chan callResult // remote items and the end; a local call's end
	fail  chan error      // the call failed (actor died, node lost)
	items chan any        // a local call's items
	lc    *localCall
	taken int // remote items read since the last credit

	final *callResult // a local call's end, read before its last items
	end   error       // io.EOF, the call's error or ErrStreamClosed: sticky
	// unbind stops the cancel on Stream's ctx's end, once the stream ended.
	unbind func() bool
	life   context.Context // Stream's ctx: its end ends the stream
}

// Stream sends msg to the actor ref, which may answer it with several
// replies (Context.StreamReplies); read them with Next. A Receive that
// answers as for a Call gives one reply. ctx bounds the whole stream: its
// end cancels the call at the actor, as Close does; Close a Stream given
// up before its end.
func (s *System) Stream(ctx context.Context, ref Ref, msg any) (*Stream, error) {
	if ref.IsZero() {
		return nil, fmt.Errorf("stream: empty actor ref: %w", ErrActorNotFound)
	}
	select {
	case <-s.closed:
		return nil, ErrSystemStopped
	default:
	}
	s.stats.callsSent.Add(1)
	pid := &pa.PID{Address: ref.Address, Id: ref.ID}
	st := &Stream{s: s, ref: ref, fail: make(chan error, 1), life: ctx}
	if ref.Address == s.addr {
		if _, err := registeredName(msg); err != nil {
			return nil, fmt.Errorf("stream %s: %w", ref.Name, err)
		}
		if _, ok := s.as.ProcessRegistry.GetLocal(ref.ID); !ok {
			return nil, fmt.Errorf("stream %s on node %s: %w", ref.Name, s.addr, ErrActorNotFound)
		}
		st.id, st.ch = s.registerStream(ref, 1, st.fail)
		st.items = make(chan any, StreamWindow)
		st.lc = &localCall{id: st.id, items: st.items}
		s.as.Root.Send(pid, &localEnvelope{msg: msg, call: st.lc})
		st.unbind = context.AfterFunc(ctx, st.cancel)
		return st, nil
	}
	st.id, st.ch = s.registerStream(ref, StreamWindow+1, st.fail)
	a, err := s.encodeWire(kindStreamCall, st.id, msg)
	if err != nil {
		s.unregister(st.id)
		return nil, fmt.Errorf("stream %s: %w", ref.Name, err)
	}
	s.as.Root.RequestWithCustomSender(pid, a, s.replyPID)
	st.unbind = context.AfterFunc(ctx, st.cancel)
	return st, nil
}

// cancel gives the call up at the actor if it is still pending. Safe from
// any goroutine (it touches the system's state only).
func (st *Stream) cancel() {
	if !st.s.unregister(st.id) {
		return
	}
	select { // a Next waiting with another context learns of it
	case st.fail <- context.Canceled:
	default:
	}
	if st.lc != nil {
		st.lc.state.abandon()
		return
	}
	st.s.sendCancel(st.ref.Address, st.id)
}

func (s *System) registerStream(ref Ref, room int, fail chan error) (uint64, chan callResult) {
	id := s.nextCall.Add(1)
	ch := make(chan callResult, room)
	s.pmu.Lock()
	s.pending[id] = &pendingCall{target: ref.Address + "/" + ref.ID, addr: ref.Address, ch: ch, fail: fail, since: time.Now()}
	s.pmu.Unlock()
	return id, ch
}

// Next waits, within ctx, for the stream's next reply. At the end it
// returns io.EOF, or the call's error (an *ActorError, ErrActorDied, ...),
// and the same again on later calls. ctx's end returns its error and
// leaves the stream open: Close gives it up.
func (st *Stream) Next(ctx context.Context) (any, error) {
	for {
		if err := st.life.Err(); err != nil && st.end == nil {
			st.cancel()
			st.end = fmt.Errorf("stream %s: %w", st.ref.Name, err)
		}
		if st.end != nil {
			return nil, st.end
		}
		if st.items != nil {
			select {
			case v := <-st.items:
				return v, nil
			default:
			}
			if st.final != nil {
				// Every item sent before the end is in st.items by now.
				if v, ok := st.finish(ctx, *st.final); ok {
					return v, nil
				}
				continue
			}
		}
		select {
		case v := <-st.items: // nil for a remote stream: never ready
			return v, nil
		case r := <-st.ch:
			if r.wire != nil && r.wire.Kind == kindItem {
				v, err := st.s.decodeReply(ctx, st.ref, r.wire)
				st.credit()
				if err != nil {
					st.end = err
					st.Close()
					return nil, err
				}
				return v, nil
			}
			if st.items != nil {
				st.final = &r
				continue
			}
			if v, ok := st.finish(ctx, r); ok {
				return v, nil
			}
		case err := <-st.fail:
			st.unbind()
			st.end = fmt.Errorf("stream %s: %w", st.ref.Name, err)
		case <-ctx.Done():
			return nil, fmt.Errorf("stream %s: %w", st.ref.Name, ctx.Err())
		}
	}
}

// finish takes the call's end: a value it carried (a Receive that
// answered as for a Call) is the last reply, and true.
func (st *Stream) finish(ctx context.Context, r callResult) (any, bool) {
	st.unbind()
	st.end = io.EOF
	var v any
	var err error
	if r.wire != nil {
		v, err = st.s.decodeReply(ctx, st.ref, r.wire)
	} else {
		v, err = r.value, r.err
	}
	if err != nil {
		st.end = err
		return nil, false
	}
	return v, v != nil
}

// credit tells the producer's node, every half window, how many items
// were read: it may send as many more.
func (st *Stream) credit() {
	st.taken++
	if st.taken < StreamWindow/2 {
		return
	}
	a, _ := marshalEnvelope(&wireEnvelope{Kind: kindCredit, Call: st.id, From: st.s.addr, Body: binary.AppendUvarint(nil, uint64(st.taken))})
	st.taken = 0
	st.s.as.Root.Send(&pa.PID{Address: st.ref.Address, Id: cancelProcessID}, a)
}

// Close gives the stream up: a producer still sending is cancelled (its
// Send fails, its Context ends with ErrCallCancelled). After its end it
// only marks the stream closed.
func (st *Stream) Close() {
	if st.end == nil {
		st.end = ErrStreamClosed
	}
	st.unbind()
	st.cancel()
}

// Streamer sends the replies of a streamed call (Context.StreamReplies).
// One goroutine at a time sends on it.
type Streamer struct {
	reply *Reply
	st    *callState
	life  context.Context
	items chan any // a local caller's
	mu    sync.Mutex
}

// StreamReplies takes over the reply to the message Receive is handling,
// which came by Stream, as ReplyLater does: Send sends replies, in order,
// from Receive or from any goroutine, and Close ends the stream (Receive's
// own result is not sent, unless it is an error). A message that came by
// Call or Tell gives ErrNotStreamed.
func (c *Context) StreamReplies() (*Streamer, error) {
	switch {
	case c.cur.call != nil && c.cur.call.items != nil:
	case c.cur.wire != nil && c.cur.wire.Kind == kindStreamCall && c.cur.sender != nil:
	default:
		return nil, fmt.Errorf("actor %s: %w", c.self.Name, ErrNotStreamed)
	}
	w := &Streamer{reply: c.ReplyLater(), st: c.call, life: c.life}
	if c.cur.call != nil {
		w.items = c.cur.call.items
	}
	return w, nil
}

// Send sends one reply. It waits while StreamWindow replies are unread by
// the caller, and fails once the caller gave the stream up (its Close or
// its context's end: context.Cause ErrCallCancelled), the stream was
// closed, or the actor stops.
func (w *Streamer) Send(v any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reply.sent.Load() {
		return ErrStreamClosed
	}
	cctx := w.st.context(w.life)
	if err := cctx.Err(); err != nil {
		return context.Cause(cctx)
	}
	s := w.reply.sys
	if w.items != nil {
		if _, err := registeredName(v); err != nil {
			return err
		}
		select {
		case w.items <- v:
			return nil
		case <-cctx.Done():
			return context.Cause(cctx)
		}
	}
	for !w.st.takeCredit() {
		select {
		case <-w.st.creditCh():
		case <-cctx.Done():
			return context.Cause(cctx)
		}
	}
	to := w.reply.to
	a, err := s.encodeWire(kindItem, to.wire.Call, v)
	if err != nil {
		w.st.addCredit(1) // not sent
		return fmt.Errorf("stream reply: %w", err)
	}
	s.as.Root.Send(to.sender, a)
	return nil
}

// Close ends the stream: with err (as an *ActorError to the caller) or,
// for nil, io.EOF after the replies sent. Only the first Close counts.
func (w *Streamer) Close(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reply.Send(nil, err)
}

// Credits of a remote stream's producer: it starts with a window's worth.

func (c *callState) takeCredit() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.creditInit {
		c.creditInit, c.credits = true, StreamWindow
	}
	if c.credits == 0 {
		return false
	}
	c.credits--
	return true
}

func (c *callState) addCredit(n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.creditInit {
		c.creditInit, c.credits = true, StreamWindow
	}
	c.credits = int(min(uint64(c.credits)+min(n, StreamWindow), StreamWindow))
	if c.creditSig != nil {
		select {
		case c.creditSig <- struct{}{}:
		default:
		}
	}
}

func (c *callState) creditCh() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.creditSig == nil {
		c.creditSig = make(chan struct{}, 1)
	}
	return c.creditSig
}

// credit applies a credit from node from for its stream id.
func (t *inboundCalls) credit(from string, id uint64, n uint64) {
	t.mu.Lock()
	st := t.running[callKey{from: from, id: id}]
	t.mu.Unlock()
	if st != nil {
		st.addCredit(n)
	}
}

// decodeReply turns a remote reply or stream item into its value or error.
func (s *System) decodeReply(ctx context.Context, ref Ref, e *wireEnvelope) (any, error) {
	if e.Err != "" {
		return nil, &ActorError{Actor: ref.Name, Message: e.Err}
	}
	if e.Type == "" {
		return nil, nil
	}
	body := e.Body
	if e.Bulk != nil {
		if e.Bulk.Size > int64(s.cfg.MaxMessageSize) {
			return nil, fmt.Errorf("call %s: reply of %d bytes over the %d-byte limit: %w", ref.Name, e.Bulk.Size, s.cfg.MaxMessageSize, ErrTooLarge)
		}
		var err error
		if body, err = s.bulk.Fetch(ctx, *e.Bulk); err != nil {
			return nil, fmt.Errorf("call %s: fetch reply body: %w", ref.Name, err)
		}
	}
	v, err := decodeBody(e.Type, body)
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", ref.Name, err)
	}
	return v, nil
}
