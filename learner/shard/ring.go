package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// ring runs one rank's collectives over a Transport. A buffer of n floats
// is cut into buckets of bucket elements; each bucket into Size chunks,
// chunk i being [i·m/Size, (i+1)·m/Size) of an m-element bucket. After a
// reduce-scatter rank r holds the sum of chunk r of every bucket (the
// slice it owns); an all-gather spreads every owner's chunks to all ranks.
// Each chunk goes once around the ring, so a rank sends and receives
// 2·(Size−1)/Size of the buffer per all-reduce, whatever Size is; up to
// inFlight buckets are on the wire at once.
type ring struct {
	t        Transport
	bucket   int
	inFlight int
	// afterSend, when set, runs after every send (tests kill a rank
	// mid-collective here).
	afterSend func(tag Tag)
	// shm, when set, holds the ranks' shared buffers (shared.go): the
	// buckets of this rank's buffer there are reduced through them.
	shm *shmGroup
	// notShared says why the ranks reduce through the Transport after
	// setupShared (the same on every rank; empty when they share buffers),
	// noViews why ranks that share buffers read no views.
	notShared, noViews string
}

// sent runs afterSend.
func (g *ring) sent(tag Tag) {
	if g.afterSend != nil {
		g.afterSend(tag)
	}
}

func chunk(m, parts, i int) (lo, hi int) { return i * m / parts, (i + 1) * m / parts }

func mod(a, n int) int { return ((a % n) + n) % n }

// owned lists the element ranges of an n-element buffer that rank owns.
func (g *ring) owned(n, rank int) [][2]int {
	var out [][2]int
	size := g.t.Size()
	for b := 0; b < n; b += g.bucket {
		m := min(g.bucket, n-b)
		lo, hi := chunk(m, size, rank)
		if hi > lo {
			out = append(out, [2]int{b + lo, b + hi})
		}
	}
	return out
}

// bytesOf views x's memory as bytes (little-endian on every platform Go
// runs rlnode on: amd64, arm64).
func bytesOf(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// floatsOf views p (4-byte aligned, as every buffer a lender hands out
// is) as float32s.
func floatsOf(p []byte) []float32 {
	if len(p) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&p[0])), len(p)/4)
}

// lender is a Transport that can lend a received payload instead of
// copying it into the caller's buffer: the reduce-scatter sums from it.
type lender interface {
	// recvLend is Recv without the copy: p is what from sent under tag
	// (n bytes, else an error), valid until release is called.
	recvLend(ctx context.Context, from int, tag Tag, n int) (p []byte, release func(), err error)
}

func bytesOf64(x []float64) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 8*len(x))
}

// forBuckets runs f on every bucket of an n-element buffer, inFlight at a
// time, and returns the first error (no new bucket starts after one).
func (g *ring) forBuckets(n int, f func(b uint32, lo, hi int) error) error {
	sem := make(chan struct{}, max(1, g.inFlight))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	failed := func() bool { mu.Lock(); defer mu.Unlock(); return first != nil }
	for b, lo := uint32(0), 0; lo < n && !failed(); b, lo = b+1, lo+g.bucket {
		hi := min(lo+g.bucket, n)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(b, lo, hi); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func (g *ring) send(ctx context.Context, to int, tag Tag, p []byte) error {
	if err := g.t.Send(ctx, to, tag, p); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			// A push waits for the receiver to take the bytes.
			return fmt.Errorf("%s took nothing of %s within the collective timeout (dead or stuck?): %w", g.t.Peer(to), tag, err)
		}
		return fmt.Errorf("send %s to %s: %w", tag, g.t.Peer(to), err)
	}
	g.sent(tag)
	return nil
}

