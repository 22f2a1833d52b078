package jobs

import "syscall"

// driverAttrs puts the driver in its own process group (a stop signals
// all it started) and has the kernel kill it when the node's thread that
// started it ends: a node killed with SIGKILL takes its drivers along,
// rather than leaving a second driver of a run that another node resumes.
func driverAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
