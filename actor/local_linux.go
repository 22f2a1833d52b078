//go:build linux

package actor

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The same-host path: two nodes on one machine move bulk payloads through
// shared memory instead of loopback TCP. Each node listens on a unix
// socket in a directory only its user can enter (localDir); a client
// learns a peer's socket by asking over the peer's bulk TCP port (after
// the member handshake there) and uses it when the peer reports this
// host's identity and the socket opens: the shared file is the proof of
// one host. A connection on the socket is checked for this user
// (SO_PEERCRED) and passes the member handshake; the client then sends a
// memfd segment (a ring of localSlots slots, sealed against resizing) with
// its hello. No segment has a name: a memfd lives only while a process
// maps it or holds its descriptor, so a killed peer leaves none behind,
// and a killed node's socket file is removed by the next node that starts
// under the same user.
//
// Requests are those of the TCP path; the payload bytes go through the
// ring. The writer copies a chunk into a free slot and rings a doorbell on
// the socket ('d', slot, length); the reader answers every doorbell with
// 'c' (slot read and freed) or 'l' (slot lent to the receiver, freed when
// it is done with it, with no message; sent with the push's status). A
// writer finding no free slot waits for an answer when some doorbell has
// none yet, else (every slot lent) sends the chunk inline on the socket
// ('i', length, bytes), so a lent slot never blocks a transfer. An offer
// read by more than one reader is written once into its own sealed
// segment, whose descriptor every local reader receives and reads.

const (
	localSlots     = 8
	localSlot      = bulkChunk
	localStateSize = 64 // one cache line per slot's state word
	localHdr       = 4096
	localSegSize   = localHdr + localSlots*localSlot
	// localPiece is the chunk of a payload longer than a slot: 1 MiB
	// streamed 256 MiB at 1.5–3× the speed of whole 4 MiB slots on a
	// 2-core machine (docs/samehost.md), the copy out finding it in cache.
	localPiece = 1 << 20

	localQueryMagic = "RLBL"
	localHelloMagic = "RLSH"
	// localViewMagic is a fetch whose reader maps the owner's copy
	// (FetchView) and answers once it has unmapped it.
	localViewMagic = "RLBM"

	localDoorbell = 'd'
	localInline   = 'i'
	localFreed    = 'c'
	localLent     = 'l'
	localStream   = 'r'
	localMapped   = 'm'

	localSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
)

// localOff is set (RLNODE_BULK_TCP=1 or Config.BulkTCPOnly) to keep every
// transfer on TCP.
func localOff(c *Config) bool { return c.BulkTCPOnly || os.Getenv("RLNODE_BULK_TCP") == "1" }

// hostIDOnce caches HostID.
var hostIDOnce = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// HostID identifies the running kernel (its boot id): nodes reporting the
// same one may be on one host, which the same-host path then checks by
// opening the other node's socket. Empty where the system does not say.
func HostID() string { return hostIDOnce() }

// localDir is this user's private directory for bulk sockets: under
// $XDG_RUNTIME_DIR or the temporary directory, created 0700, refused when
// it is a link, another user's, or open to others.
func localDir() (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = os.TempDir()
	}
	uid := os.Geteuid()
	dir := filepath.Join(base, fmt.Sprintf("rlnode-%d", uid))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid || st.Mode&0o077 != 0 {
		return "", fmt.Errorf("%s is not a directory private to user %d (mode %o, owner %d)", dir, uid, st.Mode, st.Uid)
	}
	return dir, nil
}

// sweepLocal removes the sockets in dir that no process listens on any
// more (nodes that were killed).
func sweepLocal(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, "bulk-*.sock"))
	for _, p := range names {
		c, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT) {
			_ = os.Remove(p)
		}
	}
}

// errLocalDenied is a same-host hello refused: this node is not a member.
var errLocalDenied = errors.New("refused: this node is not a member")

// localServer is a node's same-host endpoint.
type localServer struct {
	lis  *net.UnixListener
	path string
	host string
}

// localPeer is what this node knows of a peer's same-host endpoint.
type localPeer struct {
	path string // empty: use TCP
}

// localState is a Bulk's same-host state.
type localState struct {
	srv   *localServer
	peers map[string]localPeer       // by bulk address
	idle  map[string][]*localConn    // client connections by bulk address
	conns map[*net.UnixConn]struct{} // the server's connections
	// spares are offer segments kept for reuse (freeOffer).
	spares []spareSeg
}

