//go:build !linux

package shard

import (
	"syscall"
	"testing"
)

// freeze sends SIGSTOP to process pid (where /proc cannot say when it
// has stopped).
func freeze(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP to process %d: %v", pid, err)
	}
}

func socketOf(*testing.T, int) string { return "" }

func noSegmentDescriptors(*testing.T, int) {}

func wantGradients(*testing.T, *Group, int)         {}
func sharedSegmentsOf(*testing.T, int, int, string) {}
