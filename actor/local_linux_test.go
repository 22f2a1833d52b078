//go:build linux

package actor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rlnode/rlnode/internal/logbuf"
	"github.com/rlnode/rlnode/internal/proctest"
	"golang.org/x/sys/unix"
)

// FetchSum asks the peer to pull an offer; the reply is its SHA-256.
// With View the peer maps it (FetchView), checks that the mapping cannot
// be made writable, and releases it.
type FetchSum struct {
	Ref  BulkRef
	View bool
}

// PushTo asks the peer to push Size pseudo-random bytes (seeded by Seed)
// to the receiver Name at bulk address Addr.
type PushTo struct {
	Addr, Name string
	Size, Seed int
}

// OfferPattern asks the peer to offer Count copies of Size pseudo-random
// bytes (seeded by Seed), one reader each; the reply is Offered.
type OfferPattern struct{ Size, Seed, Count int }

// Offered lists the peer's offers.
type Offered struct{ Refs []BulkRef }

// Sum is a SHA-256.
type Sum struct{ Hash []byte }

// WhereLocal asks the peer for its same-host socket; the reply is Local.
type WhereLocal struct{}

// Local is a node's same-host socket.
type Local struct{ Path string }

func init() {
	dropLocalServerConns = func(b *Bulk) {
		b.mu.Lock()
		for c := range b.loc.conns {
			c.Close()
		}
		b.mu.Unlock()
	}
	RegisterMessage(FetchSum{}, PushTo{}, Sum{}, WhereLocal{}, Local{}, OfferPattern{}, Offered{})
	RegisterKind("test.bulker", func(*Context, any) (Actor, error) { return bulker{}, nil })
}

type bulker struct{}

func (bulker) Receive(ctx *Context, msg any) (any, error) {
	switch m := msg.(type) {
	case FetchSum:
		if m.View {
			p, release, err := ctx.System().Bulk().FetchView(context.Background(), m.Ref)
			if err != nil {
				return nil, err
			}
			defer release()
			if err := notWritable(p); err != nil {
				return nil, err
			}
			h := sha256.Sum256(p)
			return Sum{Hash: h[:]}, nil
		}
		b, err := ctx.System().Bulk().Fetch(context.Background(), m.Ref)
		if err != nil {
			return nil, err
		}
		h := sha256.Sum256(b)
		return Sum{Hash: h[:]}, nil
	case WhereLocal:
		return Local{Path: ctx.System().Bulk().LocalPath()}, nil
	case OfferPattern:
		var out Offered
		for range m.Count {
			out.Refs = append(out.Refs, ctx.System().Bulk().Offer(pattern(m.Size, m.Seed), 1, time.Minute))
		}
		return out, nil
	case PushTo:
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return nil, ctx.System().Bulk().Push(c, m.Addr, m.Name, []byte("hdr"), pattern(m.Size, m.Seed))
	}
	return nil, fmt.Errorf("unexpected %T", msg)
}

// notWritable checks that a view of at least a page maps memory this
// process cannot make writable.
func notWritable(p []byte) error {
	if len(p) < os.Getpagesize() {
		return nil
	}
	page := p[:os.Getpagesize()]
	if uintptr(unsafe.Pointer(&page[0]))%uintptr(os.Getpagesize()) != 0 {
		return errors.New("a view of a page or more is not a mapping")
	}
	if err := unix.Mprotect(page, unix.PROT_READ|unix.PROT_WRITE); !errors.Is(err, unix.EACCES) {
		return fmt.Errorf("mprotect of a view to read-write: %v, want EACCES", err)
	}
	return nil
}

