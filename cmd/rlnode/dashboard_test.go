package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What rlnode dashboard and --dashboard refuse, before serving anything.
func TestDashboardRefusals(t *testing.T) {
	home := t.TempDir()
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"dashboard", "--runs", filepath.Join(home, "none")}, 2, "none: not a folder"},
		{[]string{"dashboard", "--runs", file}, 2, "f: not a folder"},
		{[]string{"dashboard", "--runs", home, "--traces", filepath.Join(home, "nostore")}, 2, "--traces " + filepath.Join(home, "nostore") + ": not a folder"},
		{[]string{"dashboard", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"dashboard", "--bind", "0.0.0.0:0", "--runs", home}, 1, "beyond loopback and no control token"},
		{[]string{"dashboard", "--bind", "127.0.0.1:99999", "--runs", home}, 1, "rlnode dashboard: listen on 127.0.0.1:99999: listen tcp: address 99999: invalid port"},
		{[]string{"start", "--bind", "127.0.0.1:0", "--dashboard=nowhere"}, 2, "want HOST:PORT"},
	} {
		_, errOut, code := runRlnode(t, home, c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("rlnode %v: exit %d, %q; want %d, %q", c.args, code, errOut, c.code, c.msg)
		}
	}
}
