// Package envtest runs the reference HTTP environment server
// (rollout/env/testdata/guess_server.py) for tests in any package.
package envtest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Python is the interpreter the server runs under: Debian's python3,
// which scripts/setup.sh installs.
const Python = "/usr/bin/python3"

// GuessServer starts the reference server on a free port of 127.0.0.1 and
// returns its URL and process; the process is killed when the test ends.
// The test fails when python3 is missing or the server does not announce
// its address within 60 s. args are the server's own (--step-reward R).
func GuessServer(t testing.TB, args ...string) (string, *exec.Cmd) {
	t.Helper()
	if _, err := os.Stat(Python); err != nil {
		t.Fatalf("%s is needed (scripts/setup.sh installs it): %v", Python, err)
	}
	_, here, _, _ := runtime.Caller(0)
	cmd := exec.Command(Python, append([]string{filepath.Join(filepath.Dir(here), "..", "testdata", "guess_server.py")}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		u, ok := strings.CutPrefix(strings.TrimSpace(s), "listening on ")
		if !ok {
			t.Fatalf("guess server said %q", s)
		}
		return u, cmd
	case <-time.After(60 * time.Second):
		t.Fatal("guess server did not start within 60 s")
	}
	return "", nil
}
