//go:build linux

package actor

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The same-host path's shared segments: the ring of slots a connection's
// payloads go through, its writer (send) and reader (localReader), and the
// memfd calls behind them. local_linux.go has the protocol around them.

// ringMap is a mapped ring segment, unmapped once its connection and
// every slot lent from it are done.
type ringMap struct {
	mem  []byte
	refs atomic.Int32
}

func (r *ringMap) state(i int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[localStateSize*i]))
}

func (r *ringMap) slot(i int) []byte {
	off := localHdr + i*localSlot
	return r.mem[off : off+localSlot : off+localSlot]
}

func (r *ringMap) unref() {
	if r.refs.Add(-1) == 0 {
		_ = unix.Munmap(r.mem)
	}
}

// acquire claims a free slot for writing, or returns -1.
func (r *ringMap) acquire() int {
	for i := range localSlots {
		if r.state(i).CompareAndSwap(0, 1) {
			return i
		}
	}
	return -1
}

// newSegment creates a memfd of size bytes mapped read-write (populated
// at once when populate: cheaper than a fault per page for memory that is
// written whole right away).
func newSegment(name string, size int, populate bool) (fd int, mem []byte, err error) {
	fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd_create: %w", err)
	}
	flags := unix.MAP_SHARED
	if populate {
		flags |= unix.MAP_POPULATE
	}
	if err = unix.Ftruncate(fd, int64(size)); err == nil && size > 0 {
		mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, flags)
	}
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("segment of %d bytes: %w", size, err)
	}
	return fd, mem, nil
}

// reopenReadOnly opens segment fd again, read-only: a process given the
// new descriptor can read and map the segment but neither write it nor
// map it writable (mprotect refuses too).
func reopenReadOnly(fd int) (int, error) {
	ro, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("reopen segment read-only: %w", err)
	}
	return ro, nil
}

func seal(fd int, seals int) error {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("seal segment: %w", err)
	}
	return nil
}

// mapReceived maps a segment another process sent: it must be a memfd of
// exactly size bytes sealed against resizing (a peer that could shrink it
// would fault the mapping's readers). flags are added to MAP_SHARED.
func mapReceived(fd int, size int, prot, flags int) ([]byte, error) {
	if err := checkSegment(fd, size); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, nil
	}
	mem, err := unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED|flags)
	if err != nil {
		return nil, fmt.Errorf("map segment: %w", err)
	}
	return mem, nil
}

// checkSegment checks that fd is a segment of size bytes sealed against
// resizing.
func checkSegment(fd int, size int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("segment: %w", err)
	}
	if st.Size != int64(size) {
		return fmt.Errorf("segment of %d bytes, want %d", st.Size, size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		return fmt.Errorf("segment not sealed against resizing (seals %#x, %v)", seals, err)
	}
	return nil
}

