package actor

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/internal/connlimit"
)

// The bulk path moves payloads too large for one actor message (weights,
// gradients, trajectory batches, and message bodies over InlineLimit): the
// owner offers the bytes under an unguessable id, and readers pull them
// over a TCP (or TLS) stream in chunks. Pulling lets N engines fetch one
// offer without the owner pushing N copies through its mailbox. A sender
// that knows its one reader (a learner rank's ring neighbour) can instead
// push the bytes to a receiver the reader registered (HandlePush): one
// stream write per payload, no announcement and no round trip to ask.
//
// Connections are kept per peer address and reused (a few idle ones, for
// bulkIdle), so a payload costs no dial, TLS or member handshake once a
// pair of nodes has talked; every request still names its sender and is
// refused for a non-member. On a node with a Secret a connection must pass
// the member handshake (auth.go) before any request on it is read; every
// read on the server has a deadline, a payload's included (it must keep
// arriving), and one remote address may hold only so many connections.

const (
	bulkMagic        = "RLB1"
	bulkChunk        = 4 << 20
	bulkOfferTTL     = 2 * time.Minute
	bulkFetchTimeout = 2 * time.Minute
	bulkStatusOK     = 0
	bulkStatusAbsent = 1
	bulkStatusDenied = 2
	bulkStatusRange  = 3
	bulkStatusFailed = 4

	bulkHelloMagic = "RLBH"
	bulkPushMagic  = "RLBP"
	// bulkIdle is how long a client keeps an idle connection for reuse;
	// servers close theirs after bulkServerIdle, which is longer so that a
	// client seldom picks a connection the server is closing.
	bulkIdle        = 15 * time.Second
	bulkServerIdle  = time.Minute
	bulkPoolPerPeer = 8
	bulkMaxPushHdr  = 64 << 10
	// bulkPushPiece is how much of a push's payload one write hands the
	// connection: each one that goes through is progress (Push).
	bulkPushPiece = 1 << 20
)

// bulkProgress is how long a read or write of a request's bytes may make
// no progress before the server gives the connection up (a variable for
// tests).
var bulkProgress = 30 * time.Second

// ErrBulkAbsent means the offer expired, was fully read, or never existed.
var ErrBulkAbsent = errors.New("bulk offer not found")

// BulkRef names an offered payload: where to fetch it, its id and size.
type BulkRef struct {
	Addr string `msgpack:"a"`
	ID   string `msgpack:"i"`
	Size int64  `msgpack:"s"`
}

// Bulk is a node's bulk server and client.
type Bulk struct {
	sys  *System
	lis  net.Listener
	addr string
	srv  *tls.Config
	cli  *tls.Config

	mu       sync.Mutex
	offers   map[string]*offer
	handlers map[string]PushHandler
	idle     map[string][]*bulkConn // by peer address, most recently used last
	conns    map[net.Conn]struct{}  // the server's open connections
	gate     *connlimit.Gate
	loc      localState // the same-host path (local_linux.go)
	closed   bool
	done     chan struct{} // closed by close: ends sweepLoop
	wg       sync.WaitGroup
}

// PushHandler receives one pushed payload: hdr as the sender gave it, and
// the n payload bytes to read from r. It runs on the connection's
// goroutine, so it should file the bytes and return, not wait for other
// pushes. Bytes it leaves unread are discarded; an error fails the push
// at the sender.
type PushHandler func(hdr []byte, n int64, r io.Reader) error

// bulkConn is a client connection to one peer's bulk server.
type bulkConn struct {
	net.Conn
	hello bool // the server accepted this node's hello (needed to push)
	used  time.Time
}

type offer struct {
	data    []byte
	readers int
	timer   *time.Timer
	shared  *offerSeg // the copy local readers map, when readers > 1
}

func startBulk(s *System, host, advertise string) (*Bulk, error) {
	b := &Bulk{sys: s, offers: map[string]*offer{}, handlers: map[string]PushHandler{},
		idle: map[string][]*bulkConn{}, conns: map[net.Conn]struct{}{},
		gate: connlimit.New(connlimit.Limits{Unproven: s.cfg.MaxUnprovenPerAddr, Total: s.cfg.MaxConnsPerAddr})}
	if s.cfg.TLS != nil {
		var err error
		if b.srv, b.cli, err = s.cfg.TLS.load(); err != nil {
			return nil, err
		}
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("bulk path: %w", err) // net.Listen's error names the address
	}
	b.lis = lis
	b.done = make(chan struct{})
	port := lis.Addr().(*net.TCPAddr).Port
	if advertise == "" {
		advertise = host
	}
	b.addr = net.JoinHostPort(advertise, strconv.Itoa(port))
	b.wg.Add(2)
	go b.serve()
	go b.sweepLoop()
	b.startLocal()
	return b, nil
}

