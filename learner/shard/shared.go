package shard

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"
)

// Shared buffers: ranks on one host keep the buffer being reduced in a
// segment of shared memory that every other rank maps, so a collective
// reads its peers' chunks where they lie. In a reduce-scatter the owner of
// chunk c sums every rank's chunk c straight out of their segments into
// its own (one read of each, no copy in between), in the ring's order, so
// the bits are the ring's; in an all-gather each rank copies every other
// owner's chunk out of the owner's segment once; in an all-reduce the
// owner writes the sum into every rank's chunk c as it goes. Ranks
// signal each other with words in their own segment's header, one cache
// line per bucket (ready: this rank's bucket is in place; reduced: its
// chunk of the bucket is final; gathered: it has copied every chunk),
// waiting on them with a short spin, then futex sleeps that wake every
// sharedPoll to check the deadline, an abort and whether the peer's
// process still lives. A collective returns only once no peer reads this
// rank's segment for it any more, so the caller may write it again.
//
// Segments are memfds (no name, nothing in /dev/shm), 0600, sealed
// against resizing, with a random token in their header; a rank offers
// its own (process, descriptor, token) over the Transport (so only
// members learn of it), peers open it through /proc/<pid>/fd/<fd> (which
// the kernel allows only to processes that may read the owner's memory
// anyway: same user, ptrace read access) and check the token, size and
// seals, and the owner closes its descriptor once every peer has mapped
// it: from then on only mappings hold the segment, and the kernel frees
// it when the last process mapping it is gone, killed or not.

const (
	sharedRecord    = 128
	sharedOfferOp   = 1 << 62 // collective numbers of the set-up, apart from the ring's
	sharedConfirmOp = sharedOfferOp + 1
	sharedHostLen   = 48
	sharedVoteLen   = 512 // yes, yes without views (and why), or no and why (cut)
	sharedLine      = 64
	sharedHdr       = 4096
	sharedMagic     = "RLSG"
	// sharedSpin is how long a waiter watches a word before sleeping: a
	// peer on another core is usually that close behind, and a futex
	// sleep and wake-up costs about as much; on a machine with fewer cores
	// than ranks, longer spins take the core the peer needs.
	sharedSpin = 20 * time.Microsecond
	// sharedPoll is how long a waiter sleeps at most before checking the
	// deadline, an abort and its peer's process.
	sharedPoll = 10 * time.Millisecond
)

// Words of a bucket's line in a segment's header.
const (
	wordReady    = 0
	wordReduced  = 1
	wordGathered = 2
)

// sharer is a Transport whose ranks may share buffers.
type sharer interface {
	// sharedMemory says whether this rank may offer and map segments
	// (false: the same-host path is switched off).
	sharedMemory() bool
	// abortCause is the cause once another rank has aborted epoch, else
	// nil. It does not wait.
	abortCause(epoch uint64) error
}

// offer is what a rank tells the others of its segment.
type offer struct {
	ok       bool
	host     string
	pid, fd  uint32
	token    [16]byte
	pidNS    uint64
	floats   uint64
	bucket   uint64
	segBytes uint64
}

func (o offer) encode() []byte {
	p := make([]byte, sharedRecord)
	if !o.ok || len(o.host) > sharedHostLen {
		return p
	}
	p[0] = 1
	p[1] = byte(len(o.host))
	copy(p[2:2+sharedHostLen], o.host)
	q := p[2+sharedHostLen:]
	binary.BigEndian.PutUint32(q[0:], o.pid)
	binary.BigEndian.PutUint32(q[4:], o.fd)
	copy(q[8:24], o.token[:])
	binary.BigEndian.PutUint64(q[24:], o.pidNS)
	binary.BigEndian.PutUint64(q[32:], o.floats)
	binary.BigEndian.PutUint64(q[40:], o.bucket)
	binary.BigEndian.PutUint64(q[48:], o.segBytes)
	return p
}

func decodeOffer(p []byte) offer {
	if len(p) != sharedRecord || p[0] != 1 || int(p[1]) > sharedHostLen {
		return offer{}
	}
	o := offer{ok: true, host: string(p[2 : 2+int(p[1])])}
	q := p[2+sharedHostLen:]
	o.pid, o.fd = binary.BigEndian.Uint32(q[0:]), binary.BigEndian.Uint32(q[4:])
	copy(o.token[:], q[8:24])
	o.pidNS = binary.BigEndian.Uint64(q[24:])
	o.floats, o.bucket = binary.BigEndian.Uint64(q[32:]), binary.BigEndian.Uint64(q[40:])
	o.segBytes = binary.BigEndian.Uint64(q[48:])
	return o
}