// reduceScatter sums x across the ranks into the chunks each rank owns;
// the other chunks of x are left partly summed.
func (g *ring) reduceScatter(ctx context.Context, epoch, op uint64, x []float32) error {
	if g.t.Size() == 1 {
		return nil
	}
	return g.forBuckets(len(x), func(b uint32, lo, hi int) error {
		return g.reduceScatterBucket(ctx, epoch, op, b, x[lo:hi])
	})
}

// reduceScatterBucket is reduceScatter of bucket b, whose elements are seg.
func (g *ring) reduceScatterBucket(ctx context.Context, epoch, op uint64, b uint32, seg []float32) error {
	if g.shm != nil {
		if off, ok := g.shm.span(b, seg); ok {
			return g.shm.reduceScatter(ctx, g, Tag{Epoch: epoch, Op: op, Bucket: b}, off, len(seg))
		}
	}
	size, r := g.t.Size(), g.t.Rank()
	right, left := mod(r+1, size), mod(r-1, size)
	m := len(seg)
	lender, _ := g.t.(lender)
	var tmp []float32
	for s := 0; s < size-1; s++ {
		tag := Tag{Epoch: epoch, Op: op, Bucket: b, Step: uint32(s)}
		slo, shi := chunk(m, size, mod(r-s-1, size))
		if err := g.send(ctx, right, tag, bytesOf(seg[slo:shi])); err != nil {
			return err
		}
		rlo, rhi := chunk(m, size, mod(r-s-2, size))
		dst := seg[rlo:rhi]
		if lender != nil {
			// Sum straight from the received bytes.
			p, release, err := lender.recvLend(ctx, left, tag, 4*len(dst))
			if err != nil {
				return fmt.Errorf("reduce-scatter: %w", err)
			}
			addTo(dst, floatsOf(p))
			release()
			continue
		}
		if cap(tmp) < rhi-rlo {
			tmp = make([]float32, rhi-rlo)
		}
		tmp = tmp[:rhi-rlo]
		if err := g.t.Recv(ctx, left, tag, bytesOf(tmp)); err != nil {
			return fmt.Errorf("reduce-scatter: %w", err)
		}
		addTo(dst, tmp)
	}
	return nil
}

// allGather copies every rank's owned chunks of x to all ranks.
func (g *ring) allGather(ctx context.Context, epoch, op uint64, x []float32) error {
	if g.t.Size() == 1 {
		return nil
	}
	return g.forBuckets(len(x), func(b uint32, lo, hi int) error {
		return g.allGatherBucket(ctx, epoch, op, b, x[lo:hi])
	})
}

// allGatherBucket is allGather of bucket b, whose elements are seg.
func (g *ring) allGatherBucket(ctx context.Context, epoch, op uint64, b uint32, seg []float32) error {
	if g.shm != nil {
		if off, ok := g.shm.span(b, seg); ok {
			return g.shm.allGather(ctx, g, Tag{Epoch: epoch, Op: op, Bucket: b}, off, len(seg))
		}
	}
	size, r := g.t.Size(), g.t.Rank()
	right, left := mod(r+1, size), mod(r-1, size)
	m := len(seg)
	for s := 0; s < size-1; s++ {
		tag := Tag{Epoch: epoch, Op: op, Bucket: b, Step: uint32(s)}
		slo, shi := chunk(m, size, mod(r-s, size))
		if err := g.send(ctx, right, tag, bytesOf(seg[slo:shi])); err != nil {
			return err
		}
		rlo, rhi := chunk(m, size, mod(r-s-1, size))
		if err := g.t.Recv(ctx, left, tag, bytesOf(seg[rlo:rhi])); err != nil {
			return fmt.Errorf("all-gather: %w", err)
		}
	}
	return nil
}

// viewing says whether the ranks read results through views of their
// shared buffers (view.go): then allReduceBucketToView and
// allGatherToView leave their results there, not in the caller's buffer.
func (g *ring) viewing() bool { return g.shm != nil && g.shm.view != nil }

