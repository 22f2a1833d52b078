package verify

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// As root every run gets a uid of its own, so that its RLIMIT_NPROC
// counts its processes alone where no user namespace keeps the count
// apart (ModeRlimitOnly, ModeNamespaces where the kernel refuses a user
// namespace). A uid is claimed for one run at a time: within the process
// (every Sandbox of it, whatever its UIDBase) and across processes (a
// run's verifier, rollout actors, `rlnode verify` on one node) by an
// flock on a file named after the uid, which the kernel drops when the
// process dies.

// uidSpan is how many uids from UIDBase a claim tries.
const uidSpan = 1 << 16

// uidTurn is how many uids from UIDBase claims take in turn (more, up to
// uidSpan, only while those are all held): a uid just given back is not
// the next one claimed, so what its last run left (zombies its reaper has
// not yet reaped, which RLIMIT_NPROC still counts) is gone before it
// comes round again; and no more than this many claim files are made.
const uidTurn = 1024

var heldUIDs = struct {
	sync.Mutex
	uids map[int]bool
	next int // the offset from the base the next claim tries first
}{uids: map[int]bool{}}

// uidLockDir is where the uid claims' lock files live: root's own
// directory (a directory of another owner, or open to others, could be
// another user's to forge or hold claims in).
func uidLockDir(tempDir string) (string, error) {
	parent := "/run"
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		parent = tempDir
	}
	dir := filepath.Join(parent, "rlnode-sandbox-uids")
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("sandbox uid claims: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("sandbox uid claims: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != 0 || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("sandbox uid claims: %s is not a directory of root's closed to others (%v); remove it", dir, fi.Mode())
	}
	return dir, nil
}

// claimUID claims the first free uid from base for one run; release
// gives it back.
func claimUID(base int, tempDir string) (uid int, release func(), err error) {
	dir, err := uidLockDir(tempDir)
	if err != nil {
		return 0, nil, err
	}
	heldUIDs.Lock()
	defer heldUIDs.Unlock()
	for i := 0; i < uidSpan; i++ {
		uid = base + i
		if i < uidTurn {
			uid = base + (heldUIDs.next+i)%uidTurn
		}
		if heldUIDs.uids[uid] {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(uid)), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return 0, nil, fmt.Errorf("sandbox uid claims: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue // another process's run holds it
			}
			return 0, nil, fmt.Errorf("sandbox uid claims: lock %s: %w", f.Name(), err)
		}
		heldUIDs.uids[uid] = true
		heldUIDs.next = (uid - base + 1) % uidTurn
		claimed := uid
		return uid, func() {
			drainUID(claimed, 2*time.Second)
			heldUIDs.Lock()
			delete(heldUIDs.uids, claimed)
			heldUIDs.Unlock()
			f.Close() // drops the flock
		}, nil
	}
	return 0, nil, fmt.Errorf("sandbox uid claims: all %d uids from %d are in use", uidSpan, base)
}

// drainUID kills what still runs as uid and waits, at most limit, until
// it has died, before the uid is given to another run: a run's processes
// can outlive its end (a daemon that left its process group, in modes
// without a pid namespace; a pid namespace's for a moment), and
// RLIMIT_NPROC counts them for the next run of the same uid, whose first
// fork then failed (EAGAIN).
//
// Only uids past the ranges of system and login users (65536 and up; the
// default UIDBase is far past them) are drained: a UIDBase set low could
// name a uid that others' processes run as.
func drainUID(uid int, limit time.Duration) {
	if uid < 1<<16 {
		return
	}
	deadline := time.Now().Add(limit)
	for {
		pids := pidsOf(uid)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pidsOf lists the live processes whose real uid is uid (those /proc
// shows). Zombies are left out: they run nothing, and their reaper (pid
// 1, for a pid namespace's or a daemon's) may take a second, which every
// run's end would then wait.
func pidsOf(uid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(uid)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // gone meanwhile
		}
		zombie := false
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "State:"); ok {
				zombie = strings.HasPrefix(strings.TrimSpace(rest), "Z")
			}
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(rest); len(f) > 0 && f[0] == want && !zombie {
					out = append(out, pid)
				}
				break
			}
		}
	}
	return out
}
