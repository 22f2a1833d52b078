package actor

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestBulkOfferFetch(t *testing.T) {
	s := startTestSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB, several chunks
	ref := s.Bulk().Offer(data, 2, time.Minute)
	if ref.Size != int64(len(data)) || len(ref.ID) != 32 {
		t.Fatalf("ref %+v", ref)
	}
	// Ranges do not use up readers; whole reads do.
	part := make([]byte, 100)
	if err := s.Bulk().FetchRange(ctx, ref, 17, part); err != nil || !bytes.Equal(part, data[17:117]) {
		t.Fatalf("range: %v", err)
	}
	if err := s.Bulk().FetchRange(ctx, ref, int64(len(data))-10, make([]byte, 20)); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("range past the end: %v", err)
	}
	for i := 0; i < 2; i++ {
		got, err := s.Bulk().Fetch(ctx, ref)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("reader %d: %v", i, err)
		}
	}
	if _, err := s.Bulk().Fetch(ctx, ref); !errors.Is(err, ErrBulkAbsent) {
		t.Fatalf("third read of a two-reader offer: %v", err)
	}
	// TTL and Release withdraw offers.
	short := s.Bulk().Offer(data, 5, 50*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	if _, err := s.Bulk().Fetch(ctx, short); !errors.Is(err, ErrBulkAbsent) {
		t.Fatalf("expired offer: %v", err)
	}
	rel := s.Bulk().Offer(data, 5, time.Minute)
	s.Bulk().Release(rel)
	if _, err := s.Bulk().Fetch(ctx, rel); !errors.Is(err, ErrBulkAbsent) {
		t.Fatalf("released offer: %v", err)
	}
	if _, err := s.Bulk().Fetch(ctx, BulkRef{Addr: ref.Addr, ID: "short", Size: 1}); err == nil {
		t.Fatal("malformed id accepted")
	}
	if _, err := s.Bulk().Fetch(ctx, BulkRef{Addr: ref.Addr, ID: ref.ID, Size: -1}); err == nil {
		t.Fatal("negative size accepted")
	}
}

