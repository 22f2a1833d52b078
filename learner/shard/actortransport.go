package shard

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"sync"

	"github.com/rlnode/rlnode/actor"
)

// RingAbort tells the other ranks that From gave up Epoch.
type RingAbort struct {
	Epoch  uint64 `msgpack:"e"`
	From   int    `msgpack:"f"`
	Reason string `msgpack:"r"`
}

// BulkAddrRequest asks a mailbox where chunks are pushed to it; the reply
// is BulkAddr.
type BulkAddrRequest struct{}

// BulkAddr is a mailbox's push receiver: its node's bulk address and the
// receiver's name there.
type BulkAddr struct {
	Addr string `msgpack:"a"`
	Name string `msgpack:"n"`
}

// pushHdr is a chunk's header on the bulk path: the tag and the sender's
// rank, big-endian.
const pushHdr = 8 + 8 + 4 + 4 + 4

func init() {
	actor.RegisterMessage(RingAbort{}, BulkAddrRequest{}, BulkAddr{})
}

// Mailbox is a rank's receiving end on its node: a push receiver on the
// node's bulk path that files the chunks sent to it in an inbox, where the
// rank's collectives (running inside another actor's message) pick them
// up, and a small actor that takes aborts and says where to push. It is
// separate from the rank actor because that one is busy in Train while
// the chunks arrive.
type Mailbox struct {
	sys        *actor.System
	ref        actor.Ref
	in         *inbox
	unregister func()

	mu sync.Mutex
	// addrs are the peers' push receivers, learned once per epoch: a
	// rank respawned on a node that came back at the same address has
	// the same Ref but a new bulk address.
	addrs     map[actor.Ref]BulkAddr
	addrEpoch uint64
}

// OpenMailbox starts a rank's mailbox actor on sys under name.
func OpenMailbox(sys *actor.System, name string) (*Mailbox, error) {
	m := &Mailbox{sys: sys, in: newInbox(), addrs: map[actor.Ref]BulkAddr{}}
	ref, err := sys.SpawnLocal(actor.LocalSpawn{Name: name, Kind: "learner-shard-mailbox", Factory: func(*actor.Context, any) (actor.Actor, error) {
		return mailboxActor{in: m.in, addr: BulkAddr{Addr: sys.Bulk().Addr(), Name: name}}, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("learner shards: mailbox: %w", err)
	}
	m.ref = ref
	if m.unregister, err = sys.Bulk().HandlePush(name, m.receive); err != nil {
		_ = sys.StopLocal(name, "closed")
		return nil, fmt.Errorf("learner shards: mailbox: %w", err)
	}
	return m, nil
}

// receive files one pushed chunk.
func (m *Mailbox) receive(hdr []byte, n int64, r io.Reader) error {
	if len(hdr) != pushHdr {
		return fmt.Errorf("shard mailbox: chunk header of %d bytes, want %d", len(hdr), pushHdr)
	}
	tag := Tag{Epoch: binary.BigEndian.Uint64(hdr), Op: binary.BigEndian.Uint64(hdr[8:]),
		Bucket: binary.BigEndian.Uint32(hdr[16:]), Step: binary.BigEndian.Uint32(hdr[20:])}
	if m := actor.HostMemory(); n > 1<<40 || (m > 0 && n > m) {
		return fmt.Errorf("shard mailbox: chunk of %d bytes, over the %d bytes of memory here", n, m)
	}
	if l, ok := r.(actor.PayloadLender); ok {
		// Same host: the chunk stays in the sender's segment until the
		// ring has summed it.
		if p, release, ok := l.Lend(); ok {
			m.in.put(tag, delivery{data: p, release: release})
			return nil
		}
	}
	if n > eagerChunk {
		data, err := readGrowing(r, n)
		if err != nil {
			return err
		}
		m.in.put(tag, delivery{data: data})
		return nil
	}
	data := getBuf(int(n))
	if _, err := io.ReadFull(r, data); err != nil {
		putBuf(data)
		return err
	}
	m.in.put(tag, delivery{data: data})
	return nil
}

// eagerChunk is the largest pushed chunk a mailbox makes room for before
// its bytes arrive; a larger one grows as they come, so a push that
// declares more than it sends costs what it sent.
const eagerChunk = 64 << 20

// readGrowing reads n bytes from r into a buffer that doubles (from
// eagerChunk) as they arrive.
func readGrowing(r io.Reader, n int64) ([]byte, error) {
	buf := make([]byte, 0, eagerChunk)
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*int64(cap(buf)), n))
			copy(grown, buf)
			buf = grown
		}
		k := min(int64(cap(buf)), n) - int64(len(buf))
		got, err := io.ReadFull(r, buf[len(buf):int64(len(buf))+k])
		buf = buf[:len(buf)+got]
		if err != nil {
			return nil, fmt.Errorf("shard mailbox: chunk of %d bytes: after %d: %w", n, len(buf), err)
		}
	}
	return buf, nil
}

// bufPools recycle received chunks by power-of-two capacity (class i
// holds 1<<i bytes), so a steady stream of collectives allocates (and
// clears, and has the GC scan) nothing per chunk.
var bufPools [41]sync.Pool

func getBuf(n int) []byte {
	c := bits.Len(uint(max(n, 1) - 1))
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<c)
}

// putBuf returns a buffer from getBuf once nothing refers to it.
func putBuf(b []byte) {
	c := bits.Len(uint(max(cap(b), 1) - 1))
	if cap(b) != 1<<c || c >= len(bufPools) {
		return
	}
	b = b[:0]
	bufPools[c].Put(&b)
}

