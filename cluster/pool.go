package cluster

import (
	"context"
	"errors"
	"sync/atomic"
)

// Pool spreads calls over replica actors, each call to the replica with the
// fewest calls outstanding (ties to the earliest replica).
type Pool struct {
	replicas []*Handle
	inflight []atomic.Int64
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
	best := 0
	for i := 1; i < len(p.replicas); i++ {
		if p.inflight[i].Load() < p.inflight[best].Load() {
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
