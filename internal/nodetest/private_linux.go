package nodetest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
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

// mountPrivate mounts an empty tmpfs over dir (none where dir is ""),
// seen by this process only: its mounts are made private first, so
// nothing reaches the parent's namespace.
func mountPrivate(dir string) error {
	self, err1 := os.Readlink("/proc/self/ns/mnt")
	parent, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err1 != nil || err2 != nil || self == parent {
		return fmt.Errorf("not in a mount namespace of its own (%s, parent %s)", self, parent)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	if dir == "" {
		return nil
	}
	return unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64m")
}

// MountPrivate mounts an empty tmpfs over dir in the child node's mount
// namespace (Options.OwnMounts), as a host whose share of dir went away
// sees it from then on.
func (n *Node) MountPrivate(dir string) error {
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(n.Cmd.Process.Pid), "-m", "mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount a tmpfs over %s in node %s's namespace: %v: %s", dir, n.ID, err, out)
	}
	return nil
}
