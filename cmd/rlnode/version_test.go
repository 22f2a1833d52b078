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
	// The cap on the CPU's instructions reaches the kernel choice, and a
	// value it does not know is named on stderr.
	t.Setenv("RLNODE_CPU_ISA", "generic")
	if stdout, _, _ := runRlnode(t, t.TempDir(), "version"); !strings.Contains(stdout, "cpu kernel: generic-") {
		t.Errorf("RLNODE_CPU_ISA=generic rlnode version: %q, want the generic kernel", stdout)
	}
	t.Setenv("RLNODE_CPU_ISA", "avx9")
	if _, stderr, code := runRlnode(t, t.TempDir(), "version"); code != 0 || !strings.Contains(stderr, `RLNODE_CPU_ISA="avx9" is not one of`) {
		t.Errorf("RLNODE_CPU_ISA=avx9 rlnode version: exit %d, stderr %q, want 0 and a warning naming the variable", code, stderr)
	}
}
