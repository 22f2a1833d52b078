//go:build linux

package shard

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/rlnode/rlnode/actor"
	"golang.org/x/sys/unix"
)

const (
	futexWaitOp   = 0 // FUTEX_WAIT, shared between processes
	futexWakeOp   = 1 // FUTEX_WAKE
	sharedSeals   = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	sharedMemName = "rlnode-grad"
)

// mapping is a mapped segment: its data and its header's first bucket
// line.
type mapping struct {
	mem   []byte
	data  []float32
	words unsafe.Pointer
}

func (m *mapping) close() {
	if m != nil && m.mem != nil {
		_ = unix.Munmap(m.mem)
		m.mem, m.data = nil, nil
	}
}

func newMapping(mem []byte, floats, bucket int) *mapping {
	_, dataOff, _ := sharedLayout(floats, bucket)
	return &mapping{mem: mem, data: floatsOf(mem[dataOff : dataOff+4*floats]), words: unsafe.Pointer(&mem[sharedHdr])}
}

// segment is this rank's own segment while the ranks set up.
type segment struct {
	fd      int
	mapping *mapping
	offer   offer
}

// closeFD closes the descriptor (the mapping stays).
func (s *segment) closeFD() {
	if s != nil && s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// release closes the descriptor and unmaps the segment.
func (s *segment) release() {
	if s != nil {
		s.closeFD()
		s.mapping.close()
	}
}

// pidNamespace identifies this process's pid namespace (0: unknown).
func pidNamespace() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// newSharedSegment creates this rank's segment for floats elements in
// buckets of bucket: a memfd, 0600, sealed against resizing, mapped
// read-write with its pages in place, and its offer.
func newSharedSegment(floats, bucket int) (*segment, error) {
	host := hostID(actor.HostID())
	if host == "" {
		return nil, errors.New("no host identity")
	}
	_, _, size := sharedLayout(floats, bucket)
	fd, err := unix.MemfdCreate(sharedMemName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	fail := func(err error) (*segment, error) {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return fail(fmt.Errorf("chmod segment: %w", err))
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail(fmt.Errorf("segment of %d bytes: %w", size, err))
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, sharedSeals); err != nil {
		return fail(fmt.Errorf("seal segment: %w", err))
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail(fmt.Errorf("map segment of %d bytes: %w", size, err))
	}
	o := offer{ok: true, host: host, pid: uint32(os.Getpid()), fd: uint32(fd), pidNS: pidNamespace(),
		floats: uint64(floats), bucket: uint64(bucket), segBytes: uint64(size)}
	if _, err := rand.Read(o.token[:]); err != nil {
		_ = unix.Munmap(mem)
		return fail(err)
	}
	copy(mem, sharedMagic)
	copy(mem[4:20], o.token[:])
	binary.BigEndian.PutUint64(mem[20:], o.floats)
	binary.BigEndian.PutUint64(mem[28:], o.bucket)
	return &segment{fd: fd, mapping: newMapping(mem, floats, bucket), offer: o}, nil
}

// mapPeerSegment maps the segment another rank offered, after
// checking that it is this user's, private, sealed against resizing, of
// the size agreed and holding the token offered.
func mapPeerSegment(o offer) (*mapping, error) {
	path := fmt.Sprintf("/proc/%d/fd/%d", o.pid, o.fd)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 || uint64(st.Size) != o.segBytes {
		return nil, fmt.Errorf("%s: mode %o, owner %d, %d bytes; want a private segment of user %d, %d bytes", path, st.Mode, st.Uid, st.Size, os.Geteuid(), o.segBytes)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		return nil, fmt.Errorf("%s: not sealed against resizing (seals %#x, %v)", path, seals, err)
	}
	mem, err := unix.Mmap(fd, 0, int(o.segBytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	if string(mem[:4]) != sharedMagic || !bytes.Equal(mem[4:20], o.token[:]) ||
		binary.BigEndian.Uint64(mem[20:]) != o.floats || binary.BigEndian.Uint64(mem[28:]) != o.bucket {
		_ = unix.Munmap(mem)
		return nil, fmt.Errorf("%s is not the segment offered", path)
	}
	return newMapping(mem, int(o.floats), int(o.bucket)), nil
}

// peerProc watches a peer's process: gone says when it has exited.
type peerProc struct {
	pid   int
	pidfd int
	ok    bool
}

// watchProcess watches the process of offer o when it is another process
// in this one's pid namespace (else a peer's death shows only as an abort
// or the deadline).
func watchProcess(o, mine offer) peerProc {
	if o.pid == mine.pid || o.pidNS == 0 || o.pidNS != mine.pidNS {
		return peerProc{}
	}
	fd, err := unix.PidfdOpen(int(o.pid), unix.O_CLOEXEC)
	if err != nil {
		return peerProc{}
	}
	return peerProc{pid: int(o.pid), pidfd: fd, ok: true}
}

func (p peerProc) gone() bool {
	if !p.ok {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

func (p peerProc) close() {
	if p.ok {
		unix.Close(p.pidfd)
	}
}

// futexWait sleeps until *p is woken, no longer v, or d has passed.
func futexWait(p *uint32, v uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(p)), futexWaitOp, uintptr(v), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every process sleeping on *p.
func futexWake(p *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(p)), futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}