// sweepLoop closes, every bulkIdle, the idle client connections unused
// for bulkIdle. conn reuses only those to the same peer, so the ones to a
// peer this node no longer talks to (the driver of a finished run) stayed
// open for the node's life otherwise, with their descriptors and, on the
// same-host path, their ring mappings.
func (b *Bulk) sweepLoop() {
	defer b.wg.Done()
	t := time.NewTicker(bulkIdle)
	defer t.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
			b.sweepIdle(time.Now())
		}
	}
}

// sweepIdle closes the idle connections last used bulkIdle before now.
func (b *Bulk) sweepIdle(now time.Time) {
	var spent []func()
	b.mu.Lock()
	for addr, cs := range b.idle {
		kept := cs[:0]
		for _, c := range cs {
			if now.Sub(c.used) >= bulkIdle {
				spent = append(spent, func() { c.Close() })
			} else {
				kept = append(kept, c)
			}
		}
		if len(kept) == 0 {
			delete(b.idle, addr)
		} else {
			b.idle[addr] = kept
		}
	}
	spent = append(spent, b.sweepLocalIdle(now)...)
	b.mu.Unlock()
	for _, f := range spent {
		f()
	}
}

// idleConns counts the idle client connections, TCP and same-host.
func (b *Bulk) idleConns() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, cs := range b.idle {
		n += len(cs)
	}
	return n + b.localIdleConns()
}

// Addr is the address readers dial.
func (b *Bulk) Addr() string { return b.addr }

// Offer makes data fetchable by up to readers fetches (at least 1) for at
// most ttl. The caller must not modify data while it is offered.
func (b *Bulk) Offer(data []byte, readers int, ttl time.Duration) BulkRef {
	if readers < 1 {
		readers = 1
	}
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	id := hex.EncodeToString(raw[:])
	o := &offer{data: data, readers: readers, shared: b.newOfferShared(readers)}
	b.mu.Lock()
	b.offers[id] = o
	// Set under the lock that Release takes, which a short TTL's timer
	// may call before AfterFunc has returned.
	o.timer = time.AfterFunc(ttl, func() { b.Release(BulkRef{ID: id}) })
	b.mu.Unlock()
	return BulkRef{Addr: b.addr, ID: id, Size: int64(len(data))}
}

// Release withdraws an offer before its readers or TTL are used up.
func (b *Bulk) Release(ref BulkRef) {
	b.mu.Lock()
	o := b.offers[ref.ID]
	delete(b.offers, ref.ID)
	b.mu.Unlock()
	if o != nil {
		o.timer.Stop()
		b.freeOffer(o)
	}
}

// HandlePush registers h for payloads pushed to name on this node, until
// the returned function is called.
func (b *Bulk) HandlePush(name string, h PushHandler) (unregister func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.handlers[name]; dup {
		return nil, fmt.Errorf("bulk path: a push receiver %q is already registered", name)
	}
	if len(name) == 0 || len(name) > 0xffff {
		return nil, fmt.Errorf("bulk path: push receiver name of %d bytes", len(name))
	}
	b.handlers[name] = h
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.handlers, name)
			b.mu.Unlock()
		})
	}, nil
}

func (b *Bulk) close() {
	b.lis.Close()
	b.mu.Lock()
	if !b.closed {
		close(b.done)
	}
	b.closed = true
	var ended []*offer
	for id, o := range b.offers {
		o.timer.Stop()
		ended = append(ended, o)
		delete(b.offers, id)
	}
	b.closeLocal()
	for c := range b.conns {
		c.Close()
	}
	for addr, cs := range b.idle {
		for _, c := range cs {
			c.Close()
		}
		delete(b.idle, addr)
	}
	b.mu.Unlock()
	for _, o := range ended {
		b.freeOffer(o)
	}
	b.wg.Wait()
}