// startLocal opens the node's same-host endpoint; without one (switched
// off, no private directory, no unix sockets) every transfer uses TCP.
func (b *Bulk) startLocal() {
	b.loc = localState{peers: map[string]localPeer{}, idle: map[string][]*localConn{}, conns: map[*net.UnixConn]struct{}{}}
	if localOff(&b.sys.cfg) || HostID() == "" {
		return
	}
	dir, err := localDir()
	if err != nil {
		b.sys.log.Warn("bulk: the same-host path is off", "err", err)
		return
	}
	sweepLocal(dir)
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	path := filepath.Join(dir, "bulk-"+hex.EncodeToString(raw[:])+".sock")
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		b.sys.log.Warn("bulk: the same-host path is off", "err", err)
		return
	}
	lis.SetUnlinkOnClose(true)
	_ = os.Chmod(path, 0o600)
	b.loc.srv = &localServer{lis: lis, path: path, host: HostID()}
	b.wg.Add(1)
	go b.serveLocal()
}

// LocalPath is the node's same-host socket, empty when it has none.
func (b *Bulk) LocalPath() string {
	if b.loc.srv == nil {
		return ""
	}
	return b.loc.srv.path
}

// closeLocal closes the endpoint, the server's connections and the idle
// client connections; b.mu is held.
func (b *Bulk) closeLocal() {
	if b.loc.srv != nil {
		b.loc.srv.lis.Close()
	}
	for c := range b.loc.conns {
		c.Close()
	}
	for addr, cs := range b.loc.idle {
		for _, c := range cs {
			c.close()
		}
		delete(b.loc.idle, addr)
	}
	for _, sp := range b.loc.spares {
		sp.close()
	}
	b.loc.spares = nil
}

// recvFD reads len(buf) bytes from c with at most one descriptor attached.
func recvFD(c *net.UnixConn, buf []byte) (fd int, err error) {
	fd = -1
	oob := make([]byte, unix.CmsgSpace(4*4))
	for got := 0; got < len(buf); {
		n, oobn, _, _, err := c.ReadMsgUnix(buf[got:], oob)
		if oobn > 0 {
			msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				fds, _ := unix.ParseUnixRights(&m)
				for _, f := range fds {
					if fd < 0 && perr == nil {
						fd = f
					} else {
						unix.Close(f)
					}
				}
			}
		}
		if err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			return -1, err
		}
		if n == 0 {
			if fd >= 0 {
				unix.Close(fd)
			}
			return -1, io.ErrUnexpectedEOF
		}
		got += n
	}
	return fd, nil
}

// sameUser checks that the process at the other end of c runs as this
// node's user.
func sameUser(c *net.UnixConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("peer process %d runs as user %d, not %d", cred.Pid, cred.Uid, os.Geteuid())
	}
	return nil
}

func (b *Bulk) serveLocal() {
	defer b.wg.Done()
	for {
		c, err := b.loc.srv.lis.AcceptUnix()
		if err != nil {
			return
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			c.Close()
			return
		}
		b.loc.conns[c] = struct{}{}
		b.wg.Add(1)
		b.mu.Unlock()
		go func() {
			defer b.wg.Done()
			b.handleLocal(c)
			b.mu.Lock()
			delete(b.loc.conns, c)
			b.mu.Unlock()
		}()
	}
}

