package nodetest

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// privateAttr starts the child in a mount namespace of its own (root).
func privateAttr() *syscall.SysProcAttr {
	if unix.Geteuid() != 0 {
		return nil // mountPrivate then fails, and the test is skipped
	}
	return &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
}

// mountPrivate mounts an empty tmpfs over dir, seen by this process only:
// its mounts are made private first, so nothing reaches the parent's
// namespace.
func mountPrivate(dir string) error {
	self, err1 := os.Readlink("/proc/self/ns/mnt")
	parent, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err1 != nil || err2 != nil || self == parent {
		return fmt.Errorf("not in a mount namespace of its own (%s, parent %s)", self, parent)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	return unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64m")
}
