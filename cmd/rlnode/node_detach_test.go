package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// start and join --detach return once the node is up, logging under
// RLNODE_HOME/logs; a node joined from a wildcard bind advertises the
// address on the route to the one it joined (127.0.0.1 here); text status
// shows custom resources; stop --all stops every node on the host.
func TestDetachStatusStopAll(t *testing.T) {
	home := t.TempDir()
	t.Cleanup(func() { runRlnode(t, home, "stop", "--all") })
	var banner string
	detached := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := runRlnode(t, home, args...)
		banner = stdout
		if code != 0 {
			t.Fatalf("rlnode %v: exit %d\n%s%s", args, code, stdout, stderr)
		}
		logPath := ""
		for _, line := range strings.Split(stdout, "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "log:" {
				logPath = f[1]
			}
		}
		if !strings.HasPrefix(stdout, "node ") || !strings.Contains(strings.SplitN(stdout, "\n", 2)[0], " is up") {
			t.Errorf("rlnode %v: stdout does not begin with the node's \"is up\" line (the lines it logged while joining belong in its log):\n%s", args, stdout)
		}
		// The node's facts (addresses, key, memory, pid, log) are one
		// indented block under "is up", the commands to use after it:
		// pid and log came after the join line, apart from the others.
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		block := 1
		for block < len(lines) && strings.HasPrefix(lines[block], "  ") {
			block++
		}
		for _, line := range lines[block:] {
			if strings.HasPrefix(line, "  ") {
				t.Errorf("rlnode %v: %q is apart from the node's block of facts:\n%s", args, line, stdout)
			}
		}
		if filepath.Dir(logPath) != filepath.Join(home, "logs") {
			t.Fatalf("rlnode %v: log %q, want a file in %s:\n%s", args, logPath, filepath.Join(home, "logs"), stdout)
		}
		if b, err := os.ReadFile(logPath); err != nil || !strings.Contains(string(b), " is up") {
			t.Errorf("log %s: %v\n%s", logPath, err, b)
		}
		return gossipOf(stdout)
	}
	keyLine := func() string {
		for _, line := range strings.Split(banner, "\n") {
			if strings.HasPrefix(line, "  key:") {
				return line
			}
		}
		return ""
	}
	head := detached("start", "--bind", "127.0.0.1:0", "--detach")
	// The key this start created is said to be new, as without --detach
	// (the child that prints the banner found it made already).
	if want := filepath.Join(home, "cluster.key") + " (created)"; !strings.HasSuffix(keyLine(), want) {
		t.Errorf("start --detach on a new home: key line %q, want it to end %q", keyLine(), want)
	}
	joined := detached("join", head, "--bind", "0.0.0.0:0", "--resource", "TPU=4", "--detach")
	if strings.Contains(keyLine(), "(created)") {
		t.Errorf("join --detach: key line %q says created", keyLine())
	}
	if !strings.HasPrefix(joined, "127.0.0.1:") {
		t.Errorf("a node bound to 0.0.0.0 that joined %s advertises %s, want 127.0.0.1 (the address on the route to it)", head, joined)
	}
	stdout, stderr, code := runRlnode(t, home, "status", "--address", head)
	if code != 0 || !strings.Contains(stdout, "TPU=4/4") || !strings.Contains(stdout, "CUSTOM (free/total)") {
		t.Errorf("status: exit %d, want the custom resource TPU=4/4:\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = runRlnode(t, home, "stop", "--all")
	if code != 0 || strings.Count(stdout, " stopped\n") != 2 {
		t.Errorf("stop --all: exit %d, want two nodes stopped:\n%s%s", code, stdout, stderr)
	}
	if _, stderr, code := runRlnode(t, home, "status"); code != 1 || !strings.Contains(stderr, "no rlnode node runs on this host") {
		t.Errorf("status after stop --all: exit %d\n%s", code, stderr)
	}
}

// -h prints the command's usage and exits 0, as every other command does.
func TestNodeCommandsHelp(t *testing.T) {
	home := t.TempDir()
	for _, verb := range []string{"start", "join", "status", "stop"} {
		_, stderr, code := runRlnode(t, home, verb, "-h")
		if code != 0 || !strings.Contains(stderr, "usage: rlnode "+verb) {
			t.Errorf("rlnode %s -h: exit %d, want 0 and a usage line:\n%s", verb, code, stderr)
		}
		if strings.Contains(stderr, "`") {
			t.Errorf("rlnode %s -h: a backtick in the help text:\n%s", verb, stderr)
		}
	}
	_, stderr, code := runRlnode(t, home, "stop", "--address", "no-such-node")
	if code != 1 || !strings.Contains(stderr, "no node with gossip address, control address or id no-such-node") {
		t.Errorf("stop --address NODE_ID: exit %d:\n%s", code, stderr)
	}
}

// A detached node that fails to come up is reported with the reason from
// its log (here: its port is taken), not only with the log's name.
func TestDetachFailureSaysWhy(t *testing.T) {
	home := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// memberlist binds TCP and UDP on the port: hold the TCP side.
	_, stderr, code := runRlnode(t, home, "start", "--bind", l.Addr().String(), "--detach")
	if code != 1 || !strings.Contains(stderr, "the node exited") || !strings.Contains(stderr, "address already in use") {
		t.Errorf("start --detach on a port in use: exit %d, want 1 and the reason:\n%s", code, stderr)
	}
}

// The child a detaching start or join runs gets no --detach back in any
// form the flag package takes: `--detach=1` or `-detach=TRUE` given back
// made each child detach again, a chain of processes without end (seen:
// 142 in 6 s).
func TestDetachChildArgs(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"--detach", "--bind", "127.0.0.1:0"}, []string{"--bind", "127.0.0.1:0"}},
		{[]string{"-detach", "--detach=true", "--detach=1", "-detach=TRUE", "--detach=t", "--detach=false"}, nil},
		{[]string{"HOST:7946", "--detach=T", "--label", "detach=yes"}, []string{"HOST:7946", "--label", "detach=yes"}},
		{[]string{"--detachable", "--", "--detach"}, []string{"--detachable", "--", "--detach"}},
	} {
		if got := withoutDetach(c.in); strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("withoutDetach(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