// sharedLayout is where things lie in a segment of floats elements cut in
// buckets of bucket elements.
// The data starts on a page of the system's size (ranks on one host agree
// on it), so that views can map the owners' pages.
func sharedLayout(floats, bucket int) (slots, dataOff, size int) {
	slots = (floats + bucket - 1) / bucket
	pg := max(os.Getpagesize(), 4096)
	dataOff = (sharedHdr + slots*sharedLine + pg - 1) &^ (pg - 1)
	return slots, dataOff, dataOff + 4*floats
}

// shmGroup is one rank's side of the group's shared buffers.
type shmGroup struct {
	rank, size     int
	bucket, floats int
	slots          int
	bufs           [][]float32      // by rank: the data; this rank's is writable
	words          []unsafe.Pointer // by rank: the first bucket's line
	procs          []peerProc       // by rank: whether its process lives
	sh             sharer
	peer           func(int) string
	unmap          func()
	// view, when set, is where this rank reads results in place (view.go).
	view *view
}

// gatherBytes returns every rank's p (all of one length), by rank, passing
// each once around the ring.
func (g *ring) gatherBytes(ctx context.Context, epoch, op uint64, p []byte) ([][]byte, error) {
	size, r := g.t.Size(), g.t.Rank()
	all := make([][]byte, size)
	all[r] = append([]byte(nil), p...)
	right, left := mod(r+1, size), mod(r-1, size)
	for s := 0; s < size-1; s++ {
		tag := Tag{Epoch: epoch, Op: op, Step: uint32(s)}
		if err := g.t.Send(ctx, right, tag, all[mod(r-s, size)]); err != nil {
			return nil, fmt.Errorf("send %s to %s: %w", tag, g.t.Peer(right), err)
		}
		from := mod(r-s-1, size)
		all[from] = make([]byte, len(p))
		if err := g.t.Recv(ctx, left, tag, all[from]); err != nil {
			return nil, fmt.Errorf("gather: %w", err)
		}
	}
	return all, nil
}

