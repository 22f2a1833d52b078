//go:build !linux

package jobs

import "syscall"

// driverAttrs puts the driver in its own process group. Without Linux's
// parent-death signal a driver outlives a node killed with SIGKILL.
func driverAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
