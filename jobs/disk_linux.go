package jobs

import "syscall"

// statfsFree is the bytes an unprivileged writer may still put on the
// filesystem that holds dir; ok is false where it cannot be read.
func statfsFree(dir string) (free int64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