func (b *Bulk) serve() {
	defer b.wg.Done()
	for {
		c, err := b.lis.Accept()
		if err != nil {
			return
		}
		slot, err := b.gate.Admit(c.RemoteAddr())
		if err != nil {
			b.sys.warn.Warn(b.sys.log, "bulk: refusing a connection", "peer", c.RemoteAddr().String(), "err", err)
			c.Close()
			continue
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			c.Close()
			slot.Release()
			return
		}
		b.conns[c] = struct{}{}
		b.wg.Add(1)
		b.mu.Unlock()
		go func() {
			defer b.wg.Done()
			b.handle(c, slot)
			slot.Release()
			b.mu.Lock()
			delete(b.conns, c)
			b.mu.Unlock()
		}()
	}
}

// handle serves one connection's requests in turn until the client closes
// it, sends something malformed, is refused, or stays idle past
// bulkServerIdle. Each request starts with a 4-byte magic:
//
//   - fetch (bulkMagic): 32-byte hex id, offset and length (uint64
//     big-endian), then the requester's actor address (uint16 length +
//     bytes). Response: one status byte, then on success the bytes.
//   - hello (bulkHelloMagic): the client's actor address (uint16 length +
//     bytes). Response: one status byte. Pushes need an accepted hello.
//   - push (bulkPushMagic): receiver name (uint16 length + bytes), header
//     (uint32 length + bytes), payload length (uint64) and the payload.
//     Response: one status byte once the receiver has taken the payload.
//
// A refused member check answers bulkStatusDenied and closes the
// connection. Before any request, the connection passes TLS and the member
// handshake where the node has them, within handshakeTimeout.
func (b *Bulk) handle(c net.Conn, slot *connlimit.Slot) {
	defer c.Close()
	raw := c
	peer := c.RemoteAddr().String()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	if b.srv != nil {
		tc := tls.Server(c, b.srv)
		if err := tc.Handshake(); err != nil {
			b.sys.warn.Warn(b.sys.log, "bulk: TLS handshake failed", "peer", peer, "err", err)
			return
		}
		c = tc
	}
	if p := b.sys.proof; p != nil {
		if err := p.server(c); err != nil {
			b.sys.warn.Warn(b.sys.log, "bulk: refusing a connection", "peer", peer, "err", err)
			return
		}
	}
	_ = raw.SetDeadline(time.Time{})
	slot.Proven()
	r := bufio.NewReader(c)
	var hello string // the member this connection pushes for
	for first := true; ; first = false {
		// The first request must come soon after connecting; later ones
		// may wait while the client keeps the connection idle.
		wait := bulkServerIdle
		if first {
			wait = 30 * time.Second
		}
		_ = raw.SetReadDeadline(time.Now().Add(wait))
		var magic [4]byte
		if _, err := io.ReadFull(r, magic[:]); err != nil {
			if first {
				b.sys.warn.Warn(b.sys.log, "bulk: malformed request", "peer", peer)
			}
			return
		}
		_ = raw.SetReadDeadline(time.Now().Add(bulkProgress))
		var ok bool
		switch string(magic[:]) {
		case bulkMagic:
			ok = b.serveFetch(c, raw, r)
		case bulkHelloMagic:
			from, err := readString16(r)
			if err != nil {
				return
			}
			if !b.sys.allowed(from) {
				b.sys.warn.Warn(b.sys.log, "bulk: refusing a non-member", "from", from, "peer", peer)
				_, _ = c.Write([]byte{bulkStatusDenied})
				return
			}
			hello = from
			_, err = c.Write([]byte{bulkStatusOK})
			ok = err == nil
		case bulkPushMagic:
			ok = b.servePush(c, raw, r, hello)
		case localQueryMagic:
			ok = b.serveLocalQuery(c, r)
		default:
			b.sys.warn.Warn(b.sys.log, "bulk: malformed request", "peer", peer)
			return
		}
		if !ok {
			return
		}
	}
}

func readString16(r io.Reader) (string, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	s := make([]byte, binary.BigEndian.Uint16(n[:]))
	if _, err := io.ReadFull(r, s); err != nil {
		return "", err
	}
	return string(s), nil
}

// errPushHeader marks a push whose header length is over bulkMaxPushHdr.
var errPushHeader = errors.New("push header too large")

