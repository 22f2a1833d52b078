package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Tag names one message of a collective: the group's epoch (a new one
// after every restart), the collective's number within the epoch, the
// bucket and the ring step.
type Tag struct {
	Epoch  uint64 `msgpack:"e"`
	Op     uint64 `msgpack:"o"`
	Bucket uint32 `msgpack:"b"`
	Step   uint32 `msgpack:"s"`
}

func (t Tag) String() string {
	return fmt.Sprintf("epoch %d collective %d bucket %d step %d", t.Epoch, t.Op, t.Bucket, t.Step)
}

// ErrAborted marks a collective that stopped because another rank gave up
// the epoch.
var ErrAborted = errors.New("aborted by another rank")

// Transport moves one rank's collective messages to the other ranks of its
// group. Implementations must be safe for concurrent use (buckets run in
// parallel) and must not block on a dead peer for longer than ctx allows.
// ActorTransport is the real one (actor messages plus the bulk path);
// MemTransports connects ranks inside one process, for tests.
type Transport interface {
	// Rank is this rank's index in [0, Size).
	Rank() int
	Size() int
	// Send delivers payload to rank to under tag. The payload is copied
	// (or already on its way) when Send returns.
	Send(ctx context.Context, to int, tag Tag, payload []byte) error
	// Recv fills dst with what rank from sent under tag, waiting until ctx
	// is done; a payload of another length is an error. It fails at once
	// (with ErrAborted) when another rank has aborted tag's epoch.
	Recv(ctx context.Context, from int, tag Tag, dst []byte) error
	// Abort tells every other rank that this rank gave up epoch because of
	// cause. Best effort: it does not wait.
	Abort(epoch uint64, cause error)
	// Peer describes rank r for errors: "rank 1 (node 127.0.0.1:4100)".
	Peer(r int) string
}

// delivery is a message waiting in an inbox.
type delivery struct {
	data []byte
	// release, when set, hands data back to where it was lent from (a
	// sender's shared segment); else data came from getBuf.
	release func()
}

// free gives d's bytes back once nothing refers to them.
func (d delivery) free() {
	if d.release != nil {
		d.release()
		return
	}
	putBuf(d.data)
}

// inbox matches arriving messages with the Recv waiting for their tag, in
// whichever order they come.
type inbox struct {
	mu      sync.Mutex
	slots   map[Tag]chan delivery
	aborted map[uint64]chan struct{}
	causes  map[uint64]error
	current uint64 // messages of earlier epochs are dropped on arrival
}

func newInbox() *inbox {
	return &inbox{slots: map[Tag]chan delivery{}, aborted: map[uint64]chan struct{}{}, causes: map[uint64]error{}}
}

func (in *inbox) slot(tag Tag) chan delivery {
	ch := in.slots[tag]
	if ch == nil {
		ch = make(chan delivery, 1)
		in.slots[tag] = ch
	}
	return ch
}

func (in *inbox) abortCh(epoch uint64) chan struct{} {
	ch := in.aborted[epoch]
	if ch == nil {
		ch = make(chan struct{})
		in.aborted[epoch] = ch
	}
	return ch
}

// put stores a message; a second message under one tag is dropped (a
// sender never repeats a tag within an epoch).
func (in *inbox) put(tag Tag, d delivery) {
	in.mu.Lock()
	if tag.Epoch < in.current {
		in.mu.Unlock()
		d.free()
		return
	}
	ch := in.slot(tag)
	in.mu.Unlock()
	select {
	case ch <- d:
	default:
		d.free()
	}
}

// abort fails every present and future take of epoch.
func (in *inbox) abort(epoch uint64, cause error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, done := in.causes[epoch]; done {
		return
	}
	in.causes[epoch] = cause
	close(in.abortCh(epoch))
}

// cause is why epoch was aborted, or nil while it was not.
func (in *inbox) cause(epoch uint64) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.causes[epoch]
}

// take waits for tag's message. peer names the sender for the timeout
// error.
func (in *inbox) take(ctx context.Context, tag Tag, peer string) (delivery, error) {
	in.mu.Lock()
	ch := in.slot(tag)
	ab := in.abortCh(tag.Epoch)
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		delete(in.slots, tag)
		in.mu.Unlock()
	}()
	select {
	case d := <-ch:
		return d, nil
	default:
	}
	select {
	case d := <-ch:
		return d, nil
	case <-ab:
		in.mu.Lock()
		cause := in.causes[tag.Epoch]
		in.mu.Unlock()
		return delivery{}, fmt.Errorf("waiting for %s (%s): %w: %v", peer, tag, ErrAborted, cause)
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return delivery{}, fmt.Errorf("%s sent nothing for %s within the collective timeout (dead or stuck?): %w", peer, tag, ctx.Err())
		}
		return delivery{}, fmt.Errorf("waiting for %s (%s): %w", peer, tag, ctx.Err())
	}
}

// forget drops every message and abort of epochs before epoch, and those
// that arrive later (a restart leaves the old epoch's stragglers behind).
func (in *inbox) forget(epoch uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.current = max(in.current, epoch)
	for t, ch := range in.slots {
		if t.Epoch < epoch {
			delete(in.slots, t)
			select {
			case d := <-ch:
				d.free()
			default:
			}
		}
	}
	for e := range in.aborted {
		if e < epoch {
			delete(in.aborted, e)
			delete(in.causes, e)
		}
	}
}

// MemTransports returns n connected in-process transports, one per rank:
// the same collectives as over the network, without sockets.
func MemTransports(n int) []Transport { return memTransports(n, false) }

// memTransports is MemTransports whose ranks, with shared, set up shared
// buffers as ranks in separate processes on one host do.
func memTransports(n int, shared bool) []Transport {
	boxes := make([]*inbox, n)
	for i := range boxes {
		boxes[i] = newInbox()
	}
	out := make([]Transport, n)
	for i := range out {
		out[i] = &memTransport{rank: i, boxes: boxes, shared: shared}
	}
	return out
}

type memTransport struct {
	rank   int
	boxes  []*inbox
	shared bool
}

func (m *memTransport) sharedMemory() bool            { return m.shared }
func (m *memTransport) abortCause(epoch uint64) error { return m.boxes[m.rank].cause(epoch) }

func (m *memTransport) Rank() int         { return m.rank }
func (m *memTransport) Size() int         { return len(m.boxes) }
func (m *memTransport) Peer(r int) string { return fmt.Sprintf("rank %d (in process)", r) }

func (m *memTransport) Send(ctx context.Context, to int, tag Tag, payload []byte) error {
	if to < 0 || to >= len(m.boxes) {
		return fmt.Errorf("send %s to rank %d of %d", tag, to, len(m.boxes))
	}
	m.boxes[to].put(tag, delivery{data: append([]byte(nil), payload...)})
	return nil
}

func (m *memTransport) Recv(ctx context.Context, from int, tag Tag, dst []byte) error {
	d, err := m.boxes[m.rank].take(ctx, tag, m.Peer(from))
	if err != nil {
		return err
	}
	if len(d.data) != len(dst) {
		return fmt.Errorf("%s sent %d bytes for %s, want %d", m.Peer(from), len(d.data), tag, len(dst))
	}
	copy(dst, d.data)
	return nil
}

func (m *memTransport) Abort(epoch uint64, cause error) {
	for i, b := range m.boxes {
		if i != m.rank {
			b.abort(epoch, fmt.Errorf("rank %d: %w", m.rank, cause))
		}
	}
}
