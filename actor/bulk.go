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
	"net"
	"strconv"
	"sync"
	"time"
)

// The bulk path moves payloads too large for one actor message (weights,
// gradients, trajectory batches, and message bodies over InlineLimit): the
// owner offers the bytes under an unguessable id, and readers pull them
// over a TCP (or TLS) stream in chunks. Pulling lets N engines fetch one
// offer without the owner pushing N copies through its mailbox.

const (
	bulkMagic        = "RLB1"
	bulkChunk        = 4 << 20
	bulkOfferTTL     = 2 * time.Minute
	bulkFetchTimeout = 2 * time.Minute
	bulkStatusOK     = 0
	bulkStatusAbsent = 1
	bulkStatusDenied = 2
	bulkStatusRange  = 3
)

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

	mu     sync.Mutex
	offers map[string]*offer
	wg     sync.WaitGroup
}

type offer struct {
	data    []byte
	readers int
	timer   *time.Timer
}

func startBulk(s *System, host, advertise string) (*Bulk, error) {
	b := &Bulk{sys: s, offers: map[string]*offer{}}
	if s.cfg.TLS != nil {
		var err error
		if b.srv, b.cli, err = s.cfg.TLS.load(); err != nil {
			return nil, err
		}
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("bulk path: listen on %s: %w", host, err)
	}
	b.lis = lis
	port := lis.Addr().(*net.TCPAddr).Port
	if advertise == "" {
		advertise = host
	}
	b.addr = net.JoinHostPort(advertise, strconv.Itoa(port))
	b.wg.Add(1)
	go b.serve()
	return b, nil
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
	o := &offer{data: data, readers: readers}
	b.mu.Lock()
	b.offers[id] = o
	b.mu.Unlock()
	o.timer = time.AfterFunc(ttl, func() { b.Release(BulkRef{ID: id}) })
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
	}
}

func (b *Bulk) close() {
	b.lis.Close()
	b.mu.Lock()
	for id, o := range b.offers {
		o.timer.Stop()
		delete(b.offers, id)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

func (b *Bulk) serve() {
	defer b.wg.Done()
	for {
		c, err := b.lis.Accept()
		if err != nil {
			return
		}
		go b.handle(c)
	}
}

// Request: magic, 32-byte hex id, offset and length (uint64 big-endian),
// then the requester's actor address (uint16 length + bytes). Response:
// one status byte, then on success the requested bytes.
func (b *Bulk) handle(c net.Conn) {
	defer c.Close()
	if b.srv != nil {
		tc := tls.Server(c, b.srv)
		if err := tc.Handshake(); err != nil {
			b.sys.log.Warn("bulk: TLS handshake failed", "peer", c.RemoteAddr().String(), "err", err)
			return
		}
		c = tc
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	var hdr [4 + 32 + 16 + 2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil || string(hdr[:4]) != bulkMagic {
		b.sys.log.Warn("bulk: malformed request", "peer", c.RemoteAddr().String())
		return
	}
	id := string(hdr[4:36])
	off := binary.BigEndian.Uint64(hdr[36:44])
	n := binary.BigEndian.Uint64(hdr[44:52])
	from := make([]byte, binary.BigEndian.Uint16(hdr[52:54]))
	if _, err := io.ReadFull(r, from); err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if !b.sys.allowed(string(from)) {
		b.sys.log.Warn("bulk: refusing a non-member", "from", string(from), "peer", c.RemoteAddr().String())
		_, _ = c.Write([]byte{bulkStatusDenied})
		return
	}
	b.mu.Lock()
	o := b.offers[id]
	b.mu.Unlock()
	if o == nil {
		_, _ = c.Write([]byte{bulkStatusAbsent})
		return
	}
	if off > uint64(len(o.data)) || n > uint64(len(o.data))-off {
		_, _ = c.Write([]byte{bulkStatusRange})
		return
	}
	if _, err := c.Write([]byte{bulkStatusOK}); err != nil {
		return
	}
	data := o.data[off : off+n]
	for len(data) > 0 {
		k := min(len(data), bulkChunk)
		if _, err := c.Write(data[:k]); err != nil {
			return
		}
		b.sys.stats.bulkServed.Add(uint64(k))
		data = data[k:]
	}
	// A read that ends at the payload's end uses one of the offer's readers.
	if off+n == uint64(len(o.data)) {
		b.mu.Lock()
		o.readers--
		if o.readers <= 0 && b.offers[id] == o {
			delete(b.offers, id)
			o.timer.Stop()
		}
		b.mu.Unlock()
	}
}

// Fetch pulls the whole payload named by ref.
func (b *Bulk) Fetch(ctx context.Context, ref BulkRef) ([]byte, error) {
	if ref.Size < 0 {
		return nil, fmt.Errorf("bulk fetch from %s: negative size %d", ref.Addr, ref.Size)
	}
	buf := make([]byte, ref.Size)
	if err := b.FetchRange(ctx, ref, 0, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// FetchRange pulls len(dst) bytes of ref's payload starting at off into dst.
func (b *Bulk) FetchRange(ctx context.Context, ref BulkRef, off int64, dst []byte) error {
	d := net.Dialer{}
	c, err := d.DialContext(ctx, "tcp", ref.Addr)
	if err != nil {
		return fmt.Errorf("bulk fetch from %s: %w", ref.Addr, err)
	}
	defer c.Close()
	if b.cli != nil {
		cfg := b.cli.Clone()
		if host, _, err := net.SplitHostPort(ref.Addr); err == nil && cfg.ServerName == "" {
			cfg.ServerName = host
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("bulk fetch from %s: TLS: %w", ref.Addr, err)
		}
		c = tc
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	from := b.sys.addr
	req := make([]byte, 0, 54+len(from))
	req = append(req, bulkMagic...)
	req = append(req, ref.ID...)
	req = binary.BigEndian.AppendUint64(req, uint64(off))
	req = binary.BigEndian.AppendUint64(req, uint64(len(dst)))
	req = binary.BigEndian.AppendUint16(req, uint16(len(from)))
	req = append(req, from...)
	if len(ref.ID) != 32 {
		return fmt.Errorf("bulk fetch from %s: malformed offer id %q", ref.Addr, ref.ID)
	}
	if _, err := c.Write(req); err != nil {
		return fmt.Errorf("bulk fetch from %s: %w", ref.Addr, err)
	}
	var st [1]byte
	if _, err := io.ReadFull(c, st[:]); err != nil {
		return fmt.Errorf("bulk fetch from %s: %w", ref.Addr, ctxErr(ctx, err))
	}
	switch st[0] {
	case bulkStatusOK:
	case bulkStatusAbsent:
		return fmt.Errorf("bulk fetch %s from %s: %w", ref.ID, ref.Addr, ErrBulkAbsent)
	case bulkStatusDenied:
		return fmt.Errorf("bulk fetch from %s: refused: this node is not a member", ref.Addr)
	default:
		return fmt.Errorf("bulk fetch from %s: range [%d, +%d) outside the %d-byte payload", ref.Addr, off, len(dst), ref.Size)
	}
	for got := 0; got < len(dst); {
		k := min(len(dst)-got, bulkChunk)
		if _, err := io.ReadFull(c, dst[got:got+k]); err != nil {
			return fmt.Errorf("bulk fetch from %s: after %d of %d bytes: %w", ref.Addr, got, len(dst), ctxErr(ctx, err))
		}
		got += k
	}
	b.sys.stats.bulkFetched.Add(uint64(len(dst)))
	return nil
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