// readPushPreamble reads what precedes a push's body: the object name, the
// header (at most bulkMaxPushHdr bytes) and the body length.
func readPushPreamble(r io.Reader) (name string, hdr []byte, n int64, err error) {
	if name, err = readString16(r); err != nil {
		return "", nil, 0, err
	}
	var h4 [4]byte
	if _, err = io.ReadFull(r, h4[:]); err != nil {
		return "", nil, 0, err
	}
	hn := binary.BigEndian.Uint32(h4[:])
	if hn > bulkMaxPushHdr {
		return "", nil, 0, fmt.Errorf("%w: %d bytes", errPushHeader, hn)
	}
	hdr = make([]byte, hn)
	if _, err = io.ReadFull(r, hdr); err != nil {
		return "", nil, 0, err
	}
	var n8 [8]byte
	if _, err = io.ReadFull(r, n8[:]); err != nil {
		return "", nil, 0, err
	}
	if n = int64(binary.BigEndian.Uint64(n8[:])); n < 0 {
		return "", nil, 0, errors.New("negative push length")
	}
	return name, hdr, n, nil
}

// offerFor is the offer id when it holds [off, off+n); otherwise it
// answers the reader that the offer is absent or the range outside it, and
// says whether the connection may take another request.
func (b *Bulk) offerFor(w io.Writer, id string, off, n uint64) (o *offer, goOn bool) {
	b.mu.Lock()
	o = b.offers[id]
	b.mu.Unlock()
	status := byte(bulkStatusAbsent)
	if o != nil {
		if off <= uint64(len(o.data)) && n <= uint64(len(o.data))-off {
			return o, true
		}
		status = bulkStatusRange
	}
	_, err := w.Write([]byte{status})
	return nil, err == nil
}

// servePush takes one push; false ends the connection.
func (b *Bulk) servePush(c, raw net.Conn, r *bufio.Reader, hello string) bool {
	name, hdr, n, err := readPushPreamble(r)
	if err != nil {
		if errors.Is(err, errPushHeader) {
			b.sys.warn.Warn(b.sys.log, "bulk: malformed push", "peer", c.RemoteAddr().String(), "err", err)
		}
		return false
	}
	if hello == "" {
		// No accepted hello: nothing of the payload is read.
		b.sys.warn.Warn(b.sys.log, "bulk: push without a hello", "peer", c.RemoteAddr().String())
		_, _ = c.Write([]byte{bulkStatusDenied})
		return false
	}
	// The payload may take a while to arrive (a large one, a slow link),
	// but it must keep arriving: each read gets bulkProgress.
	status := byte(bulkStatusOK)
	lr := &io.LimitedReader{R: &progressReader{r: r, c: raw}, N: n}
	b.mu.Lock()
	h := b.handlers[name]
	b.mu.Unlock()
	switch {
	case !b.sys.allowed(hello):
		// Membership changed since the hello; the sender was a member,
		// so its payload is drained rather than trusted.
		b.sys.warn.Warn(b.sys.log, "bulk: refusing a non-member", "from", hello, "peer", c.RemoteAddr().String())
		status = bulkStatusDenied
	case h == nil:
		status = bulkStatusAbsent
	default:
		if err := h(hdr, n, lr); err != nil {
			if lr.N > 0 {
				// The handler may have failed on the stream itself.
				if _, derr := io.Copy(io.Discard, lr); derr != nil || lr.N > 0 {
					return false
				}
			}
			b.sys.warn.Warn(b.sys.log, "bulk: push receiver failed", "receiver", name, "err", err)
			status = bulkStatusFailed
		}
	}
	if _, err := io.Copy(io.Discard, lr); err != nil || lr.N > 0 {
		return false
	}
	_ = raw.SetWriteDeadline(time.Now().Add(bulkProgress))
	if _, err := c.Write([]byte{status}); err != nil {
		return false
	}
	return status != bulkStatusDenied
}

// progressReader reads from r, moving c's read deadline bulkProgress ahead
// of each read (at most once a second: a deadline is a timer update).
type progressReader struct {
	r   io.Reader
	c   net.Conn
	set time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	if now := time.Now(); now.Sub(p.set) >= time.Second {
		p.set = now
		_ = p.c.SetReadDeadline(now.Add(bulkProgress))
	}
	return p.r.Read(b)
}

