//go:build linux

package shard

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/proctest"
	"golang.org/x/sys/unix"
)

// socketOf is the same-host bulk socket process pid listens on ("" if
// none): found by asking each socket in this user's directory who holds it.
func socketOf(t *testing.T, pid int) string {
	t.Helper()
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = os.TempDir()
	}
	names, _ := filepath.Glob(filepath.Join(base, fmt.Sprintf("rlnode-%d", os.Geteuid()), "bulk-*.sock"))
	for _, p := range names {
		c, err := net.Dial("unix", p)
		if err != nil {
			continue
		}
		rc, _ := c.(*net.UnixConn).SyscallConn()
		var cred *unix.Ucred
		_ = rc.Control(func(fd uintptr) { cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
		c.Close()
		if cred != nil && int(cred.Pid) == pid {
			return p
		}
	}
	return ""
}

// noSegmentDescriptors fails when process pid holds a descriptor of a
// shared segment (they are closed once mapped) or /dev/shm holds one.
func noSegmentDescriptors(t *testing.T, pid int) {
	t.Helper()
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, f := range fds {
		if l, err := os.Readlink(f); err == nil && strings.Contains(l, "memfd:rlnode") {
			t.Errorf("process %d holds %s", pid, l)
		}
	}
	shm, _ := filepath.Glob("/dev/shm/*rlnode*")
	if len(shm) > 0 {
		t.Errorf("/dev/shm holds %v", shm)
	}
}

// sharedSegmentsOf checks that process pid (what names) maps the gradient
// segments of a group of n ranks on shared buffers: n (its own and its
// peers'), none with the same-host path off.
func sharedSegmentsOf(t *testing.T, pid, n int, what string) {
	t.Helper()
	want := n
	if n < 2 || actor.HostID() == "" || os.Getenv("RLNODE_BULK_TCP") == "1" {
		want = 0
	}
	if got := segmentsMapped(t, pid); got != want {
		t.Errorf("%s (process %d) maps %d gradient segments, want %d", what, pid, got, want)
	}
}

// wantGradients checks what group g of n ranks in processes of this host
// says of its gradients: shared memory unless the same-host path is off.
func wantGradients(t *testing.T, g *Group, n int) {
	t.Helper()
	got := g.Gradients()
	switch {
	case n < 2:
		if got != "none" {
			t.Errorf("gradients of one rank: %q, want none", got)
		}
	case actor.HostID() == "" || os.Getenv("RLNODE_BULK_TCP") == "1":
		if !strings.HasPrefix(got, "transport: ") || !strings.Contains(got, "same-host path is off") {
			t.Errorf("gradients with the same-host path off: %q, want the transport and why", got)
		}
	case got != "shared memory":
		t.Errorf("gradients of %d ranks on one host: %q, want shared memory", n, got)
	}
}

// TestRingOverTCP runs the multi-process tests again with the same-host
// path switched off, so the ring over TCP stays tested on one machine.
func TestRingOverTCP(t *testing.T) {
	if os.Getenv("RLNODE_BULK_TCP") == "1" {
		t.Skip("already over TCP")
	}
	proctest.Rerun(t, "^(TestEquivalenceProcesses|TestRankKilledMidStep|TestRankStoppedMidStep)$", "RLNODE_BULK_TCP=1")
}
