package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/connlimit/connlimittest"
)

// --max-conns-per-addr PORT=N raises (here: lowers) the cap per address of
// each listener of a node: one address holds N connections open on it and
// the next is refused, on the gossip, actor, control and dashboard ports;
// `rlnode dashboard --max-conns-per-addr` and `rlnode run
// --metrics-max-conns-per-addr` do the same for theirs. Bad values are
// refused naming the flag. (The caps were constants: a cluster whose
// members share one IPv6 /64 could not raise them.)
func TestMaxConnsPerAddrFlags(t *testing.T) {
	home := t.TempDir()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"start", "--max-conns-per-addr", "gossip=0"}, `--max-conns-per-addr gossip=0: "0": want a whole number from 1 to 65536`},
		{[]string{"start", "--max-conns-per-addr", "actor=65537"}, `--max-conns-per-addr actor=65537: "65537": want a whole number from 1 to 65536`},
		{[]string{"join", "127.0.0.1:1", "--max-conns-per-addr", "bulk=5"}, `--max-conns-per-addr bulk=5: port "bulk": want gossip, actor, control or dashboard`},
		{[]string{"join", "127.0.0.1:1", "--max-conns-per-addr", "5"}, `--max-conns-per-addr 5: want PORT=N`},
		{[]string{"dashboard", "--max-conns-per-addr", "-1"}, `rlnode dashboard: --max-conns-per-addr "-1": want a whole number from 1 to 65536`},
		{[]string{"run", "quickstart", "--metrics-max-conns-per-addr", "0"}, `rlnode run: --metrics-max-conns-per-addr "0": want a whole number`},
	} {
		_, errOut, code := runRlnode(t, home, c.args...)
		if code != 2 || !strings.Contains(errOut, c.says) {
			t.Errorf("rlnode %v: exit %d, %q; want 2, %q", c.args, code, errOut, c.says)
		}
	}

	n := startLogged(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "capped", "--gpus", "0",
		"--max-conns-per-addr", "gossip=2", "--max-conns-per-addr", "actor=3",
		"--max-conns-per-addr", "control=2", "--max-conns-per-addr", "dashboard=4",
		"--dashboard=127.0.0.1:0", "--dashboard-runs", home)
	connlimittest.HoldsAtMost(t, n.banner["control:"], "/status", 2)
	connlimittest.HoldsAtMost(t, strings.Trim(strings.TrimPrefix(n.banner["dashboard:"], "http://"), "/"), "/api/runs", 4)
	// The actor port answers a member handshake's opening (a client
	// speaks first) on a connection it admitted, and closes one it refused.
	hello := append([]byte("RLM1"), bytes.Repeat([]byte{7}, 32)...)
	for i := 1; i <= 4; i++ {
		c, err := net.Dial("tcp", n.banner["actors:"])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(hello)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err = c.Read(make([]byte, 1))
		if admitted := err == nil; admitted != (i <= 3) {
			t.Errorf("actor port, connection %d from one address with --max-conns-per-addr actor=3: admitted %v (%v)", i, admitted, err)
		}
	}
	// Gossip streams are admitted in the order they arrive, and memberlist
	// waits for the client to speak: the refusal is in the log.
	var ports []string
	for range 3 {
		c, err := net.Dial("tcp", n.banner["gossip:"])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ports = append(ports, c.LocalAddr().String())
	}
	log := n.waitLog(t, `msg="gossip: refusing a connection"`, "peer="+ports[2]+" ")
	for _, p := range ports[:2] {
		if strings.Contains(log, "peer="+p+" ") {
			t.Errorf("gossip stream %s, under the cap of 2, was refused:\n%s", p, log)
		}
	}
	if !strings.Contains(log, "127.0.0.1 already holds 2 connections") {
		t.Errorf("the gossip refusal does not name the cap:\n%s", log)
	}

	d := startUntil(t, home, "dashboard:", "dashboard", "--bind", "127.0.0.1:0", "--runs", home, "--max-conns-per-addr", "3")
	connlimittest.HoldsAtMost(t, strings.Trim(strings.TrimPrefix(d.banner["dashboard:"], "http://"), "/"), "/api/runs", 3)

	r := startUntil(t, home, "metrics endpoint:", "run", "quickstart", "--out", filepath.Join(home, "run"),
		"--metrics-addr", "127.0.0.1:0", "--metrics-max-conns-per-addr", "5")
	metrics := strings.TrimPrefix(strings.TrimSuffix(r.upLine, "/metrics"), "metrics endpoint: http://")
	connlimittest.HoldsAtMost(t, metrics, "/metrics", 5)
}

// loggedNode is an `rlnode start|join` whose banner was read and whose
// stderr is kept, line by line, as it comes.
type loggedNode struct {
	banner map[string]string // "gossip:", "actors:", "control:", "dashboard:" → address
	upLine string            // the line startUntil waited for
	mu     sync.Mutex
	log    strings.Builder
	more   chan struct{}
}

// startLogged starts rlnode with args and returns once its stdout says
// "others join with:" (a node's banner is complete).
func startLogged(t *testing.T, home string, args ...string) *loggedNode {
	t.Helper()
	return startUntil(t, home, "others join with:", args...)
}

// startUntil starts rlnode with args and returns once a line of its
// stdout starts with up (kept in upLine).
func startUntil(t *testing.T, home, up string, args ...string) *loggedNode {
	t.Helper()
	cmd := rlnodeCmd(t, home, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	n := &loggedNode{banner: map[string]string{}, more: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(errs)
		for sc.Scan() {
			n.mu.Lock()
			n.log.WriteString(sc.Text() + "\n")
			n.mu.Unlock()
			select {
			case n.more <- struct{}{}:
			default:
			}
		}
	}()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 2 && strings.HasSuffix(f[0], ":") {
				n.banner[f[0]] = f[1]
			}
			if strings.HasPrefix(sc.Text(), up) {
				n.upLine = sc.Text()
				close(ready)
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatalf("rlnode %v: not up in 60 s; stderr:\n%s", args, n.logText())
	}
	return n
}

func (n *loggedNode) logText() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.String()
}

// waitLog waits (bounded) for a line of the node's stderr holding each of
// parts and returns the whole log so far.
func (n *loggedNode) waitLog(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		log := n.logText()
		for _, line := range strings.Split(log, "\n") {
			found := true
			for _, p := range parts {
				found = found && strings.Contains(line, p)
			}
			if found {
				return log
			}
		}
		select {
		case <-n.more:
		case <-deadline:
			t.Fatalf("no log line with %q in 60 s:\n%s", parts, n.logText())
		}
	}
}