// handleLocal serves one same-host connection: user check, member
// handshake, the hello with the ring segment, then fetch and push
// requests as on TCP until the client closes it or errs.
func (b *Bulk) handleLocal(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := sameUser(c); err != nil {
		b.sys.warn.Warn(b.sys.log, "bulk: refusing a same-host connection", "err", err)
		return
	}
	if p := b.sys.proof; p != nil {
		if err := p.server(c); err != nil {
			// A connection closed before its first byte is a liveness
			// probe (sweepLocal, run by every node that starts) or a
			// client that left: nothing to warn about.
			if !errors.Is(err, errNoHello) {
				b.sys.warn.Warn(b.sys.log, "bulk: refusing a same-host connection", "err", err)
			}
			return
		}
	}
	var hello [6]byte
	fd, err := recvFD(c, hello[:])
	if err != nil {
		return
	}
	from, err := readString16Body(c, binary.BigEndian.Uint16(hello[4:]))
	if err != nil || string(hello[:4]) != localHelloMagic || fd < 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		b.sys.warn.Warn(b.sys.log, "bulk: malformed same-host hello")
		return
	}
	if !b.sys.allowed(from) {
		unix.Close(fd)
		b.sys.warn.Warn(b.sys.log, "bulk: refusing a non-member", "from", from)
		_, _ = c.Write([]byte{bulkStatusDenied})
		return
	}
	mem, err := mapReceived(fd, localSegSize, unix.PROT_READ|unix.PROT_WRITE, 0)
	unix.Close(fd)
	if err != nil {
		b.sys.warn.Warn(b.sys.log, "bulk: same-host hello", "from", from, "err", err)
		_, _ = c.Write([]byte{bulkStatusFailed})
		return
	}
	ring := &ringMap{mem: mem}
	ring.refs.Store(1)
	defer ring.unref()
	if _, err := c.Write([]byte{bulkStatusOK}); err != nil {
		return
	}
	// The server reads through a buffer (no descriptors come after the
	// hello): a request's header and first doorbell arrive in one write.
	lc := &localConn{c: c, r: bufio.NewReaderSize(c, 4096), ring: ring}
	for first := true; ; first = false {
		wait := bulkServerIdle
		if first {
			wait = 30 * time.Second
		}
		_ = c.SetDeadline(time.Now().Add(wait))
		var magic [4]byte
		if _, err := io.ReadFull(lc.r, magic[:]); err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(bulkProgress))
		var ok bool
		switch string(magic[:]) {
		case bulkMagic:
			ok = b.serveLocalFetch(lc, false)
		case localViewMagic:
			ok = b.serveLocalFetch(lc, true)
		case bulkPushMagic:
			ok = b.serveLocalPush(lc, from)
		default:
			b.sys.warn.Warn(b.sys.log, "bulk: malformed same-host request", "from", from)
			return
		}
		if !ok {
			return
		}
	}
}

func readString16Body(r io.Reader, n uint16) (string, error) {
	s := make([]byte, n)
	if _, err := io.ReadFull(r, s); err != nil {
		return "", err
	}
	return string(s), nil
}

// localConn is one same-host connection with its ring, at either end.
type localConn struct {
	c    *net.UnixConn
	r    io.Reader // c, or a buffer over it
	ring *ringMap
	used time.Time
	// held: a view's answer is still to send (FetchView's release sends
	// it); spent: the connection cannot carry it (its context ended).
	held, spent bool
}

func (l *localConn) close() {
	l.c.Close()
	l.ring.unref()
}

// serveLocalPush is servePush on a same-host connection.
func (b *Bulk) serveLocalPush(l *localConn, hello string) bool {
	c, in := l.c, l.r
	name, hdr, n, err := readPushPreamble(in)
	if err != nil {
		if errors.Is(err, errPushHeader) {
			b.sys.warn.Warn(b.sys.log, "bulk: malformed same-host push", "from", hello, "err", err)
		}
		return false
	}
	progress := func() { _ = c.SetDeadline(time.Now().Add(bulkProgress)) }
	r := &localReader{l: l, left: n, slot: -1, progress: progress}
	status := byte(bulkStatusOK)
	b.mu.Lock()
	h := b.handlers[name]
	b.mu.Unlock()
	switch {
	case !b.sys.allowed(hello):
		b.sys.warn.Warn(b.sys.log, "bulk: refusing a non-member", "from", hello)
		status = bulkStatusDenied
	case h == nil:
		status = bulkStatusAbsent
	default:
		if err := h(hdr, n, r); err != nil {
			if r.err != nil {
				return false
			}
			b.sys.warn.Warn(b.sys.log, "bulk: push receiver failed", "receiver", name, "err", err)
			status = bulkStatusFailed
		}
	}
	if err := r.drain(); err != nil {
		return false
	}
	progress()
	out := []byte{status}
	if r.lent {
		out = []byte{localLent, status}
	}
	if _, err := c.Write(out); err != nil {
		return false
	}
	return status != bulkStatusDenied
}

