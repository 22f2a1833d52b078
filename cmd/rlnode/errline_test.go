package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each failing command prints its error once: one line that starts with
// the command's name, names the thing at fault (the address, file or flag)
// once, and repeats no prefix ("rlnode dashboard: dashboard: listen on X:
// listen tcp X: …" was one); it exits non-zero.
func TestErrorLinesNameTheFaultOnce(t *testing.T) {
	home := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	taken := busy.Addr().String()
	dead := fmt.Sprintf("127.0.0.1:%d", freePort(t)) // nothing listens there
	key := filepath.Join(home, "cluster.key")
	if err := os.WriteFile(key, []byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(home, "open.key")
	if err := os.WriteFile(open, []byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(home, "missing.key")
	for _, c := range []struct {
		args  []string
		fault string // named exactly once
		says  string
	}{
		{[]string{"dashboard", "--bind", taken, "--runs", home}, taken, "address already in use"},
		{[]string{"start", "--bind", taken, "--key-file", key}, taken, "gossip: listen tcp"},
		{[]string{"start", "--bind", "127.0.0.1:0", "--status-bind", taken, "--key-file", key}, taken, "control endpoint: listen tcp"},
		{[]string{"start", "--bind", "127.0.0.1:0", "--dashboard=" + taken, "--key-file", key}, taken, "dashboard: listen tcp"},
		{[]string{"start", "--bind", "127.0.0.1:0", "--actor-bind", taken, "--key-file", key}, taken, "actor transport: listen tcp"},
		{[]string{"start", "--bind", "nowhere", "--key-file", key}, "nowhere", "missing port"},
		{[]string{"start", "--bind", "127.0.0.1:0", "--log-level", "loud", "--key-file", key}, "loud", "want debug, info, warn or error"},
		{[]string{"start", "--bind", "127.0.0.1:0", "--key-file", key, "--tls-cert", missing + ".pem", "--tls-key", key, "--tls-ca", key}, missing + ".pem", "TLS: cert"},
		{[]string{"start", "--bind", "127.0.0.1:0", "--key-file", key, "--tls-cert", key, "--tls-key", missing + ".pem", "--tls-ca", key}, missing + ".pem", "TLS: key"},
		{[]string{"start", "--bind", "127.0.0.1:0", "--dashboard=nowhere", "--key-file", key}, "nowhere", "want HOST:PORT"},
		{[]string{"join", dead, "--bind", "127.0.0.1:0", "--key-file", key}, dead, "no member answered"},
		{[]string{"join", dead, "--bind", "127.0.0.1:0", "--key-file", missing}, missing, "no such file"},
		{[]string{"join", dead, "--bind", "127.0.0.1:0", "--key-file", open}, open, "mode 0644"},
		{[]string{"start", "--bind", "127.0.0.1:0", "--key-file", open}, open, "chmod 600"},
		{[]string{"run", "quickstart", "--address", dead, "--bind", "127.0.0.1:0", "--key-file", key, "--out", filepath.Join(home, "r1")}, dead, "no member answered"},
		{[]string{"run", "quickstart", "--address", dead, "--key-file", open, "--out", filepath.Join(home, "r2")}, open, "mode 0644"},
		{[]string{"run", "quickstart", "--metrics-addr", taken, "--out", filepath.Join(home, "r3")}, taken, "--metrics-addr"},
		{[]string{"ctxopt", "validate", "nonesuch"}, "nonesuch", "no built-in"},
		{[]string{"ctxopt", "validate", filepath.Join(home, "none.yaml")}, filepath.Join(home, "none.yaml"), "no such file"},
		{[]string{"ctxopt", "train", "ctxopt_bandit", "--address", dead, "--bind", "127.0.0.1:0", "--key-file", key, "--out", filepath.Join(home, "c1")}, dead, "no member answered"},
		{[]string{"traces", "list", "--store", filepath.Join(home, "nostore")}, filepath.Join(home, "nostore"), "no such file"},
		{[]string{"serve", "--upstream", "http://" + dead, "--listen", taken}, taken, "address already in use"},
	} {
		_, errOut, code := runRlnode(t, home, c.args...)
		line, _, _ := strings.Cut(errOut, "\n")
		cmd := "rlnode " + c.args[0] + ":"
		if c.args[0] == "ctxopt" || c.args[0] == "traces" {
			cmd = "rlnode " + c.args[0] + " " + c.args[1] + ":"
		}
		// The fix a mode error suggests names the file a second time.
		named := strings.Count(strings.Replace(line, "chmod 600 "+c.fault, "", 1), c.fault)
		if code == 0 || !strings.HasPrefix(line, cmd) || named != 1 || !strings.Contains(line, c.says) {
			t.Errorf("rlnode %v: exit %d, first line %q; want non-zero, starting %q, naming %q once and saying %q\n(stderr: %s)",
				c.args, code, line, cmd, c.fault, c.says, errOut)
			continue
		}
		parts := strings.Split(line, ": ")
		seen := map[string]bool{}
		for _, p := range parts {
			if seen[p] {
				t.Errorf("rlnode %v: %q repeats %q", c.args, line, p)
			}
			seen[p] = true
		}
	}
}
