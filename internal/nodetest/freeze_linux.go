//go:build linux

package nodetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitStopped waits until every thread of process pid has stopped: the
// kernel stops a process only once the thread picked to take the signal
// runs, so on a loaded machine its other threads go on working (answering
// a call) for a while after kill returns.
func waitStopped(t testing.TB, pid int) {
	t.Helper()
	allStopped := func() bool {
		stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		for _, p := range stats {
			b, err := os.ReadFile(p)
			if err != nil {
				continue // a thread that ended
			}
			// The state follows "(comm) ": T stopped, t traced.
			i := strings.LastIndexByte(string(b), ')')
			if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				return false
			}
		}
		return len(stats) > 0
	}
	for deadline := time.Now().Add(30 * time.Second); !allStopped(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped 30 s after SIGSTOP", pid)
		}
	}
}