func TestBulkRefusesNonMembers(t *testing.T) {
	s := startTestSystem(t)
	p := startPeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fetcher := Ref{Name: "fetcher", Address: p.addr, ID: "a/fetcher"}
	data := make([]byte, 1<<20)
	got, err := CallAs[Pong](ctx, s, fetcher, FetchOffer{Ref: s.Bulk().Offer(data, 1, time.Minute)})
	if err != nil || got.Len != len(data) {
		t.Fatalf("member fetch: %+v, %v", got, err)
	}
	// A request naming a node outside the membership gets the denied status
	// and no bytes.
	s.SetPeerFilter(func(addr string) bool { return addr == p.addr })
	ref := s.Bulk().Offer(data, 1, time.Minute)
	c, err := net.Dial("tcp", ref.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	from := "192.0.2.7:4000" // a documentation address: never dialled, only named
	req := append([]byte(bulkMagic), ref.ID...)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint64(req, uint64(len(data)))
	req = binary.BigEndian.AppendUint16(req, uint16(len(from)))
	req = append(req, from...)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(c)
	if len(reply) != 1 || reply[0] != bulkStatusDenied {
		t.Fatalf("non-member got %d bytes, first %v", len(reply), reply[:min(len(reply), 1)])
	}
	// The offer is still there for members.
	got, err = CallAs[Pong](ctx, s, fetcher, FetchOffer{Ref: ref})
	if err != nil || got.Len != len(data) {
		t.Fatalf("member fetch after a refusal: %+v, %v", got, err)
	}
}

// pushed is what a test push receiver got.
type pushed struct {
	hdr, data []byte
}

func pushReceiver(t *testing.T, b *Bulk, name string) (<-chan pushed, func()) {
	t.Helper()
	got := make(chan pushed, 16)
	unregister, err := b.HandlePush(name, func(hdr []byte, n int64, r io.Reader) error {
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			return err
		}
		if string(hdr) == "fail" {
			return errors.New("refused by the test")
		}
		got <- pushed{append([]byte(nil), hdr...), data}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, unregister
}

// received waits (boundedly) for the next push.
func received(t *testing.T, got <-chan pushed) pushed {
	t.Helper()
	select {
	case p := <-got:
		return p
	case <-time.After(20 * time.Second):
		t.Fatal("the push returned but the receiver got nothing")
		return pushed{}
	}
}

// dropServerConns closes b's server side of every kept connection, as an
// idle timeout or a restart would.
func dropServerConns(b *Bulk) {
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	dropLocalServerConns(b)
}

// dropLocalServerConns does the same for same-host connections, where
// there are any.
var dropLocalServerConns = func(*Bulk) {}

func TestBulkPush(t *testing.T) {
	s := startTestSystem(t)
	b := s.Bulk()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, unregister := pushReceiver(t, b, "rx")
	if _, err := b.HandlePush("rx", nil); err == nil {
		t.Fatal("a second receiver under one name registered")
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	for i, p := range [][]byte{big, nil, []byte("small")} {
		hdr := []byte{byte(i)}
		if err := b.Push(ctx, b.Addr(), "rx", hdr, p); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		g := received(t, got)
		if !bytes.Equal(g.hdr, hdr) || !bytes.Equal(g.data, p) {
			t.Fatalf("push %d: got header %v and %d bytes", i, g.hdr, len(g.data))
		}
	}
	// Sequential requests reuse one kept connection.
	b.mu.Lock()
	idle, served := len(b.idle[b.Addr()]), len(b.conns)
	b.mu.Unlock()
	if idle != 1 || served != 1 {
		t.Fatalf("%d idle client connections and %d server ones after 3 pushes, want 1 and 1", idle, served)
	}
	// A receiver's error fails the push; the connection stays usable.
	if err := b.Push(ctx, b.Addr(), "rx", []byte("fail"), big); err == nil || !strings.Contains(err.Error(), "failed") {
		t.Fatalf("push to a failing receiver: %v", err)
	}
	if err := b.Push(ctx, b.Addr(), "nobody", nil, big); !errors.Is(err, ErrBulkAbsent) {
		t.Fatalf("push to no receiver: %v", err)
	}
	// A kept connection the server has closed is replaced without failing
	// the request (push or fetch).
	dropServerConns(b)
	if err := b.Push(ctx, b.Addr(), "rx", []byte("again"), big); err != nil {
		t.Fatalf("push after the server dropped the kept connection: %v", err)
	}
	received(t, got)
	ref := b.Offer(big, 1, time.Minute)
	dropServerConns(b)
	if data, err := b.Fetch(ctx, ref); err != nil || !bytes.Equal(data, big) {
		t.Fatalf("fetch after the server dropped the kept connection: %v", err)
	}
	unregister()
	if err := b.Push(ctx, b.Addr(), "rx", nil, big); !errors.Is(err, ErrBulkAbsent) {
		t.Fatalf("push after unregistering: %v", err)
	}
	// A node that is gone fails the push (no silent success).
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := lis.Addr().String()
	lis.Close()
	if err := b.Push(ctx, gone, "rx", nil, big); err == nil {
		t.Fatal("push to a closed port succeeded")
	}
}

func TestBulkPushRefusesNonMembers(t *testing.T) {
	s := startTestSystem(t)
	got, _ := pushReceiver(t, s.Bulk(), "rx")
	s.SetPeerFilter(func(string) bool { return false })
	from := "192.0.2.7:4000" // a documentation address: never dialled, only named
	push := append([]byte(bulkPushMagic), 0, 2, 'r', 'x', 0, 0, 0, 0)
	push = binary.BigEndian.AppendUint64(push, 5)
	push = append(push, "bytes"...)
	hello := append([]byte(bulkHelloMagic), 0, byte(len(from)))
	hello = append(hello, from...)
	for _, tc := range []struct {
		name string
		req  []byte
	}{
		{"push without a hello", push},
		{"hello from a non-member", append(hello, push...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", s.Bulk().Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(tc.req); err != nil {
				t.Fatal(err)
			}
			reply, _ := io.ReadAll(c)
			if len(reply) != 1 || reply[0] != bulkStatusDenied {
				t.Fatalf("non-member got %v, want the denied status and the connection closed", reply)
			}
		})
	}
	select {
	case p := <-got:
		t.Fatalf("a non-member's push reached the receiver: %q", p.data)
	default:
	}
}

// Pushes use the bulk path's mutual TLS when it is configured.
func TestBulkPushTLS(t *testing.T) {
	dir := t.TempDir()
	writeTestPKI(t, dir)
	s, err := Start(Config{TLS: tlsFilesIn(dir), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, _ := pushReceiver(t, s.Bulk(), "rx")
	big := bytes.Repeat([]byte("w"), 2<<20)
	for i := range 2 { // the second on the kept TLS connection
		if err := s.Bulk().Push(ctx, s.Bulk().Addr(), "rx", nil, big); err != nil {
			t.Fatalf("push %d over TLS: %v", i, err)
		}
		if p := received(t, got); !bytes.Equal(p.data, big) {
			t.Fatalf("push %d over TLS: %d bytes", i, len(p.data))
		}
	}
	// A plain TCP client gets no service from a TLS bulk server.
	c, err := net.Dial("tcp", s.Bulk().Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = c.Write(append([]byte(bulkHelloMagic), 0, 1, 'x'))
	if reply, _ := io.ReadAll(c); bytes.Contains(reply, []byte{bulkStatusOK}) && len(reply) == 1 {
		t.Fatalf("a plain client got %v", reply)
	}
}

// A push whose payload stops arriving is given up after bulkProgress, even
// after an accepted hello: it cannot hold the connection open.
func TestStalledPushIsClosed(t *testing.T) {
	old := bulkProgress
	t.Cleanup(func() { bulkProgress = old }) // after the system's Stop, registered below
	bulkProgress = 500 * time.Millisecond
	s := startTestSystem(t) // no key: the hello is accepted
	got, _ := pushReceiver(t, s.Bulk(), "rx")
	from := "192.0.2.7:4000"
	req := append([]byte(bulkHelloMagic), 0, byte(len(from)))
	req = append(req, from...)
	req = append(req, bulkPushMagic...)
	req = append(req, 0, 2, 'r', 'x', 0, 0, 0, 0)
	req = binary.BigEndian.AppendUint64(req, 1<<20)
	req = append(req, "only a few bytes"...)
	c, err := net.Dial("tcp", s.Bulk().Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	reply, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a stalled push held the connection for 10 s (the limit is 0.5 s)")
	}
	if !bytes.Equal(reply, []byte{bulkStatusOK}) {
		t.Fatalf("reply %v, want the hello's OK and then the close", reply)
	}
	select {
	case p := <-got:
		t.Fatalf("the receiver got a payload of %d bytes from a stalled push", len(p.data))
	default:
	}
}

// An idle client connection is closed once unused for bulkIdle, also when
// no later fetch goes to its peer: before, one to a peer this node no
// longer talked to (the driver of a finished run) stayed open for good;
// twelve runs on one cluster left a node with 19 more descriptors.
func TestIdleBulkConnsAreSwept(t *testing.T) {
	s := startTestSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ref := s.Bulk().Offer([]byte("payload"), 1, time.Minute)
	if _, err := s.Bulk().Fetch(ctx, ref); err != nil {
		t.Fatal(err)
	}
	// One, or two on the same-host path (the TCP one that asked for the
	// peer's same-host endpoint, and the same-host one).
	n0 := s.Bulk().idleConns()
	if n0 < 1 || n0 > 2 {
		t.Fatalf("%d idle connections after a fetch, want 1 or 2", n0)
	}
	s.Bulk().sweepIdle(time.Now())
	if n := s.Bulk().idleConns(); n != n0 {
		t.Fatalf("%d idle connections after a sweep within bulkIdle, want %d", n, n0)
	}
	s.Bulk().sweepIdle(time.Now().Add(bulkIdle))
	if n := s.Bulk().idleConns(); n != 0 {
		t.Fatalf("%d idle connections after a sweep past bulkIdle, want 0", n)
	}
	s.Bulk().mu.Lock()
	idleKeys := len(s.Bulk().idle)
	s.Bulk().mu.Unlock()
	if idleKeys != 0 {
		t.Errorf("%d peers left in the idle pool, want none", idleKeys)
	}
}

// TestBulkStallFromTheEnvironment: RLNODE_BULK_STALL sets Config.BulkStall
// where the Config leaves it 0; a value that is no duration, or zero, is
// refused naming the variable.
func TestBulkStallFromTheEnvironment(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
		err  string
	}{
		{"", DefaultBulkStall, ""},
		{"2m", 2 * time.Minute, ""},
		{"-1s", -time.Second, ""},
		{"soon", 0, `RLNODE_BULK_STALL="soon"`},
		{"0", 0, `RLNODE_BULK_STALL="0"`},
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv(BulkStallEnv, c.env)
			s, err := Start(Config{Logger: DiscardLogger()})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("Start: %v, want an error naming %s", err, c.err)
				}
				if s != nil {
					s.Stop()
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			if s.cfg.BulkStall != c.want {
				t.Errorf("BulkStall %v, want %v", s.cfg.BulkStall, c.want)
			}
		})
	}
}
