package cluster

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/rlnode/rlnode/actor"
)

// Pool spreads calls over replica actors, each call to the replica with the
// fewest calls outstanding, ties taken in turn (round-robin): light traffic,
// which finds every replica idle, is spread over all of them rather than all
// sent to the first.
type Pool struct {
	replicas []*Handle
	inflight []atomic.Int64
	next     atomic.Uint64 // where the next call's search starts
}

// NewPool makes a pool over the given handles.
func NewPool(replicas ...*Handle) (*Pool, error) {
	if len(replicas) == 0 {
		return nil, errors.New("pool: no replicas")
	}
	for i, h := range replicas {
		if h == nil {
			return nil, fmt.Errorf("pool: replica %d of %d is a nil handle", i, len(replicas))
		}
	}
	return &Pool{replicas: replicas, inflight: make([]atomic.Int64, len(replicas))}, nil
}

// Size is the number of replicas.
func (p *Pool) Size() int { return len(p.replicas) }

// Call sends msg to the least-busy replica and waits for its reply.
func (p *Pool) Call(ctx context.Context, msg any) (any, error) {
	return p.callOn(ctx, p.choose(func(int) bool { return true }), msg)
}

// choose is the replica, of those open says may take a call, with the
// fewest calls outstanding, the search starting in turn; -1 when none may.
func (p *Pool) choose(open func(i int) bool) int {
	n := len(p.replicas)
	start := int((p.next.Add(1) - 1) % uint64(n))
	best := -1
	for k := range n {
		i := (start + k) % n
		if open(i) && (best < 0 || p.inflight[i].Load() < p.inflight[best].Load()) {
			best = i
		}
	}
	return best
}

func (p *Pool) callOn(ctx context.Context, i int, msg any) (any, error) {
	p.inflight[i].Add(1)
	defer p.inflight[i].Add(-1)
	return p.replicas[i].Call(ctx, msg)
}

// Outstanding reports each replica's in-flight call count.
func (p *Pool) Outstanding() []int64 {
	out := make([]int64, len(p.replicas))
	for i := range out {
		out[i] = p.inflight[i].Load()
	}
	return out
}

// Mapped is one message's outcome in Map: its index in the messages, and
// the reply or the error of its call.
type Mapped[R any] struct {
	Index int
	Reply R
	Err   error
}

// Map calls p's replicas with msgs, at most perReplica of its calls
// outstanding on any one replica, and yields each reply as it comes, as
// Ray's ActorPool.map_unordered: a message is sent only once a replica has
// room, so a replica that is slow (long generations) takes fewer and ctx's
// end or a break out of the loop leaves the messages not yet sent unsent.
// Each message is yielded once, with its index: its reply or its call's
// error (an actor's own error as *actor.ActorError; none is retried), or
// ctx's error if it was never sent. A replica found dead (stopped, or out
// of restarts) takes no more of the messages; once none is left, those
// unsent fail naming why. Bad arguments (perReplica outside 1 to
// actor.ConcurrencyLimit) fail every message with the reason. Breaking out
// of the loop cancels the calls in flight and waits for them to return.
func Map[R, M any](ctx context.Context, p *Pool, msgs []M, perReplica int) iter.Seq[Mapped[R]] {
	return func(yield func(Mapped[R]) bool) {
		failAll := func(from int, err error) {
			for i := from; i < len(msgs); i++ {
				if !yield(Mapped[R]{Index: i, Err: err}) {
					return
				}
			}
		}
		switch {
		case p == nil:
			failAll(0, errors.New("pool map: nil pool"))
			return
		case perReplica < 1 || perReplica > actor.ConcurrencyLimit:
			failAll(0, fmt.Errorf("pool map: %d calls per replica: want 1 to %d", perReplica, actor.ConcurrencyLimit))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		type result struct {
			index, replica int
			reply          any
			err            error
		}
		// Room for every call that can be outstanding, so a call returning
		// after the loop broke never blocks.
		done := make(chan result, min(len(msgs), len(p.replicas)*perReplica))
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()
		own := make([]int, len(p.replicas))    // this map's calls outstanding per replica
		dead := make([]error, len(p.replicas)) // why a replica takes no more
		open := func(i int) bool { return dead[i] == nil && own[i] < perReplica }
		next, outstanding := 0, 0
		for next < len(msgs) || outstanding > 0 {
			for next < len(msgs) && ctx.Err() == nil {
				r := p.choose(open)
				if r < 0 {
					break
				}
				own[r]++
				outstanding++
				i, msg := next, msgs[next]
				next++
				wg.Go(func() {
					reply, err := p.callOn(ctx, r, msg)
					done <- result{index: i, replica: r, reply: reply, err: err}
				})
			}
			if outstanding == 0 {
				// Nothing in flight and nothing may be sent: ctx ended, or
				// every replica is dead.
				err := ctx.Err()
				if err == nil {
					err = fmt.Errorf("pool map: no live replica left: %w", errors.Join(dead...))
				}
				failAll(next, err)
				return
			}
			res := <-done
			outstanding--
			own[res.replica]--
			if errors.Is(res.err, actor.ErrActorDied) || errors.Is(res.err, actor.ErrActorNotFound) {
				dead[res.replica] = res.err
			}
			out := Mapped[R]{Index: res.index, Err: res.err}
			if res.err == nil {
				var ok bool
				if out.Reply, ok = res.reply.(R); !ok {
					out.Err = fmt.Errorf("call %s: reply is %T, want %T", p.replicas[res.replica].Name(), res.reply, out.Reply)
				}
			}
			if !yield(out) {
				return
			}
		}
	}
}
