package main

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/offline"
)

// TestEnvRolloutHTTP collects random play from the Python reference
// environment server over HTTP, then finds the server's port closed.
func TestEnvRolloutHTTP(t *testing.T) {
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("%s is needed (scripts/setup.sh installs it): %v", py, err)
	}
	srv := exec.Command(py, "../../rollout/env/testdata/guess_server.py")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	var url string
	select {
	case s := <-line:
		url = strings.TrimPrefix(strings.TrimSpace(s), "listening on ")
	case <-time.After(60 * time.Second):
		t.Fatal("the guess server did not start")
	}
	home := t.TempDir()
	file := filepath.Join(home, "guess.jsonl")
	stdout, stderr, code := runRlnode(t, home, "env", "rollout", "http", "--url", url, "--policy", "random", "--task", "heldout", "--episodes", "12", "--out", file)
	if code != 0 || !strings.Contains(stdout, "12 episodes of http (task heldout, policy random)") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	eps, err := offline.ReadJSONL(file)
	if err != nil || len(eps) != 12 {
		t.Fatalf("%d episodes, %v", len(eps), err)
	}
	for i, ep := range eps {
		if ep.Env != "http" || ep.Seed != 1+int64(i) || len(ep.Steps) == 0 || !strings.HasPrefix(ep.Steps[0].Action, "guess(") ||
			!strings.Contains(ep.Messages[0].Content, "- guess(n): guess the hidden number") {
			t.Fatalf("episode %d: %+v", i, ep)
		}
		if ep.Outcome != "solved" && ep.Outcome != "step_limit" && len(ep.Steps) != 8 {
			t.Fatalf("episode %d ended %q after %d steps", i, ep.Outcome, len(ep.Steps))
		}
	}

	srv.Process.Kill()
	srv.Wait()
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second); err == nil {
		c.Close()
		t.Skip("the killed server's port was taken again")
	}
	_, stderr, code = runRlnode(t, home, "env", "rollout", "http", "--url", url, "--policy", "random", "--out", file)
	if code != 1 || !strings.Contains(stderr, "http episode 0") || !strings.Contains(stderr, url+"/reset") || !strings.Contains(stderr, "connection refused") {
		t.Fatalf("a dead server: exit %d: %s", code, stderr)
	}
}