// setupShared lets the ranks of g share buffers of floats elements, cut in
// buckets of g.bucket: every rank offers a segment, maps the others' and
// says whether it could. Every rank comes to the same answer: shared
// buffers when all could (g.shm is set, and the own buffer returned),
// else none (nil: the ring's chunks go through the Transport). An error
// means a rank could not be reached.
func (g *ring) setupShared(ctx context.Context, epoch uint64, floats int) ([]float32, error) {
	sh, _ := g.t.(sharer)
	size := g.t.Size()
	if size < 2 {
		return nil, nil
	}
	var seg *segment
	var mine offer
	why := "" // this rank's reason not to share
	switch {
	case sh == nil || !sh.sharedMemory():
		why = g.t.Peer(g.t.Rank()) + ": its node's same-host path is off"
	case floats <= 0 || g.bucket <= 0:
		why = g.t.Peer(g.t.Rank()) + ": nothing to share"
	default:
		var err error
		if seg, err = newSharedSegment(floats, g.bucket); err == nil {
			mine = seg.offer
		} else {
			why = fmt.Sprintf("%s: %v", g.t.Peer(g.t.Rank()), err)
		}
	}
	defer func() {
		if seg != nil {
			seg.closeFD()
		}
	}()
	recs, err := g.gatherBytes(ctx, epoch, sharedOfferOp, mine.encode())
	if err != nil {
		seg.release()
		return nil, fmt.Errorf("shared buffers: %w", err)
	}
	s := &shmGroup{rank: g.t.Rank(), size: size, bucket: g.bucket, floats: floats, sh: sh, peer: g.t.Peer,
		bufs: make([][]float32, size), words: make([]unsafe.Pointer, size), procs: make([]peerProc, size)}
	var maps []*mapping
	s.unmap = func() {
		for _, m := range maps {
			m.close()
		}
		for _, p := range s.procs {
			p.close()
		}
	}
	ok := mine.ok
	for k, p := range recs {
		if !ok {
			break
		}
		o := decodeOffer(p)
		switch {
		case !o.ok:
			// That rank's own vote says why.
			ok = false
		case o.host != mine.host:
			why, ok = g.t.Peer(k)+" is on another host", false
		case o.floats != mine.floats || o.bucket != mine.bucket || o.segBytes != mine.segBytes:
			why, ok = g.t.Peer(k)+" offered a segment of another layout", false
		}
		if !ok {
			break
		}
		if k == s.rank {
			continue
		}
		m, err := mapPeerSegment(o)
		if err != nil {
			why = fmt.Sprintf("%s: mapping %s's segment: %v", g.t.Peer(s.rank), g.t.Peer(k), err)
			ok = false
			break
		}
		maps = append(maps, m)
		s.procs[k] = watchProcess(o, mine)
	}
	if ok {
		// The view is part of what every rank must have: a rank that reads
		// results through one and a rank that expects them written into its
		// buffer cannot share a collective.
		s.bufs[s.rank] = seg.mapping.data
		for k, mi := 0, 0; k < size; k++ {
			if k != s.rank {
				s.bufs[k] = maps[mi].data
				mi++
			}
		}
		v, err := testNewView(s, floats)
		if err != nil {
			why = fmt.Sprintf("%s: %v", g.t.Peer(s.rank), err)
		}
		s.view = v
	}
	// The vote carries each rank's reason, so that every rank says the
	// same of the group: 1 shares buffers and reads results through a view,
	// 2 shares buffers without a view (why: the view's failure), 0 does not
	// share (why).
	var vote [sharedVoteLen]byte
	switch {
	case ok && s.view != nil:
		vote[0] = 1
	case ok:
		vote[0] = 2
		copy(vote[1:], why)
	default:
		copy(vote[1:], why)
	}
	votes, err := g.gatherBytes(ctx, epoch, sharedConfirmOp, vote[:])
	if err != nil {
		s.view.close()
		s.unmap()
		seg.release()
		return nil, fmt.Errorf("shared buffers: %w", err)
	}
	g.notShared, g.noViews = "", ""
	reason := func(v []byte) string { return strings.ToValidUTF8(string(bytes.TrimRight(v[1:], "\x00")), "") }
	for _, v := range votes {
		switch {
		case len(v) != sharedVoteLen || v[0] == 0 || v[0] > 2:
			ok = false
			if g.notShared == "" && len(v) == sharedVoteLen { // the first reason given
				g.notShared = reason(v)
			}
		case v[0] == 2 && g.noViews == "":
			g.noViews = reason(v)
		}
	}
	if !ok && g.notShared == "" {
		g.notShared = "a rank could not share"
	}
	if ok && g.noViews != "" {
		// Shared buffers, but results written into every rank's buffer.
		s.view.close()
		s.view = nil
	}
	if !ok {
		s.view.close()
		s.unmap()
		seg.release()
		return nil, nil
	}
	// Every peer has mapped this rank's segment: the descriptor goes (the
	// deferred closeFD); the mappings keep it.
	maps = append(maps, seg.mapping)
	s.slots, _, _ = sharedLayout(floats, g.bucket)
	mi := 0
	for k := range size {
		m := seg.mapping
		if k != s.rank {
			m = maps[mi]
			mi++
		}
		s.bufs[k], s.words[k] = m.data, m.words
	}
	g.shm = s
	return s.bufs[s.rank], nil
}

// testNewView makes a rank's view at set-up (tests fail one here).
var testNewView = func(s *shmGroup, total int) (*view, error) { return s.newView(total) }

// close unmaps every segment; nothing may use the buffers after.
func (s *shmGroup) close() {
	if s != nil && s.view != nil {
		s.view.close()
		s.view = nil
	}
	if s != nil && s.unmap != nil {
		s.unmap()
		s.unmap = nil
	}
}

// span says where seg lies in this rank's buffer when it is bucket b of it
// (a decision every rank makes alike: it depends only on b, the offset
// and the length).
func (s *shmGroup) span(b uint32, seg []float32) (off int, ok bool) {
	own := s.bufs[s.rank]
	if len(seg) == 0 || len(own) == 0 || int(b) >= s.slots {
		return 0, false
	}
	d := uintptr(unsafe.Pointer(&seg[0])) - uintptr(unsafe.Pointer(&own[0]))
	if d%4 != 0 || d/4 > uintptr(len(own)) {
		return 0, false
	}
	off = int(d / 4)
	return off, off == int(b)*s.bucket && off+len(seg) <= len(own) && len(seg) <= s.bucket
}

func (s *shmGroup) word(k int, b uint32, w int) *uint32 {
	return (*uint32)(unsafe.Add(s.words[k], int(b)*sharedLine+4*w))
}

