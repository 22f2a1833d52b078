package actor

import (
	"context"
	"fmt"

	pa "github.com/asynkron/protoactor-go/actor"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/anypb"
)

// localEnvelope carries a message between actors of one process: no
// encoding, the value itself is passed (so a sender must not mutate a
// message after sending it).
type localEnvelope struct {
	msg  any
	call *localCall
}

// localCall is an in-process call: its id among the pending calls, and
// its cancellation, which caller and actor share.
type localCall struct {
	id    uint64
	state callState
	items chan any // a streamed call's replies (Stream), else nil
}

// Call sends msg to the actor ref and waits for its reply. It returns when
// the reply arrives, ctx is done, the actor dies or its node is lost. The
// callee's error comes back as an *ActorError.
//
// A call given up before its reply (ctx ends) is cancelled at the actor,
// as Ray's ray.cancel: one still in the actor's mailbox is dropped without
// running, and a running one sees its Context end with cause
// ErrCallCancelled (Receive decides whether to stop).
func (s *System) Call(ctx context.Context, ref Ref, msg any) (any, error) {
	if ref.IsZero() {
		return nil, fmt.Errorf("call: empty actor ref: %w", ErrActorNotFound)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("call %s: %w", ref.Name, err) // not sent: nothing to cancel
	}
	s.stats.callsSent.Add(1)
	pid := &pa.PID{Address: ref.Address, Id: ref.ID}
	if ref.Address == s.addr {
		if _, err := registeredName(msg); err != nil {
			return nil, fmt.Errorf("call %s: %w", ref.Name, err)
		}
		if _, ok := s.as.ProcessRegistry.GetLocal(ref.ID); !ok {
			return nil, fmt.Errorf("call %s on node %s: %w", ref.Name, s.addr, ErrActorNotFound)
		}
		lc := &localCall{}
		id, ch := s.register(ref.Address+"/"+ref.ID, ref.Address, ctx.Done(), lc)
		s.as.Root.Send(pid, &localEnvelope{msg: msg, call: lc})
		return s.wait(ctx, id, ch, ref)
	}
	id, ch := s.register(ref.Address+"/"+ref.ID, ref.Address, ctx.Done(), nil)
	a, err := s.encodeWire(kindCall, id, msg)
	if err != nil {
		s.unregister(id)
		return nil, fmt.Errorf("call %s: %w", ref.Name, err)
	}
	s.as.Root.RequestWithCustomSender(pid, a, s.replyPID)
	return s.wait(ctx, id, ch, ref)
}

// Tell sends msg to ref without waiting. It fails only when msg cannot be
// sent at all (unregistered type, too large, system stopped); delivery is
// not confirmed.
func (s *System) Tell(ref Ref, msg any) error {
	if ref.IsZero() {
		return fmt.Errorf("tell: empty actor ref: %w", ErrActorNotFound)
	}
	select {
	case <-s.closed:
		return ErrSystemStopped
	default:
	}
	s.stats.tellsSent.Add(1)
	pid := &pa.PID{Address: ref.Address, Id: ref.ID}
	if ref.Address == s.addr {
		if _, err := registeredName(msg); err != nil {
			return fmt.Errorf("tell %s: %w", ref.Name, err)
		}
		s.as.Root.Send(pid, &localEnvelope{msg: msg})
		return nil
	}
	a, err := s.encodeWire(kindTell, 0, msg)
	if err != nil {
		return fmt.Errorf("tell %s: %w", ref.Name, err)
	}
	s.as.Root.Send(pid, a)
	return nil
}

// encodeWire builds the wire form of msg: the envelope header with the
// msgpack body encoded straight after it, in one buffer. Bodies over
// MaxMessageSize are refused; bodies over InlineLimit are offered on the
// bulk path and the envelope carries the reference instead.
func (s *System) encodeWire(kind uint8, call uint64, msg any) (*anypb.Any, error) {
	name, err := registeredName(msg)
	if err != nil {
		return nil, err
	}
	e := wireEnvelope{Kind: kind, Call: call, Type: name, From: s.addr}
	w := sliceWriter{b: appendHeader(make([]byte, 0, 256), &e)}
	hdr := len(w.b)
	enc := msgpack.GetEncoder()
	enc.Reset(&w)
	err = enc.Encode(msg)
	msgpack.PutEncoder(enc)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", name, err)
	}
	body := w.b[hdr:]
	if n := len(body); n > s.cfg.MaxMessageSize {
		return nil, fmt.Errorf("%s body is %d bytes, over the %d-byte message limit (send it with the Bulk API): %w",
			name, n, s.cfg.MaxMessageSize, ErrTooLarge)
	} else if n > s.cfg.InlineLimit {
		ref := s.bulk.Offer(body, 1, bulkOfferTTL)
		e.Bulk = &ref
		return marshalEnvelope(&e)
	}
	return &anypb.Any{TypeUrl: envelopeTypeURL, Value: w.b}, nil
}

// wait waits for call id's result; a call given up while still pending
// is cancelled at the actor, with the others made with the same ctx
// (abandonGroup).
func (s *System) wait(ctx context.Context, id uint64, ch chan callResult, ref Ref) (any, error) {
	var r callResult
	select {
	case r = <-ch:
	case <-ctx.Done():
		s.abandonGroup(ctx.Done(), id)
		return nil, fmt.Errorf("call %s: %w", ref.Name, ctx.Err())
	case <-s.closed:
		s.unregister(id)
		return nil, ErrSystemStopped
	}
	if r.wire == nil {
		return r.value, r.err
	}
	return s.decodeReply(ctx, ref, r.wire)
}

// replyProcess receives replies from other nodes. It is a bare protoactor
// process (no mailbox): a reply is matched to its waiting call and handed
// over; decoding happens in the caller's goroutine.
type replyProcess struct{ s *System }

func (p *replyProcess) SendUserMessage(_ *pa.PID, message any) {
	if env, ok := message.(*pa.MessageEnvelope); ok {
		message = env.Message
	}
	a, ok := message.(*anypb.Any)
	if !ok {
		// A DeadLetterResponse carries no call id; the directory's death
		// notice or the node-lost event fails the call instead.
		return
	}
	e, err := unmarshalEnvelope(a)
	if err != nil {
		p.s.stats.dropped.Add(1)
		p.s.warn.Warn(p.s.log, "dropping malformed reply", "err", err)
		return
	}
	if e.Kind != kindReply && e.Kind != kindItem {
		p.s.warn.Warn(p.s.log, "dropping non-reply sent to the reply process", "kind", e.Kind, "from", e.From)
		return
	}
	if !p.s.allowed(e.From) {
		p.s.stats.dropped.Add(1)
		p.s.warn.Warn(p.s.log, "dropping reply from a non-member", "from", e.From)
		return
	}
	if e.Kind == kindItem {
		p.s.deliverItem(e.Call, callResult{wire: e})
		return
	}
	p.s.complete(e.Call, callResult{wire: e})
}

func (p *replyProcess) SendSystemMessage(*pa.PID, any) {}
func (p *replyProcess) Stop(*pa.PID)                   {}

// CallAs is Call with the reply's type asserted.
func CallAs[R any](ctx context.Context, s *System, ref Ref, msg any) (R, error) {
	var zero R
	v, err := s.Call(ctx, ref, msg)
	if err != nil {
		return zero, err
	}
	r, ok := v.(R)
	if !ok {
		return zero, fmt.Errorf("call %s: reply is %T, want %T", ref.Name, v, zero)
	}
	return r, nil
}
