//go:build !linux

package nodetest

import (
	"errors"
	"syscall"
)

func privateAttr() *syscall.SysProcAttr { return nil }

func mountPrivate(string) error { return errors.New("mount namespaces are Linux only") }

// MountPrivate needs Linux's mount namespaces.
func (n *Node) MountPrivate(string) error { return errors.New("mount namespaces are Linux only") }
