package actor

import (
	"sync/atomic"

	pa "github.com/asynkron/protoactor-go/actor"
)

// delivery is where the reply to the message being handled goes: a local
// caller (call), a remote one (wire, answered at sender), or nobody (a Tell).
type delivery struct {
	call   *localCall
	wire   *wireEnvelope
	sender *pa.PID
	state  *callState // the call's cancellation (nil for a Tell)
}

// Reply is the reply to one message, sent after Receive returned
// (Context.ReplyLater).
type Reply struct {
	sys  *System
	to   delivery
	name string
	sent atomic.Bool
}

// ReplyLater takes over the reply to the message Receive is handling, so
// that slow work can go on in another goroutine while the actor handles
// its next messages: Receive's own result is then not sent (unless it is
// an error, or Receive panics: that answers at once), and the returned
// Reply sends it, from any goroutine. Call it from Receive only. For a
// Tell the Reply sends nothing. The call's Context (Context.Context)
// lasts until the reply is sent. A caller whose actor stops before the
// reply is sent gets ErrActorDied (in-process) or waits for its context
// or the node's loss (remote), as with any call.
func (c *Context) ReplyLater() *Reply {
	if c.later == nil {
		c.later = &Reply{sys: c.sys, to: c.cur, name: c.self.Name}
	}
	return c.later
}

// Send sends the reply: value, or err as an *ActorError. Only the first
// Send counts; later ones and those after the node stopped do nothing.
func (r *Reply) Send(value any, err error) {
	if r == nil || !r.sent.CompareAndSwap(false, true) {
		return
	}
	s := r.sys
	defer s.endCall(r.to.state)
	select {
	case <-s.closed:
		return
	default:
	}
	switch {
	case r.to.call != nil:
		if err != nil {
			err = &ActorError{Actor: r.name, Message: err.Error(), err: err}
		}
		s.complete(r.to.call.id, callResult{value: value, err: err})
	case r.to.wire != nil && isCall(r.to.wire.Kind) && r.to.sender != nil:
		s.as.Root.Send(r.to.sender, s.wireReply(r.to.wire, value, err))
	}
}
