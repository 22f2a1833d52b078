package cluster

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProcessGoneSeesAZombie: a node killed with SIGKILL stays a zombie
// until its parent reaps it, and its /proc entry, start time included,
// stays until then. A detached node's parent is init, which in a
// container may reap late: rlnode status said "connection refused" of
// the control endpoint instead of that the node is gone, and left the
// run file in place.
func TestProcessGoneSeesAZombie(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	pid := cmd.Process.Pid
	start, err := processStart(pid)
	if err != nil {
		t.Fatal(err)
	}
	if why := processGone(pid, start); why != "" {
		t.Fatalf("a running process is gone: %s", why)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped: wait (bounded) until the kernel shows it a zombie.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
		if err != nil {
			t.Fatalf("the unreaped child's /proc entry: %v", err)
		}
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed child did not become a zombie within 30 s")
		}
	}
	why := processGone(pid, start)
	_ = cmd.Wait()
	if why == "" || !strings.Contains(why, "not running") {
		t.Fatalf("processGone of a killed, unreaped process: %q, want it gone", why)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