// seq is the word value that marks collective op done (0 is a fresh
// segment's).
func seq(op uint64) uint32 { return uint32(op) + 1 }

func reached(v, want uint32) bool { return int32(v-want) >= 0 }

func (s *shmGroup) publish(b uint32, w int, v uint32) {
	p := s.word(s.rank, b, w)
	atomic.StoreUint32(p, v)
	futexWake(p)
}

// await waits until word w of rank k's line for bucket b reaches want.
func (s *shmGroup) await(ctx context.Context, tag Tag, k int, w int, want uint32) error {
	p := s.word(k, tag.Bucket, w)
	if reached(atomic.LoadUint32(p), want) {
		return nil
	}
	start := time.Now()
	for i := 1; ; i++ {
		if reached(atomic.LoadUint32(p), want) {
			return nil
		}
		if i%64 == 0 {
			if time.Since(start) > sharedSpin {
				break
			}
			runtime.Gosched() // another bucket of this rank may have work
		}
	}
	for {
		v := atomic.LoadUint32(p)
		if reached(v, want) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			if errors.Is(err, context.DeadlineExceeded) && w == wordReleased && tag.Bucket == 0 {
				return fmt.Errorf("%s has not released its view of collective %d within the collective timeout (dead or stuck?): %w", s.peer(k), tag.Op, err)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("%s sent nothing for %s within the collective timeout (dead or stuck?): %w", s.peer(k), tag, err)
			}
			return fmt.Errorf("waiting for %s (%s): %w", s.peer(k), tag, err)
		}
		if s.sh != nil {
			if cause := s.sh.abortCause(tag.Epoch); cause != nil {
				return fmt.Errorf("waiting for %s (%s): %w: %v", s.peer(k), tag, ErrAborted, cause)
			}
		}
		if s.procs[k].gone() {
			return fmt.Errorf("%s died (its process %d exited) during %s", s.peer(k), s.procs[k].pid, tag)
		}
		wait := sharedPoll
		if dl, ok := ctx.Deadline(); ok {
			wait = max(time.Millisecond, min(wait, time.Until(dl)))
		}
		futexWait(p, v, wait)
	}
}

// reduceOwn sums chunk s.rank of bucket b (m elements at off) over every
// rank into this rank's buffer, in the ring's order: for chunk c the ring
// adds rank c+1's, then c+2's, …, then c's own, one IEEE addition at a
// time, so the result has the ring's bits.
func (s *shmGroup) reduceOwn(ctx context.Context, tag Tag, off, m int, want uint32) error {
	lo, hi := chunk(m, s.size, s.rank)
	srcs := make([][]float32, 0, s.size-1)
	for i := 1; i < s.size; i++ {
		k := mod(s.rank+i, s.size)
		if err := s.await(ctx, tag, k, wordReady, want); err != nil {
			return fmt.Errorf("reduce-scatter: %w", err)
		}
		srcs = append(srcs, s.bufs[k][off+lo:off+hi])
	}
	sumInto(s.bufs[s.rank][off+lo:off+hi], srcs)
	return nil
}

// sumBlock is how many floats sumInto adds through its scratch block at a
// time: small enough to stay in the first-level cache.
const sumBlock = 2048

// sumInto sets dst to ((srcs[0] + srcs[1]) + …) + dst, element by element.
func sumInto(dst []float32, srcs [][]float32) {
	switch len(srcs) {
	case 0:
		return
	case 1:
		addTo(dst, srcs[0])
		return
	}
	var tmp [sumBlock]float32
	for lo := 0; lo < len(dst); lo += sumBlock {
		hi := min(lo+sumBlock, len(dst))
		t := tmp[:hi-lo]
		copy(t, srcs[0][lo:hi])
		for _, src := range srcs[1:] {
			addTo(t, src[lo:hi])
		}
		addTo(dst[lo:hi], t)
	}
}

// reduceSpread is reduceOwn that also writes the sum into every other
// rank's buffer (the all-reduce's push: the owner has each element in hand
// once summed, so the copy costs one store where the peer's copy out
// would cost a read and a store).
func (s *shmGroup) reduceSpread(ctx context.Context, tag Tag, off, m int, want uint32) error {
	lo, hi := chunk(m, s.size, s.rank)
	srcs := make([][]float32, 0, s.size-1)
	for i := 1; i < s.size; i++ {
		k := mod(s.rank+i, s.size)
		if err := s.await(ctx, tag, k, wordReady, want); err != nil {
			return fmt.Errorf("all-reduce: %w", err)
		}
		srcs = append(srcs, s.bufs[k][off+lo:off+hi])
	}
	sumSpread(s.bufs[s.rank][off+lo:off+hi], srcs)
	return nil
}