// serveLocalFetch is serveFetch on a same-host connection: the payload
// goes through the ring, or, for an offer with several readers or a
// reader that maps it (view), as a read-only descriptor of a segment
// holding the whole offer (made at the first such fetch, shared by every
// later one). Such a reader answers once it is done with the segment: a
// view's reader once it has unmapped it, within bulkViewHold.
func (b *Bulk) serveLocalFetch(l *localConn, view bool) bool {
	c := l.c
	var hdr [32 + 16 + 2]byte
	if _, err := io.ReadFull(l.r, hdr[:]); err != nil {
		return false
	}
	id := string(hdr[0:32])
	off := binary.BigEndian.Uint64(hdr[32:40])
	n := binary.BigEndian.Uint64(hdr[40:48])
	from, err := readString16Body(l.r, binary.BigEndian.Uint16(hdr[48:50]))
	if err != nil {
		return false
	}
	if !b.sys.allowed(from) {
		b.sys.warn.Warn(b.sys.log, "bulk: refusing a non-member", "from", from)
		_, _ = c.Write([]byte{bulkStatusDenied})
		return false
	}
	o, goOn := b.offerFor(c, id, off, n)
	if o == nil {
		return goOn
	}
	// Counted before the bytes go (the reader may answer its caller
	// before this goroutine would count them after).
	b.sys.stats.bulkServed.Add(n)
	b.sys.stats.bulkLocal.Add(n)
	if fd := b.offerSegment(o, view); fd >= 0 {
		_, _, err := c.WriteMsgUnix([]byte{bulkStatusOK, localMapped}, unix.UnixRights(fd), nil)
		if err != nil {
			b.doneWith(o, false)
			return false
		}
		if view {
			_ = c.SetDeadline(time.Now().Add(bulkViewHold))
		}
		var ack [1]byte
		_, err = io.ReadFull(l.r, ack[:])
		// Without the answer the reader may still map the segment: it is
		// then closed, never reused, when the offer ends.
		answered := err == nil && ack[0] == bulkStatusOK
		b.doneWith(o, answered)
		if !answered {
			return false
		}
	} else {
		if _, err := c.Write([]byte{bulkStatusOK, localStream}); err != nil {
			return false
		}
		if err := l.send(nil, o.data[off:off+n], func() { _ = c.SetDeadline(time.Now().Add(bulkProgress)) }); err != nil {
			return false
		}
	}
	b.readDone(id, o, off+n)
	return true
}

// bulkViewHold is how long the owner of a viewed offer waits for the
// reader to be done with it; a reader that holds it longer keeps its
// mapping, and the segment is then not reused.
const bulkViewHold = 2 * time.Minute

// offerSeg is an offer's copy in a memfd sealed against resizing, whose
// read-only descriptor local readers receive (they can neither write it
// nor map it writable). Locks: s.mu before b.mu.
type offerSeg struct {
	mu    sync.Mutex
	many  bool     // the offer has several readers: every local one reads the copy
	made  bool     // the copy was made (or failed)
	seg   spareSeg // the copy; seg.fd is -1 until made
	inUse int      // readers sent the descriptor that have not answered yet
	// tainted: a reader given the descriptor did not answer, and may
	// still map it: the segment is never reused. ended: the offer ended
	// with readers in inUse; the last one's answer disposes of it.
	tainted, ended bool
}

// localSpares is how many offer segments a node keeps for reuse: a new
// segment costs a page fault and a cleared page per 4 KiB, which for a
// weight version's tens of MB is as much as the copy itself, and every
// version of one model has the same size.
const localSpares = 2

// offerSegment returns the read-only descriptor of o's shared copy,
// making it at the first call (in a spare segment of its size when there
// is one), or -1 when o has one reader that does not map it (the ring
// streams it with no copy first), has ended, or the copy cannot be made.
// The caller passes it on and calls doneWith.
func (b *Bulk) offerSegment(o *offer, view bool) int {
	s := o.shared
	if s == nil || (!s.many && !view) {
		return -1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return -1
	}
	if !s.made {
		s.made = true
		sp := b.spareSegment(len(o.data))
		var err error
		if sp.fd < 0 {
			// Written through a mapping the owner keeps with the segment:
			// a copy into mapped memory costs a third of pwrite's.
			if sp.fd, sp.mem, err = newSegment("rlnode-offer", len(o.data), true); err == nil {
				if err = seal(sp.fd, localSeals); err == nil {
					sp.ro, err = reopenReadOnly(sp.fd)
				}
			}
		}
		if err != nil {
			sp.close()
			b.sys.warn.Warn(b.sys.log, "bulk: no shared copy of an offer", "err", err)
			return -1
		}
		copy(sp.mem, o.data)
		s.seg = sp
	}
	if s.seg.ro >= 0 {
		s.inUse++
	}
	return s.seg.ro
}

