package main

import (
	"strings"
	"testing"
)

// Every command and subcommand answers -h and --help with its usage and
// exit status 0, and an undefined flag with a message naming it and a
// non-zero status.
func TestEveryCommandHelp(t *testing.T) {
	cmds := [][]string{{"model", "init"}, {"model", "forward"}, {"recipe", "list"}, {"recipe", "show"}, {"recipe", "validate"},
		{"traces", "list"}, {"traces", "show"}, {"traces", "stats"}, {"traces", "export"}, {"traces", "annotate"}, {"traces", "reward"},
		{"ctxopt", "list"}, {"ctxopt", "validate"}, {"ctxopt", "train"}, {"env", "rollout"},
		{"job", "list"}, {"job", "status"}, {"job", "logs"}, {"job", "stop"}}
	for name := range commands {
		cmds = append(cmds, []string{name})
	}
	for _, c := range cmds {
		for _, h := range []string{"-h", "--help"} {
			code, stdout, stderr := run(t, append(c, h)...)
			if code != 0 || !strings.Contains(strings.ToLower(stdout+stderr), "usage") {
				t.Errorf("rlnode %s %s: exit %d, want 0 and its usage:\n%s%s", strings.Join(c, " "), h, code, stdout, stderr)
			}
		}
		if len(c) == 1 {
			// rlnode help COMMAND is the command's help, not the list of
			// commands (it was the list).
			code, stdout, stderr := run(t, "help", c[0])
			if code != 0 || !strings.Contains(stdout+stderr, "rlnode "+c[0]) || strings.Contains(stdout+stderr, "commands:") {
				t.Errorf("rlnode help %s: exit %d, want 0 and its own usage:\n%s%s", c[0], code, stdout, stderr)
			}
		}
		if c[0] == "plot" {
			continue // its one argument is a folder, which may start with -
		}
		code, stdout, stderr := run(t, append(c, "--no-such-flag")...)
		if code == 0 || !strings.Contains(stdout+stderr, "no-such-flag") {
			t.Errorf("rlnode %s --no-such-flag: exit %d, want non-zero and the flag named:\n%s%s", strings.Join(c, " "), code, stdout, stderr)
		}
	}
}

// rlnode traces show takes its flags before or after TRACE_ID, as the
// other commands take theirs around their arguments.
func TestTracesShowFlagsAfterTraceID(t *testing.T) {
	store := t.TempDir()
	id := docTraceStore(t, store)
	for _, args := range [][]string{{"traces", "show", "--store", store, id}, {"traces", "show", id, "--store", store}} {
		code, stdout, stderr := run(t, args...)
		if code != 0 || !strings.Contains(stdout, "trace "+id) {
			t.Errorf("rlnode %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		}
	}
	if code, _, stderr := run(t, "traces", "list", "--store", store, "extra"); code != 2 || !strings.Contains(stderr, `unexpected argument "extra"`) {
		t.Errorf("traces list with an argument: exit %d: %s", code, stderr)
	}
	if code, _, stderr := run(t, "traces", "show", id, id, "--store", store); code != 2 || !strings.Contains(stderr, "show takes one TRACE_ID") {
		t.Errorf("traces show with two ids: exit %d: %s", code, stderr)
	}
}
