package cluster

import (
	"context"
	"errors"
	"sync/atomic"
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
	return &Pool{replicas: replicas, inflight: make([]atomic.Int64, len(replicas))}, nil
}

// Size is the number of replicas.
func (p *Pool) Size() int { return len(p.replicas) }

// Call sends msg to the least-busy replica and waits for its reply.
func (p *Pool) Call(ctx context.Context, msg any) (any, error) {
	n := len(p.replicas)
	best := int((p.next.Add(1) - 1) % uint64(n))
	for k := 1; k < n; k++ {
		if i := (best + k) % n; p.inflight[i].Load() < p.inflight[best].Load() {
			best = i
		}
	}
	p.inflight[best].Add(1)
	defer p.inflight[best].Add(-1)
	return p.replicas[best].Call(ctx, msg)
}

// Outstanding reports each replica's in-flight call count.
func (p *Pool) Outstanding() []int64 {
	out := make([]int64, len(p.replicas))
	for i := range out {
		out[i] = p.inflight[i].Load()
	}
	return out
}