// doneWith records that a reader given o's segment has answered (ok), or
// failed to.
func (b *Bulk) doneWith(o *offer, ok bool) {
	s := o.shared
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inUse--
	s.tainted = s.tainted || !ok
	if s.ended && s.inUse == 0 {
		b.dispose(s)
	}
}

// spareSegment takes a kept segment of exactly size bytes, or returns
// one with fd -1.
func (b *Bulk) spareSegment(size int) spareSeg {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, sp := range b.loc.spares {
		if len(sp.mem) == size {
			b.loc.spares = append(b.loc.spares[:i], b.loc.spares[i+1:]...)
			return sp
		}
	}
	return spareSeg{fd: -1, ro: -1}
}

// freeOffer disposes of o's shared copy once the offer has ended: at
// once when no reader holds it, else at the last one's answer.
func (b *Bulk) freeOffer(o *offer) {
	s := o.shared
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	if s.inUse == 0 {
		b.dispose(s)
	}
}

// dispose keeps s's segment for the next offer of its size, when every
// reader given it answered (a view's reader once it has unmapped it),
// or closes it (readers that mapped it keep their mappings; the memory
// goes with the last). s.mu is held.
func (b *Bulk) dispose(s *offerSeg) {
	sp := s.seg
	s.seg = spareSeg{fd: -1, ro: -1}
	if sp.fd < 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !s.tainted && !b.closed {
		b.loc.spares = append(b.loc.spares, sp)
		if len(b.loc.spares) <= localSpares {
			return
		}
		sp = b.loc.spares[0]
		b.loc.spares = b.loc.spares[1:]
	}
	sp.close()
}

// spareSeg is an offer segment: its owner's descriptor and mapping, and
// its readers' descriptor.
type spareSeg struct {
	fd, ro int
	mem    []byte
}