// serveFetch answers one fetch request; false ends the connection. Each
// write of the answer must make progress within bulkProgress.
func (b *Bulk) serveFetch(c, raw net.Conn, r *bufio.Reader) bool {
	var hdr [32 + 16 + 2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		b.sys.warn.Warn(b.sys.log, "bulk: malformed request", "peer", c.RemoteAddr().String())
		return false
	}
	id := string(hdr[0:32])
	off := binary.BigEndian.Uint64(hdr[32:40])
	n := binary.BigEndian.Uint64(hdr[40:48])
	from := make([]byte, binary.BigEndian.Uint16(hdr[48:50]))
	if _, err := io.ReadFull(r, from); err != nil {
		return false
	}
	_ = raw.SetWriteDeadline(time.Now().Add(bulkProgress))
	if !b.sys.allowed(string(from)) {
		b.sys.warn.Warn(b.sys.log, "bulk: refusing a non-member", "from", string(from), "peer", c.RemoteAddr().String())
		_, _ = c.Write([]byte{bulkStatusDenied})
		return false
	}
	o, goOn := b.offerFor(c, id, off, n)
	if o == nil {
		return goOn
	}
	if _, err := c.Write([]byte{bulkStatusOK}); err != nil {
		return false
	}
	data := o.data[off : off+n]
	for len(data) > 0 {
		k := min(len(data), bulkChunk)
		_ = raw.SetWriteDeadline(time.Now().Add(bulkProgress))
		if _, err := c.Write(data[:k]); err != nil {
			return false
		}
		b.sys.stats.bulkServed.Add(uint64(k))
		data = data[k:]
	}
	b.readDone(id, o, off+n)
	return true
}

// readDone counts a read of offer id that ended at byte end: one that
// reaches the payload's end uses one of the offer's readers, and the last
// reader frees the offer.
func (b *Bulk) readDone(id string, o *offer, end uint64) {
	if end != uint64(len(o.data)) {
		return
	}
	b.mu.Lock()
	o.readers--
	last := o.readers <= 0 && b.offers[id] == o
	if last {
		delete(b.offers, id)
	}
	b.mu.Unlock()
	if last {
		o.timer.Stop()
		b.freeOffer(o)
	}
}

// conn returns an idle connection to addr, or dials one. reused says
// which: a reused connection may have been closed by the server meanwhile.
func (b *Bulk) conn(ctx context.Context, addr string) (c *bulkConn, reused bool, err error) {
	b.mu.Lock()
	for cs := b.idle[addr]; len(cs) > 0; cs = b.idle[addr] {
		c = cs[len(cs)-1]
		b.idle[addr] = cs[:len(cs)-1]
		if time.Since(c.used) < bulkIdle {
			b.mu.Unlock()
			return c, true, nil
		}
		c.Close()
	}
	b.mu.Unlock()
	d := net.Dialer{}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	if b.cli != nil {
		cfg := b.cli.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil && cfg.ServerName == "" {
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, false, fmt.Errorf("TLS: %w", err)
		}
		nc = tc
	}
	if p := b.sys.proof; p != nil {
		deadline, ok := ctx.Deadline()
		if !ok || time.Until(deadline) > handshakeTimeout {
			deadline = time.Now().Add(handshakeTimeout)
		}
		_ = nc.SetDeadline(deadline)
		// The handshake ends with ctx too: a peer that stopped answering
		// (frozen) would hold it for handshakeTimeout.
		stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
		err := p.client(nc)
		stopped := stop()
		_ = nc.SetDeadline(time.Time{})
		if err != nil {
			nc.Close()
			if !stopped && ctx.Err() != nil {
				return nil, false, fmt.Errorf("member handshake: %w", ctx.Err())
			}
			return nil, false, err
		}
		if !stopped {
			// ctx ended as the handshake did: the deadline may be set.
			nc.Close()
			return nil, false, fmt.Errorf("member handshake: %w", ctx.Err())
		}
	}
	return &bulkConn{Conn: nc}, false, nil
}

// release keeps c for reuse, or closes it when the pool is full or the
// node is closing.
func (b *Bulk) release(addr string, c *bulkConn) {
	c.used = time.Now()
	b.mu.Lock()
	if !b.closed && len(b.idle[addr]) < bulkPoolPerPeer {
		b.idle[addr] = append(b.idle[addr], c)
		c = nil
	}
	b.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// staleErr marks a failure before the server answered: on a reused
// connection the request is retried once on a new connection.
type staleErr struct{ err error }

func (e staleErr) Error() string { return e.err.Error() }

// do runs one request on a pooled connection to addr. The connection is
// kept for reuse when req succeeds and ctx did not end mid-request. A
// request that fails with a staleErr on a reused connection is retried
// once on a fresh one.
func (b *Bulk) do(ctx context.Context, addr string, req func(c *bulkConn) error) error {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		c, reused, err := b.conn(ctx, addr)
		if err != nil {
			return ctxErr(ctx, err)
		}
		stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
		err = req(c)
		if !stop() {
			// The deadline was (or is being) set: the connection is spent.
			c.Close()
			if err == nil {
				return nil
			}
			return ctxErr(ctx, err)
		}
		if err == nil {
			b.release(addr, c)
			return nil
		}
		c.Close()
		var st staleErr
		if errors.As(err, &st) {
			if reused && attempt == 0 {
				continue
			}
			err = st.err
		}
		return ctxErr(ctx, err)
	}
}

