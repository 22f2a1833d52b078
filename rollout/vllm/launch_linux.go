//go:build linux

package vllm

import "syscall"

// serverProcAttr starts a server in a process group of its own (stop
// signals its whole group) that gets SIGKILL when its node's process
// ends: a node that is killed must not leave its servers holding their
// GPUs and ports, serving weights no run updates.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
