package shard

import (
	"context"
	"fmt"
	"sync"

	"github.com/rlnode/rlnode/learner/optim"
)

// overlap is one step's gradient reduction, begun bucket by bucket while
// the backward pass still runs. The flat buffer is laid out in
// gradient-ready order (learner.GradGroups: last layer first), so buckets
// become ready in index order; the learner's goroutine copies each final
// gradient into flat and tells the dispatcher how many leading buckets
// are complete, and the dispatcher starts their collectives, in bucket
// order and InFlight at a time, as the whole-buffer collectives do, so
// every rank runs the same buckets in the same order and none waits on a
// bucket its peer has no slot for.
type overlap struct {
	ctx    context.Context // cancelled by drop or by a bucket's error
	cancel context.CancelFunc
	ready  chan int      // buckets ready so far (latest value wins)
	done   chan struct{} // closed once the dispatcher and its buckets have returned
	copied []bool        // by tensor: gradient copied into flat
	prefix int           // layout positions [0, prefix) are copied
	elems  int           // elements in those positions
	sent   int           // last count sent on ready

	mu  sync.Mutex
	err error // first bucket error; read after done
}

func (o *overlap) setErr(err error) {
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	o.mu.Unlock()
	o.cancel()
}

func (o *overlap) failed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err != nil
}

// signal tells the dispatcher that buckets [0, n) are ready. Only the
// learner's goroutine sends, so after draining a full channel the send
// cannot block.
func (o *overlap) signal(n int) {
	if n <= o.sent {
		return
	}
	o.sent = n
	select {
	case <-o.ready:
	default:
	}
	o.ready <- n
}

func (r *Rank) buckets() int { return (r.total + r.opt.BucketElems - 1) / r.opt.BucketElems }

// gradsReady is learner.Sharding.GradsReady: it copies the gradients just
// made final into flat and starts every bucket they complete.
func (r *Rank) gradsReady(_ int, params []*optim.Param, ready []int) {
	if r.failed != nil || len(params) != len(r.names) {
		return // update reports it
	}
	o := r.pending
	if o == nil {
		o = r.begin()
	}
	if o.failed() {
		return // flat may still be read by the other ranks; update reports it
	}
	for _, i := range ready {
		if i >= 0 && i < len(o.copied) && !o.copied[i] {
			copy(r.flat[r.offs[i]:r.offs[i]+r.sizes[i]], params[i].Grad)
			o.copied[i] = true
		}
	}
	for o.prefix < len(r.order) && o.copied[r.order[o.prefix]] {
		o.elems += r.sizes[r.order[o.prefix]]
		o.prefix++
	}
	n := o.elems / r.opt.BucketElems
	if o.elems == r.total {
		n = r.buckets()
	}
	o.signal(n)
}

// begin starts a step's gradient reduction: it takes the collective
// numbers (in the same sequence on every rank, whether the hook or update
// begins it) and the dispatcher goroutine.
func (r *Rank) begin() *overlap {
	if r.pending != nil {
		// Only a step that failed without telling Abort leaves one; its
		// collective numbers are spent on this rank alone.
		r.drop()
		_ = r.fail(fmt.Errorf("gradient reduction of an earlier step left unfinished"))
	}
	ops := uint64(1)
	if r.stage == 0 {
		ops = 2
	}
	op := r.nextOp(ops)
	r.reduceOp = op
	ctx, cancel := context.WithCancel(context.Background())
	o := &overlap{ctx: ctx, cancel: cancel, ready: make(chan int, 1), done: make(chan struct{}), copied: make([]bool, len(r.names))}
	r.pending = o
	if err := r.awaitReaders(); err != nil {
		// Nothing may be written into flat: the step fails.
		o.setErr(err)
	}
	go r.dispatch(o, op)
	return o
}

// dispatch runs the buckets' collectives as they become ready. Each
// bucket is bounded by Options.Timeout from its start; waiting for the
// next bucket to be ready is bounded by the step (finish signals every
// bucket, drop cancels).
func (r *Rank) dispatch(o *overlap, op uint64) {
	defer close(o.done)
	nb, size := r.buckets(), r.opt.BucketElems
	sem := make(chan struct{}, max(1, r.ring.inFlight))
	var wg sync.WaitGroup
	defer wg.Wait()
	avail := 0
	for b := 0; b < nb; b++ {
		for avail <= b {
			select {
			case n := <-o.ready:
				avail = max(avail, n)
			case <-o.ctx.Done():
				return
			}
		}
		select {
		case sem <- struct{}{}:
		case <-o.ctx.Done():
			return
		}
		if o.failed() {
			<-sem
			return
		}
		seg := r.flat[b*size : min((b+1)*size, r.total)]
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(o.ctx, r.opt.Timeout)
			defer cancel()
			var err error
			if r.stage == 0 && r.ring.viewing() {
				err = r.ring.allReduceBucketToView(ctx, r.epoch, op, uint32(b), seg)
			} else if r.stage == 0 {
				err = r.ring.allReduceBucket(ctx, r.epoch, op, uint32(b), seg)
			} else {
				err = r.ring.reduceScatterBucket(ctx, r.epoch, op, uint32(b), seg)
			}
			if err != nil {
				o.setErr(err)
			}
		}()
	}
}

// finish completes the step's reduction: gradients the hook did not
// deliver (none arrive when the learner has no hook) are copied now, every
// remaining bucket starts, and it waits for all of them.
func (r *Rank) finish(params []*optim.Param) error {
	o := r.pending
	if o == nil {
		o = r.begin()
	}
	for i, p := range params {
		if !o.copied[i] && !o.failed() {
			copy(r.flat[r.offs[i]:r.offs[i]+r.sizes[i]], p.Grad)
			o.copied[i] = true
		}
	}
	o.signal(r.buckets())
	<-o.done // bounded: every bucket has its timeout
	o.cancel()
	r.pending = nil
	return o.err
}

// drop abandons the step's reduction, if any, and waits for its
// goroutines: none outlives the step.
func (r *Rank) drop() {
	o := r.pending
	if o == nil {
		return
	}
	o.cancel()
	<-o.done
	r.pending = nil
}
