//go:build unix

package learner

import (
	"errors"
	"os"
	"syscall"
)

// freeBytes is the bytes an unprivileged writer may still put on the
// filesystem that holds dir; ok is false where it cannot be read.
func freeBytes(dir string) (free int64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}

// processAlive says whether process pid exists (one of another user's
// counts).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// openNoFollow opens path to read, refusing a symbolic link.
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
}