// sumSpread is sumInto, then copies dst into every src, block by block
// (each block is still in the cache when it is copied).
func sumSpread(dst []float32, srcs [][]float32) {
	var tmp [sumBlock]float32
	for lo := 0; lo < len(dst); lo += sumBlock {
		hi := min(lo+sumBlock, len(dst))
		d := dst[lo:hi]
		if len(srcs) == 1 {
			addTo(d, srcs[0][lo:hi])
		} else if len(srcs) > 1 {
			t := tmp[:hi-lo]
			copy(t, srcs[0][lo:hi])
			for _, src := range srcs[1:] {
				addTo(t, src[lo:hi])
			}
			addTo(d, t)
		}
		for _, src := range srcs {
			copy(src[lo:hi], d)
		}
	}
}

// gatherOthers copies every other owner's final chunk of bucket b into
// this rank's buffer.
func (s *shmGroup) gatherOthers(ctx context.Context, tag Tag, off, m int, want uint32) error {
	own := s.bufs[s.rank]
	for i := 1; i < s.size; i++ {
		k := mod(s.rank+i, s.size)
		if err := s.await(ctx, tag, k, wordReduced, want); err != nil {
			return fmt.Errorf("all-gather: %w", err)
		}
		lo, hi := chunk(m, s.size, k)
		copy(own[off+lo:off+hi], s.bufs[k][off+lo:off+hi])
	}
	return nil
}

// awaitAll waits until every other rank's word w for tag's bucket reaches
// want.
func (s *shmGroup) awaitAll(ctx context.Context, tag Tag, w int, want uint32) error {
	for i := 1; i < s.size; i++ {
		if err := s.await(ctx, tag, mod(s.rank+i, s.size), w, want); err != nil {
			return err
		}
	}
	return nil
}

// reduceScatter is ring.reduceScatterBucket on shared buffers. It returns
// once every owner has read this rank's chunks.
func (s *shmGroup) reduceScatter(ctx context.Context, g *ring, tag Tag, off, m int) error {
	want := seq(tag.Op)
	s.publish(tag.Bucket, wordReady, want)
	g.sent(tag)
	if err := s.reduceOwn(ctx, tag, off, m, want); err != nil {
		return err
	}
	s.publish(tag.Bucket, wordReduced, want)
	if err := s.awaitAll(ctx, tag, wordReduced, want); err != nil {
		return fmt.Errorf("reduce-scatter: %w", err)
	}
	return nil
}

// allGather is ring.allGatherBucket on shared buffers. It returns once
// every rank has copied this rank's chunk.
func (s *shmGroup) allGather(ctx context.Context, g *ring, tag Tag, off, m int) error {
	want := seq(tag.Op)
	s.publish(tag.Bucket, wordReduced, want)
	g.sent(tag)
	if err := s.gatherOthers(ctx, tag, off, m, want); err != nil {
		return err
	}
	s.publish(tag.Bucket, wordGathered, want)
	if err := s.awaitAll(ctx, tag, wordGathered, want); err != nil {
		return fmt.Errorf("all-gather: %w", err)
	}
	return nil
}

// allReduce is reduceScatter and allGather in one (collective op alone):
// each owner sums its chunk and writes the sum into every rank's buffer
// (while a collective runs, chunk c of every buffer is its owner's
// alone), then waits until every owner has done so.
func (s *shmGroup) allReduce(ctx context.Context, g *ring, tag Tag, off, m int) error {
	want := seq(tag.Op)
	s.publish(tag.Bucket, wordReady, want)
	g.sent(tag)
	if err := s.reduceSpread(ctx, tag, off, m, want); err != nil {
		return err
	}
	s.publish(tag.Bucket, wordReduced, want)
	if err := s.awaitAll(ctx, tag, wordReduced, want); err != nil {
		return fmt.Errorf("all-reduce: %w", err)
	}
	return nil
}

// hostID is what a segment's offer says of its host (bytes.TrimSpace'd,
// at most sharedHostLen bytes; empty: unknown, never shared).
func hostID(id string) string {
	id = string(bytes.TrimSpace([]byte(id)))
	if len(id) > sharedHostLen {
		id = id[:sharedHostLen]
	}
	return id
}
