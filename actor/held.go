package actor

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/types/known/anypb"
)

// Messages from a node the peer filter does not know yet are held, not
// dropped. Membership spreads by gossip, so a node that has just joined
// learns of the others (from the node it joined through) before they learn
// of it: its first call to a third node can arrive there a few hundred
// milliseconds (seconds under CPU starvation) before that node's view
// lists the caller. Dropped, such a call would never be answered while
// both nodes live — a hang, as a spawn on a freshly joined run once was.
// Held, it is delivered, in arrival order per sender, as soon as the
// filter admits the sender; after Config.PeerGrace it is dropped and a
// call is answered with an error naming the sender, so no caller waits
// forever.

// DefaultPeerGrace is how long a message from an unknown sender is held.
const DefaultPeerGrace = 10 * time.Second

// maxHeld bounds the held messages (all senders together): beyond it a
// message from an unknown sender is refused at once.
const maxHeld = 4096

// heldPoll is how often held messages are re-checked against the filter.
const heldPoll = 20 * time.Millisecond

type heldMsg struct {
	to     *pa.PID // the hosted actor it was sent to
	sender *pa.PID // where a call's reply goes
	a      *anypb.Any
	env    *wireEnvelope
	actor  string
	until  time.Time
}

type heldQueue struct {
	n        atomic.Int32 // len(msgs) + messages in flight, read without the lock on every message
	mu       sync.Mutex
	msgs     []heldMsg
	inFlight map[heldPair]int // released, not yet taken from the mailbox
	polling  bool
}

// heldPair is a sending node and a receiving actor: the order of the
// messages between the two is kept.
type heldPair struct{ from, to string }

// heldRelease is a held message on its way back through the actor's
// mailbox; receiving it ends its time in flight.
type heldRelease struct{ a *anypb.Any }

// senderHeld reports whether messages from addr to the actor with process
// id to are held or on their way back to its mailbox: a later message
// between the two queues behind them, even once the sender is admitted, so
// they stay in order.
func (s *System) senderHeld(addr, to string) bool {
	if s.held.n.Load() == 0 {
		return false
	}
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	if s.held.inFlight[heldPair{addr, to}] > 0 {
		return true
	}
	for _, m := range s.held.msgs {
		if m.env.From == addr && m.to.Id == to {
			return true
		}
	}
	return false
}

// released notes that a released message from addr left the mailbox of
// the actor with process id to.
func (s *System) released(addr, to string) {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	k := heldPair{addr, to}
	if s.held.inFlight[k]--; s.held.inFlight[k] <= 0 {
		delete(s.held.inFlight, k)
	}
	s.held.n.Add(-1)
}

// forgetHeld drops the in-flight marks of a stopped actor: released
// messages still in its mailbox will never be taken.
func (s *System) forgetHeld(to string) {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	for k, c := range s.held.inFlight {
		if k.to == to {
			delete(s.held.inFlight, k)
			s.held.n.Add(-int32(c))
		}
	}
}

// hold queues a message from a sender the filter does not admit (yet).
// It reports false when the message was refused instead: holding is off
// (PeerGrace < 0) or too many are held.
func (s *System) hold(h *hosted, c pa.Context, a *anypb.Any, e *wireEnvelope) bool {
	if s.cfg.PeerGrace < 0 {
		return false
	}
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	if len(s.held.msgs) >= maxHeld {
		return false
	}
	s.held.msgs = append(s.held.msgs, heldMsg{
		to: h.pid, sender: c.Sender(), a: a, env: e, actor: h.ref.Name,
		until: time.Now().Add(s.cfg.PeerGrace),
	})
	s.held.n.Add(1)
	s.stats.held.Add(1)
	if !s.held.polling {
		s.held.polling = true
		go s.pollHeld()
	}
	return true
}

// pollHeld delivers the held messages whose sender the filter now admits
// and expires the rest after the grace; it ends when none are left.
func (s *System) pollHeld() {
	t := time.NewTicker(heldPoll)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
		if !s.releaseHeld(time.Now()) {
			return
		}
	}
}

// releaseHeld makes one pass over the held messages and reports whether
// any remain (polling goes on).
func (s *System) releaseHeld(now time.Time) bool {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	admitted := map[string]bool{}
	blocked := map[heldPair]bool{} // an earlier message between the two still held
	kept := s.held.msgs[:0]
	for _, m := range s.held.msgs {
		from := m.env.From
		ok, seen := admitted[from]
		if !seen {
			ok = s.allowed(from)
			admitted[from] = ok
		}
		k := heldPair{from, m.to.Id}
		_, alive := s.as.ProcessRegistry.GetLocal(m.to.Id)
		switch {
		case !alive:
			s.held.n.Add(-1)
			s.refuseHeld(m, "the actor stopped while it was held")
		case ok && !blocked[k]:
			// Back through the actor's mailbox, as it first came; the
			// sender kept, so a call's reply finds its caller.
			if s.held.inFlight == nil {
				s.held.inFlight = map[heldPair]int{}
			}
			s.held.inFlight[k]++
			r := &heldRelease{a: m.a}
			if m.sender != nil {
				s.as.Root.RequestWithCustomSender(m.to, r, m.sender)
			} else {
				s.as.Root.Send(m.to, r)
			}
		case now.After(m.until):
			s.held.n.Add(-1)
			s.refuseHeld(m, fmt.Sprintf("held %v", s.cfg.PeerGrace))
		default:
			blocked[k] = true
			kept = append(kept, m)
		}
	}
	for i := len(kept); i < len(s.held.msgs); i++ {
		s.held.msgs[i] = heldMsg{}
	}
	s.held.msgs = kept
	if len(kept) == 0 {
		s.held.polling = false
		return false
	}
	return true
}

// refuseHeld drops a message from a sender that never became a member and
// answers a call with an error, so its caller does not wait forever.
func (s *System) refuseHeld(m heldMsg, why string) {
	s.stats.dropped.Add(1)
	s.warn.Warn(s.log, "dropping message from a non-member", "actor", m.actor, "from", m.env.From, "why", why)
	if m.env.Kind != kindCall || m.sender == nil {
		return
	}
	out := &wireEnvelope{Kind: kindReply, Call: m.env.Call, From: s.addr,
		Err: fmt.Sprintf("node %s (actor %s) does not know the sending node %s as a cluster member (%s)", s.addr, m.actor, m.env.From, why)}
	if a, err := marshalEnvelope(out); err == nil {
		s.as.Root.Send(m.sender, a)
	}
}
