package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A new user's slips, each answered with what to do instead:
//   - rlnode job cancel (Slurm's and Ray's word) said only "unknown
//     subcommand"; it names rlnode job stop;
//   - env rollout --out episodes.txt of a scripted or random policy wrote
//     JSONL under that name (a model's play refused it already);
//   - env rollout --policy scripts (scripted mistyped) was "no such
//     folder" alone, as if only a checkpoint could be meant;
//   - traces list without --store did not say what a store is, nor that
//     every run writes one.
func TestUserSlipsAreNamed(t *testing.T) {
	home := t.TempDir()
	out := filepath.Join(home, "episodes.txt")
	for _, c := range []struct {
		args []string
		code int
		says []string
	}{
		{[]string{"job", "cancel", "q1"}, 2, []string{`unknown subcommand "cancel" (rlnode job stop does that)`}},
		{[]string{"job", "kill", "q1"}, 2, []string{`unknown subcommand "kill" (rlnode job stop --now does that)`}},
		{[]string{"job", "frobnicate"}, 2, []string{`unknown subcommand "frobnicate"` + "\n"}},
		{[]string{"env", "rollout", "equations", "--policy", "scripted", "--episodes", "2", "--out", out}, 1,
			[]string{"--out " + out + ": scripted episodes go to a JSONL file (.jsonl)"}},
		{[]string{"env", "rollout", "equations", "--policy", "scripts", "--episodes", "2", "--out", filepath.Join(home, "e.jsonl")}, 1,
			[]string{"--policy scripts: no such folder", "the built-in policies are scripted and random"}},
		{[]string{"traces", "list"}, 2, []string{"--store is required (a trace store: a run's RUN/traces"}},
	} {
		_, stderr, code := runRlnode(t, home, c.args...)
		for _, want := range c.says {
			if code != c.code || !strings.Contains(stderr, want) {
				t.Errorf("rlnode %v: exit %d, %q; want exit %d and %q", c.args, code, stderr, c.code, want)
			}
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused --out %s was written", out)
	}
}
