package main

import (
	"strings"
	"testing"
)

// `rlnode run --owner-grace D` sets how long the cluster keeps a run's
// actors after the run's process is gone (the owner's grace, which the
// leader applies); values out of range, or the flag without --address,
// are refused naming it. (There was no way to set it but --detection.)
func TestRunOwnerGraceFlag(t *testing.T) {
	home := t.TempDir()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"run", "quickstart", "--owner-grace", "1m"}, "rlnode run: --owner-grace needs --address"},
		{[]string{"run", "quickstart", "--address", "127.0.0.1:1", "--owner-grace", "2s"}, "rlnode run: --owner-grace 2s: want 5s to 1h0m0s"},
		{[]string{"run", "quickstart", "--address", "127.0.0.1:1", "--owner-grace", "2h"}, "rlnode run: --owner-grace 2h0m0s: want 5s to 1h0m0s"},
	} {
		_, errOut, code := runRlnode(t, home, c.args...)
		if code != 2 || !strings.Contains(errOut, c.says) {
			t.Errorf("rlnode %v: exit %d, %q; want 2, %q", c.args, code, errOut, c.says)
		}
	}
}