func (sp spareSeg) close() {
	if sp.mem != nil {
		_ = unix.Munmap(sp.mem)
	}
	for _, fd := range []int{sp.fd, sp.ro} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// newOfferShared is the shared copy's state of an offer of readers: every
// offer on a node with a same-host endpoint has one (a single reader may
// ask to map it).
func (b *Bulk) newOfferShared(readers int) *offerSeg {
	if b.loc.srv != nil {
		return &offerSeg{seg: spareSeg{fd: -1, ro: -1}, many: readers > 1}
	}
	return nil
}

// serveLocalQuery answers a TCP query for the same-host endpoint: status,
// then the host id and socket path.
func (b *Bulk) serveLocalQuery(c net.Conn, r io.Reader) bool {
	from, err := readString16(r)
	if err != nil {
		return false
	}
	if !b.sys.allowed(from) {
		b.sys.warn.Warn(b.sys.log, "bulk: refusing a non-member", "from", from, "peer", c.RemoteAddr().String())
		_, _ = c.Write([]byte{bulkStatusDenied})
		return false
	}
	if b.loc.srv == nil {
		_, err := c.Write([]byte{bulkStatusAbsent})
		return err == nil
	}
	out := []byte{bulkStatusOK}
	out = appendString16(out, b.loc.srv.host)
	out = appendString16(out, b.loc.srv.path)
	_, err = c.Write(out)
	return err == nil
}

func appendString16(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// localPath is the same-host socket of the peer at bulk address addr,
// asked of it once; empty means TCP.
func (b *Bulk) localPath(ctx context.Context, addr string) string {
	if b.loc.srv == nil {
		return ""
	}
	b.mu.Lock()
	p, known := b.loc.peers[addr]
	b.mu.Unlock()
	if known {
		return p.path
	}
	from := b.sys.addr
	req := appendString16([]byte(localQueryMagic), from)
	var host, path string
	err := b.do(ctx, addr, func(c *bulkConn) error {
		if _, err := c.Write(req); err != nil {
			return stale(err)
		}
		var st [1]byte
		if _, err := io.ReadFull(c, st[:]); err != nil {
			return stale(err)
		}
		if st[0] != bulkStatusOK {
			return nil
		}
		var err error
		if host, err = readString16(c); err != nil {
			return err
		}
		path, err = readString16(c)
		return err
	})
	if err != nil {
		return "" // not cached: ask again next time
	}
	if host != b.loc.srv.host || !filepath.IsAbs(path) {
		path = ""
	}
	b.mu.Lock()
	b.loc.peers[addr] = localPeer{path: path}
	b.mu.Unlock()
	return path
}

// forgetLocal drops what this node knew of addr's same-host endpoint
// after it failed; the next transfer asks again.
func (b *Bulk) forgetLocal(addr string) {
	b.mu.Lock()
	delete(b.loc.peers, addr)
	b.mu.Unlock()
}

// localConnTo returns an idle same-host connection to the peer at addr or
// dials path, reused saying which.
func (b *Bulk) localConnTo(ctx context.Context, addr, path string) (l *localConn, reused bool, err error) {
	b.mu.Lock()
	for cs := b.loc.idle[addr]; len(cs) > 0; cs = b.loc.idle[addr] {
		l = cs[len(cs)-1]
		b.loc.idle[addr] = cs[:len(cs)-1]
		if time.Since(l.used) < bulkIdle {
			b.mu.Unlock()
			return l, true, nil
		}
		l.close()
	}
	b.mu.Unlock()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, false, err
	}
	c := nc.(*net.UnixConn)
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > handshakeTimeout {
		deadline = time.Now().Add(handshakeTimeout)
	}
	_ = c.SetDeadline(deadline)
	fail := func(err error) (*localConn, bool, error) {
		c.Close()
		return nil, false, err
	}
	if err := sameUser(c); err != nil {
		return fail(err)
	}
	if p := b.sys.proof; p != nil {
		if err := p.client(c); err != nil {
			return fail(err)
		}
	}
	fd, mem, err := newSegment("rlnode-ring", localSegSize, false)
	if err != nil {
		return fail(err)
	}
	if err := seal(fd, localSeals); err != nil {
		unix.Close(fd)
		_ = unix.Munmap(mem)
		return fail(err)
	}
	from := b.sys.addr
	hello := appendString16([]byte(localHelloMagic), from)
	_, _, err = c.WriteMsgUnix(hello, unix.UnixRights(fd), nil)
	unix.Close(fd)
	if err != nil {
		_ = unix.Munmap(mem)
		return fail(err)
	}
	var st [1]byte
	if _, err := io.ReadFull(c, st[:]); err != nil || st[0] != bulkStatusOK {
		_ = unix.Munmap(mem)
		if err == nil && st[0] == bulkStatusDenied {
			err = errLocalDenied
		} else if err == nil {
			err = fmt.Errorf("hello refused (status %d)", st[0])
		}
		return fail(err)
	}
	_ = c.SetDeadline(time.Time{})
	ring := &ringMap{mem: mem}
	ring.refs.Store(1)
	return &localConn{c: c, r: c, ring: ring}, false, nil
}

// sweepLocalIdle takes out the idle same-host connections last used
// bulkIdle before now and returns their closes; b.mu is held.
func (b *Bulk) sweepLocalIdle(now time.Time) (spent []func()) {
	for addr, ls := range b.loc.idle {
		kept := ls[:0]
		for _, l := range ls {
			if now.Sub(l.used) >= bulkIdle {
				spent = append(spent, l.close)
			} else {
				kept = append(kept, l)
			}
		}
		if len(kept) == 0 {
			delete(b.loc.idle, addr)
		} else {
			b.loc.idle[addr] = kept
		}
	}
	return spent
}

// localIdleConns counts the idle same-host connections; b.mu is held.
func (b *Bulk) localIdleConns() int {
	n := 0
	for _, ls := range b.loc.idle {
		n += len(ls)
	}
	return n
}

// releaseLocal keeps l for reuse, or closes it.
func (b *Bulk) releaseLocal(addr string, l *localConn) {
	l.used = time.Now()
	b.mu.Lock()
	if !b.closed && len(b.loc.idle[addr]) < bulkPoolPerPeer {
		b.loc.idle[addr] = append(b.loc.idle[addr], l)
		l = nil
	}
	b.mu.Unlock()
	if l != nil {
		l.close()
	}
}

// doLocal runs req on a same-host connection to the peer at addr, as do
// does on TCP. handled is false when the peer has no same-host endpoint
// for this node (or it cannot be reached): the caller uses TCP then.
func (b *Bulk) doLocal(ctx context.Context, addr string, req func(l *localConn) error) (handled bool, err error) {
	path := b.localPath(ctx, addr)
	if path == "" {
		return false, nil
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return true, err
		}
		l, reused, err := b.localConnTo(ctx, addr, path)
		if err != nil {
			if ctx.Err() != nil {
				return true, ctx.Err()
			}
			if errors.Is(err, ErrNotMember) || errors.Is(err, errLocalDenied) {
				return true, err
			}
			// The socket is gone or refuses us: TCP, and ask again later.
			b.sys.warn.Warn(b.sys.log, "bulk: same-host path unavailable, using TCP", "peer", addr, "err", err)
			b.forgetLocal(addr)
			return false, nil
		}
		stop := context.AfterFunc(ctx, func() { _ = l.c.SetDeadline(time.Now()) })
		err = req(l)
		if !stop() {
			if err == nil && l.held {
				l.spent = true // its holder closes it
				return true, nil
			}
			l.close()
			if err == nil {
				return true, nil
			}
			return true, ctxErr(ctx, err)
		}
		if err == nil {
			if !l.held {
				b.releaseLocal(addr, l)
			}
			return true, nil
		}
		l.close()
		var st staleErr
		if errors.As(err, &st) {
			if reused && attempt == 0 {
				continue
			}
			err = st.err
		}
		return true, ctxErr(ctx, err)
	}
}