func pattern(n, seed int) []byte {
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func bulkerRef(p *peerProc) Ref {
	return Ref{Name: "bulker", Kind: "test.bulker", Address: p.addr, ID: "a/bulker"}
}

// memfdsOf lists the memfd descriptors and mappings of process pid.
func memfdsOf(t *testing.T, pid string) []string {
	t.Helper()
	var out []string
	fds, _ := filepath.Glob("/proc/" + pid + "/fd/*")
	for _, f := range fds {
		if l, err := os.Readlink(f); err == nil && strings.Contains(l, "memfd:rlnode") {
			out = append(out, "fd "+l)
		}
	}
	maps, err := os.ReadFile("/proc/" + pid + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.Contains(line, "memfd:rlnode") {
			out = append(out, "map "+line)
		}
	}
	return out
}

func shmNames(t *testing.T) map[string]bool {
	t.Helper()
	names, _ := filepath.Glob("/dev/shm/*")
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

func TestLocalPathBetweenProcesses(t *testing.T) {
	// A socket folder of its own (the peer inherits it): a node that
	// another test package starts meanwhile sweeps the shared one, and
	// would remove the killed peer's socket this test watches.
	sockets, err := os.MkdirTemp("", "rlsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockets) })
	t.Setenv("XDG_RUNTIME_DIR", sockets)
	before := shmNames(t)
	s, err := Start(Config{Secret: []byte("local key"), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if s.Bulk().LocalPath() == "" {
		t.Skip("no same-host path on this machine (see the node's warning)")
	}
	p := startPeer(t, "RLNODE_ACTOR_SECRET=local key")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Fetches of one reader stream through the ring (sizes around a slot
	// and across several); the peer returns what it got as a hash.
	for _, size := range []int{0, 1, localSlot - 1, localSlot, localSlot + 1, 3*localSlot + 5, 20 * localSlot} {
		data := pattern(size, size)
		local := s.Stats().BulkBytesLocal
		got, err := CallAs[Sum](ctx, s, bulkerRef(p), FetchSum{Ref: s.Bulk().Offer(data, 1, time.Minute)})
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if want := sha256.Sum256(data); !bytes.Equal(got.Hash, want[:]) {
			t.Fatalf("%d bytes: the peer got other bytes", size)
		}
		if d := s.Stats().BulkBytesLocal - local; d != uint64(size) {
			t.Fatalf("%d bytes: %d went through shared memory", size, d)
		}
	}
	// An offer of three readers is copied once into a segment they map.
	data := pattern(5*localSlot+3, 9)
	ref := s.Bulk().Offer(data, 3, time.Minute)
	for i := range 3 {
		got, err := CallAs[Sum](ctx, s, bulkerRef(p), FetchSum{Ref: ref})
		if want := sha256.Sum256(data); err != nil || !bytes.Equal(got.Hash, want[:]) {
			t.Fatalf("shared offer, reader %d: %v", i, err)
		}
	}
	if _, err := CallAs[Sum](ctx, s, bulkerRef(p), FetchSum{Ref: ref}); !errors.Is(err, ErrBulkAbsent) && (err == nil || !strings.Contains(err.Error(), ErrBulkAbsent.Error())) {
		t.Fatalf("a fourth reader of a 3-reader offer: %v", err)
	}

	// Views: the peer maps the offer (one reader, or one of two) read-only.
	for _, readers := range []int{1, 2} {
		for _, size := range []int{0, 1, 5*localSlot + 3} {
			data := pattern(size, 100+size)
			ref := s.Bulk().Offer(data, readers, time.Minute)
			for i := range readers {
				local := s.Stats().BulkBytesLocal
				got, err := CallAs[Sum](ctx, s, bulkerRef(p), FetchSum{Ref: ref, View: true})
				if want := sha256.Sum256(data); err != nil || !bytes.Equal(got.Hash, want[:]) {
					t.Fatalf("view of %d bytes, %d readers, reader %d: %v", size, readers, i, err)
				}
				if d := s.Stats().BulkBytesLocal - local; d != uint64(size) {
					t.Fatalf("view of %d bytes: %d went through shared memory", size, d)
				}
			}
		}
	}

	// Pushes from the peer, small and over many slots, reach a receiver
	// here intact.
	got, unregister := pushReceiver(t, s.Bulk(), "sink")
	defer unregister()
	for _, size := range []int{10, 2*localSlot + 7} {
		if _, err := s.Call(ctx, bulkerRef(p), PushTo{Addr: s.Bulk().Addr(), Name: "sink", Size: size, Seed: size}); err != nil {
			t.Fatalf("push of %d bytes: %v", size, err)
		}
		if r := received(t, got); !bytes.Equal(r.data, pattern(size, size)) || string(r.hdr) != "hdr" {
			t.Fatalf("push of %d bytes arrived changed", size)
		}
	}

	// The peer is killed: the next node to start removes its socket.
	where, err := CallAs[Local](ctx, s, bulkerRef(p), WhereLocal{})
	peerSock := where.Path
	if err != nil || peerSock == "" {
		t.Fatalf("the peer's same-host socket: %q, %v", peerSock, err)
	}
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.Exited
	if _, err := os.Stat(peerSock); err != nil {
		t.Fatalf("a killed node's socket should stay until the next start: %v", err)
	}
	// (One node at a time in this process: two share gRPC's global logger.)
	mine := []string{s.Bulk().LocalPath()}
	s.Stop()
	s2, err := Start(Config{Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(peerSock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the killed node's socket outlived the next start: %v", err)
	}
	mine = append(mine, s2.Bulk().LocalPath())
	s2.Stop()
	for _, m := range mine {
		if _, err := os.Stat(m); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket %s outlived its node: %v", m, err)
		}
	}
	if left := memfdsOf(t, "self"); len(left) > 0 {
		t.Errorf("segments outlived the nodes: %v", left)
	}
	for n := range shmNames(t) {
		if !before[n] && strings.Contains(n, "rlnode") {
			t.Errorf("%s appeared in /dev/shm", n)
		}
	}
}

func TestLocalPathOffUsesTCP(t *testing.T) {
	s, err := Start(Config{Secret: []byte("local key"), Logger: DiscardLogger(), BulkTCPOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if s.Bulk().LocalPath() != "" {
		t.Fatal("BulkTCPOnly still opened a same-host socket")
	}
	// The peer has its path switched off by the environment: neither end
	// offers one, and the bytes go over TCP.
	p := startPeer(t, "RLNODE_ACTOR_SECRET=local key", "RLNODE_BULK_TCP=1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := pattern(3*localSlot+1, 3)
	got, err := CallAs[Sum](ctx, s, bulkerRef(p), FetchSum{Ref: s.Bulk().Offer(data, 1, time.Minute)})
	if want := sha256.Sum256(data); err != nil || !bytes.Equal(got.Hash, want[:]) {
		t.Fatalf("fetch over TCP: %v", err)
	}
	if s.Stats().BulkBytesLocal != 0 || s.Stats().BulkBytesServed != uint64(len(data)) {
		t.Fatalf("stats %+v", s.Stats())
	}
}

func TestLocalRefusesWithoutTheKey(t *testing.T) {
	s, err := Start(Config{Secret: []byte("local key"), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	path := s.Bulk().LocalPath()
	if path == "" {
		t.Skip("no same-host path on this machine")
	}
	for _, tc := range []struct {
		name  string
		hello func(c net.Conn) error
	}{
		{"hello without the handshake", func(c net.Conn) error {
			_, err := c.Write(appendString16([]byte(localHelloMagic), s.Address()))
			return err
		}},
		{"another key", func(c net.Conn) error {
			p, _ := newMemberProof([]byte("another key"))
			return p.client(c)
		}},
	} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		herr := tc.hello(c)
		var buf [64]byte
		n, rerr := io.ReadFull(c, buf[:])
		c.Close()
		if herr == nil && (n > 0 || rerr == nil) {
			t.Errorf("%s: the server answered %q", tc.name, buf[:n])
		}
		if herr != nil && !errors.Is(herr, ErrNotMember) {
			t.Errorf("%s: %v", tc.name, herr)
		}
	}
}

// A receiver that keeps every slot lent does not stall the sender: later
// chunks go inline on the socket; released slots are used again.
func TestLocalLentSlotsDoNotBlock(t *testing.T) {
	s, err := Start(Config{Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if s.Bulk().LocalPath() == "" {
		t.Skip("no same-host path on this machine")
	}
	type lent struct {
		p       []byte
		release func()
		inPlace bool
	}
	got := make(chan lent, 2*localSlots+2)
	unregister, err := s.Bulk().HandlePush("lend", func(hdr []byte, n int64, r io.Reader) error {
		l, ok := r.(PayloadLender)
		if !ok {
			return errors.New("the reader does not lend")
		}
		p, release, ok := l.Lend()
		if !ok {
			return errors.New("nothing lent")
		}
		ring := r.(*localReader).l.ring
		at, lo := uintptr(unsafe.Pointer(&p[0])), uintptr(unsafe.Pointer(&ring.mem[0]))
		in := at >= lo && at < lo+uintptr(len(ring.mem))
		got <- lent{p, release, in}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unregister()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var held []lent
	for i := range localSlots + 2 {
		if err := s.Bulk().Push(ctx, s.Bulk().Addr(), "lend", nil, pattern(1000, i)); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		l := <-got
		if !bytes.Equal(l.p, pattern(1000, i)) {
			t.Fatalf("push %d: lent bytes differ", i)
		}
		if want := i < localSlots; l.inPlace != want {
			t.Fatalf("push %d: in the segment %v, want %v", i, l.inPlace, want)
		}
		held = append(held, l)
	}
	for _, l := range held {
		l.release()
	}
	if err := s.Bulk().Push(ctx, s.Bulk().Addr(), "lend", nil, pattern(1000, 99)); err != nil {
		t.Fatal(err)
	}
	if l := <-got; !l.inPlace || !bytes.Equal(l.p, pattern(1000, 99)) {
		t.Fatalf("after the releases the payload is not in a slot (%v)", l.inPlace)
	} else {
		l.release()
	}
}

// TestBulkOverTCP runs this package's bulk tests again with the same-host
// path switched off, so the TCP path stays tested on a machine where the
// tests would otherwise take shared memory.
func TestBulkOverTCP(t *testing.T) {
	if os.Getenv("RLNODE_BULK_TCP") == "1" {
		t.Skip("already over TCP")
	}
	proctest.Rerun(t, "^(TestBulk|TestStalledPush|TestRemoteCallsAcrossProcesses)", "RLNODE_BULK_TCP=1")
}

// A member that speaks the same-host protocol wrongly gets its connection
// closed (or its hello refused), never a panic or a hang, and the node
// goes on serving.
func TestLocalHostileClient(t *testing.T) {
	key := []byte("local key")
	s, err := Start(Config{Secret: key, Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	path := s.Bulk().LocalPath()
	if path == "" {
		t.Skip("no same-host path on this machine")
	}
	got, unregister := pushReceiver(t, s.Bulk(), "sink")
	defer unregister()
	proof, _ := newMemberProof(key)
	dial := func(t *testing.T) *net.UnixConn {
		t.Helper()
		nc, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c := nc.(*net.UnixConn)
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if err := proof.client(c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	hello := func(t *testing.T, c *net.UnixConn, size int, sealIt bool) byte {
		t.Helper()
		fd, mem, err := newSegment("rlnode-test", size, false)
		if err != nil {
			t.Fatal(err)
		}
		if mem != nil {
			defer unix.Munmap(mem)
		}
		if sealIt {
			if err := seal(fd, localSeals); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err = c.WriteMsgUnix(appendString16([]byte(localHelloMagic), s.Address()), unix.UnixRights(fd), nil)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		var st [1]byte
		if _, err := io.ReadFull(c, st[:]); err != nil {
			return 0xff
		}
		return st[0]
	}
	t.Run("unsealed segment", func(t *testing.T) {
		c := dial(t)
		defer c.Close()
		if st := hello(t, c, localSegSize, false); st == bulkStatusOK {
			t.Fatal("an unsealed segment was accepted")
		}
	})
	t.Run("segment of another size", func(t *testing.T) {
		c := dial(t)
		defer c.Close()
		if st := hello(t, c, 4096, true); st == bulkStatusOK {
			t.Fatal("a segment of 4096 bytes was accepted")
		}
	})
	push := func(n uint64) []byte {
		req := append([]byte(bulkPushMagic), 0, 4)
		req = append(req, "sink"...)
		req = append(req, 0, 0, 0, 0)
		var n8 [8]byte
		binary.BigEndian.PutUint64(n8[:], n)
		return append(req, n8[:]...)
	}
	for _, tc := range []struct {
		name     string
		n        uint64
		doorbell []byte
	}{
		{"slot out of range", 100, []byte{localDoorbell, 200, 0, 0, 0, 100}},
		{"chunk longer than the payload", 100, []byte{localDoorbell, 0, 0, 0, 1, 0}},
		{"chunk longer than a slot", 4 * localSlot, []byte{localDoorbell, 0, 0, 0x40, 0, 1}},
		{"empty chunk", 100, []byte{localDoorbell, 0, 0, 0, 0, 0}},
		{"unknown doorbell", 100, []byte{'x', 0, 0, 0, 0, 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t)
			defer c.Close()
			if st := hello(t, c, localSegSize, true); st != bulkStatusOK {
				t.Fatalf("hello: status %d", st)
			}
			if _, err := c.Write(append(push(tc.n), tc.doorbell...)); err != nil {
				t.Fatal(err)
			}
			var buf [16]byte
			n, err := c.Read(buf[:])
			if err == nil {
				t.Fatalf("the server answered %q", buf[:n])
			}
			select {
			case p := <-got:
				t.Fatalf("the receiver got %d bytes", len(p.data))
			default:
			}
		})
	}
	// The node still takes a proper push.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Bulk().Push(ctx, s.Bulk().Addr(), "sink", []byte("h"), []byte("after")); err != nil {
		t.Fatal(err)
	}
	if p := received(t, got); string(p.data) != "after" {
		t.Fatalf("got %q", p.data)
	}
}

// A view maps the owner's copy read-only; the owner keeps that copy
// unchanged while the view is held, reuses it for a later offer of the
// same size once released, and no segment outlives the node.
func TestLocalView(t *testing.T) {
	s, err := Start(Config{Secret: []byte("local key"), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if s.Bulk().LocalPath() == "" {
		s.Stop()
		t.Skip("no same-host path on this machine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const size = 3*localSlot + 11
	view := func(seed int) ([]byte, func()) {
		t.Helper()
		data := pattern(size, seed)
		p, release, err := s.Bulk().FetchView(ctx, s.Bulk().Offer(data, 1, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p, data) {
			t.Fatalf("view %d: other bytes", seed)
		}
		if err := notWritable(p); err != nil {
			t.Fatal(err)
		}
		if len(memfdsOf(t, "self")) == 0 {
			t.Fatal("a view of an offer of this node maps no segment")
		}
		return p, release
	}
	a, releaseA := view(1)
	// While a is held its segment is not reused: b gets another, which is
	// kept once b is released and then reused by c.
	_, releaseB := view(2)
	releaseB()
	c, releaseC := view(3)
	if !bytes.Equal(a, pattern(size, 1)) {
		t.Fatal("a held view changed under its reader")
	}
	if fds := segmentFDs(t); fds != 2*2 { // a's and c's segments, each a read-write and a read-only descriptor
		t.Errorf("%d segment descriptors while two views are held, want 4", fds)
	}
	releaseA()
	releaseC()
	releaseC() // a second release does nothing
	_ = c
	// A malformed reference is refused before anything is sent.
	if _, _, err := s.Bulk().FetchView(ctx, BulkRef{Addr: s.Bulk().Addr(), ID: "x", Size: 1}); err == nil {
		t.Fatal("a malformed offer id was fetched")
	}
	s.Stop()
	if left := memfdsOf(t, "self"); len(left) > 0 {
		t.Errorf("segments outlived the node: %v", left)
	}
}

// segmentFDs counts this process's descriptors of offer segments.
func segmentFDs(t *testing.T) int {
	n := 0
	for _, m := range memfdsOf(t, "self") {
		if strings.HasPrefix(m, "fd ") && strings.Contains(m, "rlnode-offer") {
			n++
		}
	}
	return n
}

// A view of an offer whose owner was killed fails naming the owner's
// address, within the fetch's context; a view taken before the kill stays
// readable and its release returns.
func TestLocalViewOwnerKilled(t *testing.T) {
	sockets, err := os.MkdirTemp("", "rlsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockets) })
	t.Setenv("XDG_RUNTIME_DIR", sockets)
	s, err := Start(Config{Secret: []byte("local key"), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if s.Bulk().LocalPath() == "" {
		t.Skip("no same-host path on this machine")
	}
	p := startPeer(t, "RLNODE_ACTOR_SECRET=local key")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const size = 2*localSlot + 5
	refs, err := CallAs[Offered](ctx, s, bulkerRef(p), OfferPattern{Size: size, Seed: 4, Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	held, release, err := s.Bulk().FetchView(ctx, refs.Refs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.Exited
	if !bytes.Equal(held, pattern(size, 4)) {
		t.Fatal("a view taken before its owner died reads other bytes")
	}
	release()
	_, _, err = s.Bulk().FetchView(ctx, refs.Refs[1])
	if err == nil || !strings.Contains(err.Error(), refs.Refs[1].Addr) {
		t.Fatalf("view from a killed owner: %v (want an error naming %s)", err, refs.Refs[1].Addr)
	}
	if ctx.Err() != nil {
		t.Fatal("the view waited for its context to end")
	}
}

// A same-host connection closed before its first byte (every starting
// node probes the sockets it finds this way) logs nothing; a failed
// handshake logs a warning.
func TestLocalProbeIsNotWarned(t *testing.T) {
	var logs logbuf.Buffer
	s, err := Start(Config{Secret: []byte("local key"), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	path := s.Bulk().LocalPath()
	if path == "" {
		t.Skip("no same-host path on this machine")
	}
	dial := func(then func(net.Conn)) {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		then(c)
		c.Close()
	}
	dial(func(net.Conn) {}) // the probe
	dial(func(c net.Conn) { // another key: refused, and warned about
		p, _ := newMemberProof([]byte("another key"))
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_ = p.client(c)
	})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "refusing a same-host connection") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "refusing a same-host connection"); n != 1 || !strings.Contains(logs.String(), "proof") {
		t.Errorf("want one warning, for the wrong key, none for the probe; logs:\n%s", logs.String())
	}
}
