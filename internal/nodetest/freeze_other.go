//go:build !linux

package nodetest

import "testing"

// waitStopped cannot tell, without /proc, when the process has stopped:
// the signal was sent.
func waitStopped(testing.TB, int) {}