// fetchAnswer reads the answer to a same-host fetch: the status, then
// the mode (localMapped with the segment's descriptor, or localStream).
// status is the error a refusal means; fd is -1 unless mode is
// localMapped.
func fetchAnswer(l *localConn, ref BulkRef, off int64, n int) (fd int, mode byte, status, err error) {
	var st [2]byte
	fd, err = recvFD(l.c, st[:1])
	if err != nil {
		return -1, 0, nil, stale(err)
	}
	if st[0] != bulkStatusOK {
		if fd >= 0 {
			unix.Close(fd)
		}
		status = fetchStatusErr(ref, off, n, st[0])
		if st[0] == bulkStatusDenied {
			return -1, 0, status, status
		}
		return -1, 0, status, nil
	}
	if fd < 0 {
		if fd, err = recvFD(l.c, st[1:]); err != nil {
			return -1, 0, nil, err
		}
	} else if _, err := io.ReadFull(l.c, st[1:]); err != nil {
		unix.Close(fd)
		return -1, 0, nil, err
	}
	switch {
	case st[1] == localMapped && fd < 0:
		return -1, 0, nil, errors.New("shared offer without its segment")
	case st[1] == localMapped:
		return fd, localMapped, nil, nil
	case fd >= 0:
		unix.Close(fd)
	}
	if st[1] != localStream {
		return -1, 0, nil, fmt.Errorf("fetch answer mode %#x", st[1])
	}
	return -1, localStream, nil, nil
}

// readStream reads a streamed answer of len(dst) bytes through the ring.
// progress, when not nil, runs as each chunk is read.
func readStream(l *localConn, dst []byte, progress deadliner) error {
	r := &localReader{l: l, left: int64(len(dst)), slot: -1, progress: progress}
	if _, err := io.ReadFull(r, dst); err != nil {
		return fmt.Errorf("after %d of %d bytes: %w", int64(len(dst))-r.left-int64(len(r.cur)), len(dst), err)
	}
	return nil
}