// preadFull reads len(dst) bytes of fd at off: one copy by the kernel,
// without mapping the segment (mapping and unmapping tens of MB costs more
// than the copy).
func preadFull(fd int, dst []byte, off int64) error {
	for len(dst) > 0 {
		n, err := unix.Pread(fd, dst[:min(len(dst), 1<<30)], off)
		if err != nil {
			return fmt.Errorf("read segment: %w", err)
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		dst, off = dst[n:], off+int64(n)
	}
	return nil
}

// progress moves the connection's deadline bulkProgress ahead (servers;
// a client's deadline follows its context).
type deadliner func()

// send writes p through the ring (doorbells on the socket, the first one
// after prefix, in one write) and returns once the reader has answered
// every doorbell. An error before the first answer is a staleErr (the
// other end may have closed an idle connection).
func (l *localConn) send(prefix, p []byte, progress deadliner) (err error) {
	outstanding, answered := 0, false
	defer func() {
		if err != nil && !answered {
			err = stale(err)
		}
	}()
	var reply [1]byte
	readReply := func() error {
		if progress != nil {
			progress()
		}
		if _, err := io.ReadFull(l.r, reply[:]); err != nil {
			return err
		}
		if reply[0] != localFreed && reply[0] != localLent {
			return fmt.Errorf("same-host ring: answer %#x to a doorbell", reply[0])
		}
		outstanding--
		answered = true
		return nil
	}
	var hdr [6]byte
	if len(p) == 0 && len(prefix) > 0 {
		_, err := l.c.Write(prefix)
		return err
	}
	// A payload that fits one slot goes whole (the reader may lend it); a
	// longer one in pieces small enough to be read from the cache the
	// writer left them in.
	piece := localSlot
	if len(p) > localSlot {
		piece = localPiece
	}
	for len(p) > 0 {
		k := min(len(p), piece)
		i := l.ring.acquire()
		for i < 0 && outstanding > 0 {
			if err := readReply(); err != nil {
				return err
			}
			i = l.ring.acquire()
		}
		if progress != nil {
			progress()
		}
		binary.BigEndian.PutUint32(hdr[2:], uint32(k))
		if i < 0 {
			// Every slot is lent: the chunk goes on the socket.
			hdr[0], hdr[1] = localInline, 0
			bufs := net.Buffers{prefix, hdr[:], p[:k]}
			if _, err := bufs.WriteTo(l.c); err != nil {
				return err
			}
		} else {
			copy(l.ring.slot(i), p[:k])
			hdr[0], hdr[1] = localDoorbell, byte(i)
			bufs := net.Buffers{prefix, hdr[:]}
			if _, err := bufs.WriteTo(l.c); err != nil {
				l.ring.state(i).Store(0)
				return err
			}
			outstanding++
		}
		prefix = nil
		p = p[k:]
	}
	for outstanding > 0 {
		if err := readReply(); err != nil {
			return err
		}
	}
	return nil
}

// localReader reads a payload of n bytes that the other end sends
// through the ring. It is the io.Reader a PushHandler gets, and lends a
// payload that fits one slot (Lend).
type localReader struct {
	l        *localConn
	left     int64 // bytes not yet announced
	cur      []byte
	slot     int // the slot cur lies in, or -1 (inline, in buf)
	buf      []byte
	progress deadliner
	started  bool
	lent     bool // a lent slot's answer is still to send (with the status)
	err      error
}

// next reads the next chunk's doorbell (or inline bytes).
func (r *localReader) next() error {
	if r.progress != nil {
		r.progress()
	}
	var hdr [6]byte
	if _, err := io.ReadFull(r.l.r, hdr[:]); err != nil {
		return err
	}
	k := int64(binary.BigEndian.Uint32(hdr[2:]))
	if k == 0 || k > localSlot || k > r.left {
		return fmt.Errorf("same-host ring: chunk of %d bytes with %d to come", k, r.left)
	}
	r.started = true
	r.left -= k
	switch hdr[0] {
	case localDoorbell:
		i := int(hdr[1])
		if i >= localSlots {
			return fmt.Errorf("same-host ring: slot %d of %d", i, localSlots)
		}
		r.slot, r.cur = i, r.l.ring.slot(i)[:k]
	case localInline:
		if cap(r.buf) < int(k) {
			r.buf = make([]byte, k)
		}
		r.slot, r.cur = -1, r.buf[:k]
		if _, err := io.ReadFull(r.l.r, r.cur); err != nil {
			return err
		}
	default:
		return fmt.Errorf("same-host ring: doorbell %#x", hdr[0])
	}
	return nil
}

// done frees the current slot and answers its doorbell.
func (r *localReader) done() error {
	if r.slot < 0 {
		return nil
	}
	r.l.ring.state(r.slot).Store(0)
	r.slot = -1
	_, err := r.l.c.Write([]byte{localFreed})
	return err
}

func (r *localReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if len(r.cur) == 0 {
		if r.left == 0 {
			return 0, io.EOF
		}
		if err := r.next(); err != nil {
			r.err = err
			return 0, err
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	if len(r.cur) == 0 {
		if err := r.done(); err != nil {
			r.err = err
			return n, err
		}
	}
	return n, nil
}

// Lend returns the whole payload where it lies in the sender's segment,
// without a copy, when nothing of it was read and it came in one slot;
// release frees the slot (once; the caller must not touch p after).
// ok is false otherwise: read the payload instead.
func (r *localReader) Lend() (p []byte, release func(), ok bool) {
	if r.started || r.err != nil || r.left == 0 || r.left > localSlot {
		return nil, nil, false
	}
	if err := r.next(); err != nil {
		r.err = err
		return nil, nil, false
	}
	if r.slot < 0 {
		// Inline: the bytes are this reader's own.
		p, r.cur, r.buf = r.cur, nil, nil
		return p, func() {}, true
	}
	i, ring := r.slot, r.l.ring
	p, r.cur, r.slot = r.cur, nil, -1
	ring.refs.Add(1)
	r.lent = true
	var once sync.Once
	return p, func() {
		once.Do(func() {
			ring.state(i).Store(0)
			ring.unref()
		})
	}, true
}

// drain reads and frees what is left of the payload.
func (r *localReader) drain() error {
	for r.err == nil && (len(r.cur) > 0 || r.left > 0) {
		if len(r.cur) == 0 {
			if r.err = r.next(); r.err != nil {
				break
			}
		}
		r.cur = nil
		r.err = r.done()
	}
	return r.err
}

// PayloadLender is implemented by the reader a PushHandler gets when the
// payload lies in shared memory: Lend hands over the payload in place
// (see localReader.Lend), so the receiver can use it without a copy.
type PayloadLender interface {
	Lend() (p []byte, release func(), ok bool)
}