// allReduceBucketToView is allReduceBucket whose result every rank reads
// in g.shm.view (g.viewing() must hold, and seg be bucket b of the shared
// buffer).
func (g *ring) allReduceBucketToView(ctx context.Context, epoch, op uint64, b uint32, seg []float32) error {
	off, ok := g.shm.span(b, seg)
	if !ok {
		return fmt.Errorf("bucket %d (%d elements) does not lie in the shared buffer", b, len(seg))
	}
	return g.shm.reduceToView(ctx, g, Tag{Epoch: epoch, Op: op, Bucket: b}, off, len(seg))
}

// allGatherToView is allGather whose result every rank reads in
// g.shm.view (g.viewing() must hold, and x be the shared buffer).
func (g *ring) allGatherToView(ctx context.Context, epoch, op uint64, x []float32) error {
	return g.forBuckets(len(x), func(b uint32, lo, hi int) error {
		off, ok := g.shm.span(b, x[lo:hi])
		if !ok {
			return fmt.Errorf("bucket %d (%d elements) does not lie in the shared buffer", b, hi-lo)
		}
		return g.shm.gatherToView(ctx, g, Tag{Epoch: epoch, Op: op, Bucket: b}, off, hi-lo)
	})
}

// allReduce sums x across the ranks: reduce-scatter, then all-gather
// (two collective numbers, op and op+1). Every rank ends with the same
// bits, since each chunk is summed once, by its owner's ring order.
func (g *ring) allReduce(ctx context.Context, epoch, op uint64, x []float32) error {
	if g.t.Size() == 1 {
		return nil
	}
	if g.shm != nil {
		return g.forBuckets(len(x), func(b uint32, lo, hi int) error {
			return g.allReduceBucket(ctx, epoch, op, b, x[lo:hi])
		})
	}
	if err := g.reduceScatter(ctx, epoch, op, x); err != nil {
		return err
	}
	return g.allGather(ctx, epoch, op+1, x)
}

// allReduceBucket is allReduce of bucket b, whose elements are seg (two
// collective numbers, op and op+1; on shared buffers one pass, under op).
func (g *ring) allReduceBucket(ctx context.Context, epoch, op uint64, b uint32, seg []float32) error {
	if g.shm != nil {
		if off, ok := g.shm.span(b, seg); ok {
			return g.shm.allReduce(ctx, g, Tag{Epoch: epoch, Op: op, Bucket: b}, off, len(seg))
		}
	}
	if err := g.reduceScatterBucket(ctx, epoch, op, b, seg); err != nil {
		return err
	}
	return g.allGatherBucket(ctx, epoch, op+1, b, seg)
}

// gather64 returns every rank's v (all of one length), by rank, passing
// each vector once around the ring.
func (g *ring) gather64(ctx context.Context, epoch, op uint64, v []float64) ([][]float64, error) {
	size, r := g.t.Size(), g.t.Rank()
	all := make([][]float64, size)
	all[r] = append([]float64(nil), v...)
	right, left := mod(r+1, size), mod(r-1, size)
	for s := 0; s < size-1; s++ {
		tag := Tag{Epoch: epoch, Op: op, Step: uint32(s)}
		if err := g.send(ctx, right, tag, bytesOf64(all[mod(r-s, size)])); err != nil {
			return nil, err
		}
		from := mod(r-s-1, size)
		all[from] = make([]float64, len(v))
		if err := g.t.Recv(ctx, left, tag, bytesOf64(all[from])); err != nil {
			return nil, fmt.Errorf("gather: %w", err)
		}
	}
	return all, nil
}

// sum64 adds v across the ranks in place, in rank order, so every rank gets
// the same bits.
func (g *ring) sum64(ctx context.Context, epoch, op uint64, v []float64) error {
	all, err := g.gather64(ctx, epoch, op, v)
	if err != nil {
		return err
	}
	clear(v)
	for _, w := range all {
		for i := range v {
			v[i] += w[i]
		}
	}
	return nil
}