// fetchLocal is FetchRange over the same-host path; handled is false when
// the peer is not on this host.
// progress runs as the answer and each chunk arrive.
func (b *Bulk) fetchLocal(ctx context.Context, ref BulkRef, off int64, dst []byte, req []byte, progress deadliner) (handled bool, err error) {
	var status error
	handled, err = b.doLocal(ctx, ref.Addr, func(l *localConn) error {
		if _, err := l.c.Write(req); err != nil {
			return stale(err)
		}
		fd, mode, st, err := fetchAnswer(l, ref, off, len(dst))
		if status = st; st != nil || err != nil {
			return err
		}
		progress()
		if mode == localStream {
			return readStream(l, dst, progress)
		}
		err = checkSegment(fd, int(ref.Size))
		if err == nil {
			err = preadFull(fd, dst, off)
		}
		unix.Close(fd)
		if err != nil {
			_, _ = l.c.Write([]byte{bulkStatusFailed})
			return err
		}
		_, err = l.c.Write([]byte{bulkStatusOK})
		return err
	})
	if !handled {
		return false, nil
	}
	if status != nil {
		return true, status
	}
	if err != nil {
		return true, fmt.Errorf("bulk fetch from %s (same host): %w", ref.Addr, err)
	}
	b.sys.stats.bulkFetched.Add(uint64(len(dst)))
	b.sys.stats.bulkLocal.Add(uint64(len(dst)))
	return true, nil
}

// viewLocal is FetchView over the same-host path: the owner's copy
// mapped read-only (and populated: reading it faults no more), or, when
// the owner has no copy to give, the bytes streamed into a new buffer.
// handled is false when the peer is not on this host.
func (b *Bulk) viewLocal(ctx context.Context, ref BulkRef, req []byte, progress deadliner) (p []byte, release func(), handled bool, err error) {
	var status error
	var mapped []byte
	var held *localConn
	handled, err = b.doLocal(ctx, ref.Addr, func(l *localConn) error {
		if _, err := l.c.Write(req); err != nil {
			return stale(err)
		}
		fd, mode, st, err := fetchAnswer(l, ref, 0, int(ref.Size))
		if status = st; st != nil || err != nil {
			return err
		}
		progress()
		if mode == localStream {
			p = make([]byte, ref.Size)
			return readStream(l, p, progress)
		}
		mem, err := mapReceived(fd, int(ref.Size), unix.PROT_READ, unix.MAP_POPULATE)
		unix.Close(fd)
		if err != nil {
			_, _ = l.c.Write([]byte{bulkStatusFailed})
			return err
		}
		p, mapped, held, l.held = mem, mem, l, true
		return nil
	})
	if !handled {
		return nil, nil, false, nil
	}
	if status != nil {
		return nil, nil, true, status
	}
	if err != nil {
		return nil, nil, true, fmt.Errorf("bulk fetch from %s (same host): %w", ref.Addr, err)
	}
	b.sys.stats.bulkFetched.Add(uint64(ref.Size))
	b.sys.stats.bulkLocal.Add(uint64(ref.Size))
	if held == nil {
		return p, func() {}, true, nil
	}
	var once sync.Once
	return p, func() {
		once.Do(func() {
			if mapped != nil {
				_ = unix.Munmap(mapped)
			}
			// The answer tells the owner this reader is done with its
			// copy; it goes after the unmapping.
			if !held.spent {
				_ = held.c.SetWriteDeadline(time.Now().Add(bulkProgress))
				_, err := held.c.Write([]byte{bulkStatusOK})
				_ = held.c.SetWriteDeadline(time.Time{})
				if err == nil {
					held.held = false
					b.releaseLocal(ref.Addr, held)
					return
				}
			}
			held.close()
		})
	}, true, nil
}

// pushLocal is Push over the same-host path; handled is false when the
// peer is not on this host. progress runs before each wait on the
// receiver and as each piece goes.
func (b *Bulk) pushLocal(ctx context.Context, addr, name string, req, payload []byte, progress deadliner) (handled bool, err error) {
	var status error
	handled, err = b.doLocal(ctx, addr, func(l *localConn) error {
		if err := l.send(req, payload, progress); err != nil {
			return err
		}
		progress()
		var st [1]byte
		if _, err := io.ReadFull(l.c, st[:]); err != nil {
			return err
		}
		status = pushStatusErr(addr, name, st[0])
		if st[0] == bulkStatusDenied {
			return status
		}
		return nil
	})
	if !handled {
		return false, nil
	}
	if status != nil {
		return true, status
	}
	if err != nil {
		return true, fmt.Errorf("bulk push to %s (same host): %w", addr, err)
	}
	b.sys.stats.bulkLocal.Add(uint64(len(payload)))
	return true, nil
}
