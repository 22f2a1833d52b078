package main

import (
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		stdout, stderr, code := runRlnode(t, t.TempDir(), arg)
		if code != 0 || !strings.HasPrefix(stdout, "rlnode ") || !strings.Contains(stdout, " go1.") {
			t.Errorf("rlnode %s: exit %d, stdout %q, stderr %q; want 0 and \"rlnode VERSION ... goX\"", arg, code, stdout, stderr)
		}
	}
}