// stale wraps an error seen before the server's status byte.
func stale(err error) error { return staleErr{err} }

// checkFetchSize refuses, before anything is allocated, a payload size
// that cannot be held here: negative, or over the memory this process may
// use (HostMemory). The size comes from another node.
func checkFetchSize(ref BulkRef) error {
	if ref.Size < 0 {
		return fmt.Errorf("bulk fetch from %s: negative size %d", ref.Addr, ref.Size)
	}
	if m := HostMemory(); (m > 0 && ref.Size > m) || uint64(ref.Size) > uint64(math.MaxInt) {
		return fmt.Errorf("bulk fetch from %s: a payload of %d bytes, over the %d bytes of memory here: %w", ref.Addr, ref.Size, m, ErrTooLarge)
	}
	return nil
}

// Fetch pulls the whole payload named by ref. A size over this node's
// memory (HostMemory) is refused with an error wrapping ErrTooLarge.
func (b *Bulk) Fetch(ctx context.Context, ref BulkRef) ([]byte, error) {
	if err := checkFetchSize(ref); err != nil {
		return nil, err
	}
	buf := make([]byte, ref.Size)
	if err := b.FetchRange(ctx, ref, 0, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// FetchView returns ref's whole payload to read, and release, which the
// caller must call once done with p (p must not be used after). On one
// host p maps the owner's copy read-only: nothing is copied to this
// process, writing to p faults, and the owner keeps its copy unchanged
// until release (or, past bulkViewHold, stops reusing it). Elsewhere p
// is a new buffer, as from Fetch, and release does nothing.
func (b *Bulk) FetchView(ctx context.Context, ref BulkRef) (p []byte, release func(), err error) {
	if ref.Size < 0 || len(ref.ID) != 32 {
		return nil, nil, fmt.Errorf("bulk fetch from %s: malformed offer (id %q, size %d)", ref.Addr, ref.ID, ref.Size)
	}
	if err := checkFetchSize(ref); err != nil {
		return nil, nil, err
	}
	sctx, prog, stop := b.watchStall(ctx)
	p, release, handled, err := b.viewLocal(sctx, ref, b.fetchRequest(localViewMagic, ref, 0, ref.Size), prog.mark)
	stop()
	if handled {
		return p, release, prog.stalled(ctx, sctx, ref, err)
	}
	p, err = b.Fetch(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	return p, func() {}, nil
}

// fetchRequest is a fetch request (magic bulkMagic, or localViewMagic on
// the same-host path) for n bytes of ref at off.
func (b *Bulk) fetchRequest(magic string, ref BulkRef, off, n int64) []byte {
	from := b.sys.addr
	req := make([]byte, 0, 54+len(from))
	req = append(req, magic...)
	req = append(req, ref.ID...)
	req = binary.BigEndian.AppendUint64(req, uint64(off))
	req = binary.BigEndian.AppendUint64(req, uint64(n))
	req = binary.BigEndian.AppendUint16(req, uint16(len(from)))
	return append(req, from...)
}

// FetchRange pulls len(dst) bytes of ref's payload starting at off into dst.
// It fails with ErrBulkStalled when no byte arrives for Config.BulkStall.
func (b *Bulk) FetchRange(ctx context.Context, ref BulkRef, off int64, dst []byte) error {
	if len(ref.ID) != 32 {
		return fmt.Errorf("bulk fetch from %s: malformed offer id %q", ref.Addr, ref.ID)
	}
	req := b.fetchRequest(bulkMagic, ref, off, int64(len(dst)))
	sctx, p, stop := b.watchStall(ctx)
	defer stop()
	if handled, err := b.fetchLocal(sctx, ref, off, dst, req, p.mark); handled {
		return p.stalled(ctx, sctx, ref, err)
	}
	var status error
	err := b.do(sctx, ref.Addr, func(c *bulkConn) error {
		if _, err := c.Write(req); err != nil {
			return stale(err)
		}
		r := progressCounter{r: c, p: p}
		var st [1]byte
		if _, err := io.ReadFull(r, st[:]); err != nil {
			return stale(err)
		}
		if st[0] != bulkStatusOK {
			status = fetchStatusErr(ref, off, len(dst), st[0])
			if st[0] == bulkStatusDenied {
				return status
			}
			return nil
		}
		for got := 0; got < len(dst); {
			k := min(len(dst)-got, bulkChunk)
			if _, err := io.ReadFull(r, dst[got:got+k]); err != nil {
				return fmt.Errorf("after %d of %d bytes: %w", got, len(dst), err)
			}
			got += k
			if fetchedChunk != nil {
				fetchedChunk(got)
			}
		}
		return nil
	})
	if status != nil {
		return status
	}
	if err != nil {
		return p.stalled(ctx, sctx, ref, fmt.Errorf("bulk fetch from %s: %w", ref.Addr, err))
	}
	b.sys.stats.bulkFetched.Add(uint64(len(dst)))
	return nil
}

// fetchedChunk, when set (tests), runs after each chunk a fetch over TCP
// reads, with the bytes read so far.
var fetchedChunk func(got int)

// fetchProgress is when a fetch last received anything, and what it
// counted of the payload (over TCP).
type fetchProgress struct {
	last atomic.Int64 // UnixNano
	got  atomic.Int64
}

func (p *fetchProgress) mark() { p.last.Store(time.Now().UnixNano()) }

// stalled is err, or the stall that caused it: the fetch's own context
// (sctx) ended with ErrBulkStalled while the caller's (ctx) did not.
func (p *fetchProgress) stalled(ctx, sctx context.Context, ref BulkRef, err error) error {
	had := ""
	if got := p.got.Load(); got > 0 {
		had = fmt.Sprintf(" after %d bytes came", got)
	}
	return p.stalledAs(ctx, sctx, err, fmt.Sprintf("bulk fetch of %d bytes from %s", ref.Size, ref.Addr), "no byte", had)
}

// pushStalled is stalled for a push of n bytes to addr: the receiver took
// no byte and gave no answer for Config.BulkStall.
func (p *fetchProgress) pushStalled(ctx, sctx context.Context, addr string, n int, err error) error {
	had := ""
	if sent := p.got.Load(); sent > 0 {
		had = fmt.Sprintf(" after %d bytes went", sent)
	}
	return p.stalledAs(ctx, sctx, err, fmt.Sprintf("bulk push of %d bytes to %s", n, addr), "the receiver took no byte and gave no answer", had)
}

func (p *fetchProgress) stalledAs(ctx, sctx context.Context, err error, what, silent, had string) error {
	if err == nil || ctx.Err() != nil || !errors.Is(context.Cause(sctx), ErrBulkStalled) {
		return err
	}
	idle := time.Since(time.Unix(0, p.last.Load())).Round(time.Millisecond)
	why := fmt.Errorf("%s: %w: %s for %s%s (its node is stuck, or the path to it drops packets)",
		what, ErrBulkStalled, silent, idle, had)
	if errors.Is(err, context.Canceled) {
		return why // the transport's error is only the stall's echo
	}
	// Not wrapped: callers must not take it for a broken connection.
	return fmt.Errorf("%w: %v", why, err)
}

// progressCounter marks each read that brings bytes.
type progressCounter struct {
	r io.Reader
	p *fetchProgress
}

func (c progressCounter) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if n > 0 {
		c.p.got.Add(int64(n))
		c.p.mark()
	}
	return n, err
}

// watchStall is ctx, ended with the cause ErrBulkStalled once the
// progress it returns has not been marked for Config.BulkStall, and what
// stops the watch. It bounds silence, never a transfer's length.
func (b *Bulk) watchStall(ctx context.Context) (context.Context, *fetchProgress, func()) {
	p := &fetchProgress{}
	p.mark()
	stall := b.sys.cfg.BulkStall
	if stall <= 0 {
		return ctx, p, func() {}
	}
	sctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(max(stall/8, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-sctx.Done():
				return
			case now := <-t.C:
				if now.Sub(time.Unix(0, p.last.Load())) >= stall {
					cancel(ErrBulkStalled)
					return
				}
			}
		}
	}()
	return sctx, p, func() {
		close(done)
		cancel(nil)
	}
}

// Push sends payload to the receiver registered under name on the node
// whose bulk address is addr (its Bulk().Addr()), with hdr for the
// receiver's handler, and returns once that handler has taken it. It
// writes straight from payload, which the caller may reuse afterwards.
// It fails with ErrBulkStalled when the receiver takes no byte and gives
// no answer for Config.BulkStall (a receiver that accepted the connection
// and then stopped reading held the sender forever otherwise).
func (b *Bulk) Push(ctx context.Context, addr, name string, hdr, payload []byte) error {
	if len(name) == 0 || len(name) > 0xffff || len(hdr) > bulkMaxPushHdr {
		return fmt.Errorf("bulk push to %s: receiver name of %d bytes, header of %d", addr, len(name), len(hdr))
	}
	req := make([]byte, 0, 4+2+len(name)+4+len(hdr)+8)
	req = append(req, bulkPushMagic...)
	req = binary.BigEndian.AppendUint16(req, uint16(len(name)))
	req = append(req, name...)
	req = binary.BigEndian.AppendUint32(req, uint32(len(hdr)))
	req = append(req, hdr...)
	req = binary.BigEndian.AppendUint64(req, uint64(len(payload)))
	sctx, p, stop := b.watchStall(ctx)
	defer stop()
	if handled, err := b.pushLocal(sctx, addr, name, req, payload, p.mark); handled {
		return p.pushStalled(ctx, sctx, addr, len(payload), err)
	}
	var status error
	err := b.do(sctx, addr, func(c *bulkConn) error {
		var st [1]byte
		if !c.hello {
			from := b.sys.addr
			h := append([]byte(bulkHelloMagic), byte(len(from)>>8), byte(len(from)))
			if _, err := c.Write(append(h, from...)); err != nil {
				return stale(err)
			}
			if _, err := io.ReadFull(c, st[:]); err != nil {
				return stale(err)
			}
			if st[0] != bulkStatusOK {
				status = fmt.Errorf("bulk push to %s: refused: this node is not a member", addr)
				return status
			}
			c.hello = true
			p.mark()
		}
		// In pieces, each write that goes through marking progress: a
		// receiver that stops reading stalls the push, a slow one does not.
		head := req // the first piece goes with the request, in one write
		for rest := payload; ; {
			k := min(len(rest), bulkPushPiece)
			bufs := net.Buffers{head, rest[:k]}
			if _, err := bufs.WriteTo(c.Conn); err != nil {
				return stale(err)
			}
			p.got.Add(int64(k))
			p.mark()
			head, rest = nil, rest[k:]
			if len(rest) == 0 {
				break
			}
		}
		if _, err := io.ReadFull(c, st[:]); err != nil {
			return stale(err)
		}
		status = pushStatusErr(addr, name, st[0])
		if st[0] == bulkStatusDenied {
			return status
		}
		return nil
	})
	if status != nil {
		return status
	}
	if err != nil {
		return p.pushStalled(ctx, sctx, addr, len(payload), fmt.Errorf("bulk push to %s: %w", addr, err))
	}
	return nil
}

// fetchStatusErr is the error a fetch's status byte st means (nil for OK).
func fetchStatusErr(ref BulkRef, off int64, n int, st byte) error {
	switch st {
	case bulkStatusOK:
		return nil
	case bulkStatusAbsent:
		return fmt.Errorf("bulk fetch %s from %s: %w", ref.ID, ref.Addr, ErrBulkAbsent)
	case bulkStatusDenied:
		return fmt.Errorf("bulk fetch from %s: refused: this node is not a member", ref.Addr)
	default:
		return fmt.Errorf("bulk fetch from %s: range [%d, +%d) outside the %d-byte payload", ref.Addr, off, n, ref.Size)
	}
}

// pushStatusErr is the error a push's status byte st means (nil for OK).
func pushStatusErr(addr, name string, st byte) error {
	switch st {
	case bulkStatusOK:
		return nil
	case bulkStatusAbsent:
		return fmt.Errorf("bulk push to %s: no receiver %q there (closed?): %w", addr, name, ErrBulkAbsent)
	case bulkStatusDenied:
		return fmt.Errorf("bulk push to %s: refused: this node is not a member", addr)
	default:
		return fmt.Errorf("bulk push to %s: receiver %q failed (see its node's log)", addr, name)
	}
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
