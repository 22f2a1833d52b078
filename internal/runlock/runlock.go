// Package runlock is the lock a run holds on its folder for as long as
// it lasts (rlnode run, rlnode ctxopt train), and the probe a job taking
// a run over waits on. It must not remove or write anything but the lock
// file.
package runlock

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlnode/rlnode/internal/outpath"
)

// File is the lock a running `rlnode run` holds on its folder.
const File = "run.lock"

// Lock takes dir's run lock (an flock on DIR/run.lock, which the
// kernel releases when the process ends however it ends; NFS passes it
// on as a POSIX lock) for as long as the run lasts, so that a second run
// on the same folder (--resume or --overwrite while the first still
// runs, a batch job started twice) is refused, naming the process that
// holds it, instead of both writing checkpoints and cutting each other's
// metrics. unlock removes the file, and dir when this call made it and it
// is still empty.
func Lock(dir string) (unlock func(), err error) {
	made := false
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		made = true
	}
	if err := outpath.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	path := filepath.Join(dir, File)
	for range 3 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("run lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			holder, _ := io.ReadAll(io.LimitReader(f, 512))
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				who := strings.TrimSpace(string(holder))
				if who == "" {
					who = "another process"
				}
				return nil, fmt.Errorf("--out %s is in use by another run (%s holds %s): wait for it to end or stop it first", dir, who, path)
			}
			return nil, fmt.Errorf("run lock %s: %w", path, err)
		}
		// The holder before us may have removed the file after we opened
		// it: a lock on a file no longer at path keeps nobody out.
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(path, &now) != nil || held.Ino != now.Ino || held.Dev != now.Dev {
			f.Close()
			continue
		}
		host, _ := os.Hostname()
		_ = f.Truncate(0)
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d on %s since %s\n", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))), 0)
		return func() {
			_ = os.Remove(path)
			f.Close()
			if made {
				_ = os.Remove(dir) // only if still empty
			}
		}, nil
	}
	return nil, fmt.Errorf("run lock %s: the file kept changing under this process", path)
}

// Held says whether a process holds dir's run lock now, and what the
// lock file says of it ("pid N on HOST since T"). It takes a shared lock
// for an instant to see, which a run starting in that instant would take
// for another run's: call it before starting one, not beside one.
func Held(dir string) (holder string, held bool) {
	f, err := os.Open(filepath.Join(dir, File))
	if err != nil {
		return "", false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 512))
		return strings.TrimSpace(string(b)), errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return "", false
}