// peerAddr is where to push to peer's mailbox, asked of it the first time.
func (m *Mailbox) peerAddr(ctx context.Context, peer actor.Ref) (BulkAddr, error) {
	m.mu.Lock()
	a, ok := m.addrs[peer]
	m.mu.Unlock()
	if ok {
		return a, nil
	}
	a, err := actor.CallAs[BulkAddr](ctx, m.sys, peer, BulkAddrRequest{})
	if err != nil {
		return BulkAddr{}, err
	}
	m.mu.Lock()
	m.addrs[peer] = a
	m.mu.Unlock()
	return a, nil
}

// Ref is where the other ranks send to.
func (m *Mailbox) Ref() actor.Ref { return m.ref }

// Close stops the mailbox actor.
func (m *Mailbox) Close() {
	m.unregister()
	_ = m.sys.StopLocal(m.ref.Name, "closed")
}

// Transport is rank's side of a group whose ranks' mailboxes are peers
// (peers[rank] is m) for epoch; messages of earlier epochs are dropped.
func (m *Mailbox) Transport(epoch uint64, rank int, peers []actor.Ref, o Options) (Transport, error) {
	if rank < 0 || rank >= len(peers) {
		return nil, fmt.Errorf("learner shards: rank %d of %d", rank, len(peers))
	}
	if peers[rank] != m.ref {
		return nil, fmt.Errorf("learner shards: rank %d's mailbox is %s, the group lists %s", rank, m.ref, peers[rank])
	}
	for i, p := range peers {
		if p.IsZero() {
			return nil, fmt.Errorf("learner shards: rank %d has no mailbox", i)
		}
	}
	m.in.forget(epoch)
	m.mu.Lock()
	if epoch != m.addrEpoch {
		clear(m.addrs)
		m.addrEpoch = epoch
	}
	m.mu.Unlock()
	return &actorTransport{mb: m, rank: rank, peers: append([]actor.Ref(nil), peers...)}, nil
}

type mailboxActor struct {
	in   *inbox
	addr BulkAddr
}

func (a mailboxActor) Receive(_ *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case BulkAddrRequest:
		return a.addr, nil
	case RingAbort:
		a.in.abort(m.Epoch, fmt.Errorf("rank %d: %s", m.From, m.Reason))
	default:
		return nil, fmt.Errorf("shard mailbox: unexpected message %T", msg)
	}
	return nil, nil
}

// actorTransport is Transport over the actor runtime: every chunk pushed
// on the bulk path straight from the sender's buffer to the peer's
// mailbox (over a kept connection: no announcement, no dial, no copy
// before the socket), aborts as actor messages.
type actorTransport struct {
	mb    *Mailbox
	rank  int
	peers []actor.Ref
}

func (a *actorTransport) Rank() int { return a.rank }
func (a *actorTransport) Size() int { return len(a.peers) }
func (a *actorTransport) Peer(r int) string {
	if r < 0 || r >= len(a.peers) {
		return fmt.Sprintf("rank %d", r)
	}
	return fmt.Sprintf("rank %d (node %s)", r, a.peers[r].Address)
}

func (a *actorTransport) Send(ctx context.Context, to int, tag Tag, payload []byte) error {
	if to < 0 || to >= len(a.peers) {
		return fmt.Errorf("rank %d of %d", to, len(a.peers))
	}
	dst, err := a.mb.peerAddr(ctx, a.peers[to])
	if err != nil {
		return err
	}
	var hdr [pushHdr]byte
	binary.BigEndian.PutUint64(hdr[0:], tag.Epoch)
	binary.BigEndian.PutUint64(hdr[8:], tag.Op)
	binary.BigEndian.PutUint32(hdr[16:], tag.Bucket)
	binary.BigEndian.PutUint32(hdr[20:], tag.Step)
	binary.BigEndian.PutUint32(hdr[24:], uint32(a.rank))
	if err := a.mb.sys.Bulk().Push(ctx, dst.Addr, dst.Name, hdr[:], payload); err != nil {
		// Ask again next time: the peer may come back elsewhere (a
		// restarted node keeps its actor address, not its bulk port).
		a.mb.mu.Lock()
		delete(a.mb.addrs, a.peers[to])
		a.mb.mu.Unlock()
		return err
	}
	return nil
}

func (a *actorTransport) Recv(ctx context.Context, from int, tag Tag, dst []byte) error {
	p, release, err := a.recvLend(ctx, from, tag, len(dst))
	if err != nil {
		return err
	}
	copy(dst, p)
	release()
	return nil
}

func (a *actorTransport) recvLend(ctx context.Context, from int, tag Tag, n int) ([]byte, func(), error) {
	d, err := a.in().take(ctx, tag, a.Peer(from))
	if err != nil {
		return nil, nil, err
	}
	if len(d.data) != n {
		d.free()
		return nil, nil, fmt.Errorf("%s sent %d bytes for %s, want %d", a.Peer(from), len(d.data), tag, n)
	}
	return d.data, d.free, nil
}

func (a *actorTransport) in() *inbox { return a.mb.in }

// sharedMemory is true when the node's same-host path is on (off with
// RLNODE_BULK_TCP=1 or actor.Config.BulkTCPOnly, and where the node has no
// private socket directory).
func (a *actorTransport) sharedMemory() bool { return a.mb.sys.Bulk().LocalPath() != "" }

func (a *actorTransport) abortCause(epoch uint64) error { return a.mb.in.cause(epoch) }

func (a *actorTransport) Abort(epoch uint64, cause error) {
	for i, p := range a.peers {
		if i != a.rank {
			_ = a.mb.sys.Tell(p, RingAbort{Epoch: epoch, From: a.rank, Reason: fmt.Sprintf("%s: %v", a.Peer(a.rank), cause)})
		}
	}
}
