//go:build !linux

package vllm

import "syscall"

// serverProcAttr starts a server in a process group of its own (stop
// signals its whole group). Only Linux ends it with its node's process.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
