package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Nodes that cannot see a directory: startHidden starts `rlnode ...` (this
// test binary, see TestMain) in a mount namespace where the directory is
// covered by an empty tmpfs, so whatever the process opens under it on
// the test's file system is simply not there. Rollout nodes started so
// prove that a run's actors read nothing from the driver's output
// directory.

// hideMarker is a file startHidden puts in the hidden directory; the
// hidden process refuses to start if it can see it.
const hideMarker = "hidden-from-these-nodes"

// In the child, before TestMain: re-exec itself under unshare with the
// tmpfs mounted over RLNODE_TEST_HIDE. The exec chain (unshare, sh, this
// binary) keeps the PID, so the test's signals reach rlnode itself.
func init() {
	hide := os.Getenv("RLNODE_TEST_HIDE")
	if hide == "" || os.Getenv("RLNODE_CLI_MAIN") != "1" {
		return
	}
	if os.Getenv("RLNODE_TEST_HIDDEN") == hide {
		if _, err := os.Stat(filepath.Join(hide, hideMarker)); err == nil {
			fmt.Fprintf(os.Stderr, "hidden node: %s is still visible\n", hide)
			os.Exit(2)
		}
		return
	}
	exe, err := os.Executable()
	if err == nil {
		var unshare string
		if unshare, err = exec.LookPath("unshare"); err == nil {
			argv := append([]string{"unshare"}, strings.Fields(os.Getenv("RLNODE_TEST_UNSHARE"))...)
			argv = append(argv, "sh", "-c", `mount -t tmpfs rlnode-hidden "$RLNODE_TEST_HIDE" && exec "$0" "$@"`, exe)
			argv = append(argv, os.Args[1:]...)
			err = syscall.Exec(unshare, argv, append(os.Environ(), "RLNODE_TEST_HIDDEN="+hide))
		}
	}
	fmt.Fprintf(os.Stderr, "hidden node: %v\n", err)
	os.Exit(2)
}

var unshareOnce = struct {
	sync.Once
	flags string
	why   string
}{}

// unshareFlags are the unshare flags that give this process a mount
// namespace in which it may mount a tmpfs ("--mount" as root, with a user
// namespace otherwise); empty, with the reason, when neither works here.
func unshareFlags(t *testing.T) (string, string) {
	unshareOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rlnode-unshare-")
		if err != nil {
			unshareOnce.why = err.Error()
			return
		}
		defer os.RemoveAll(dir)
		for _, flags := range []string{"--mount", "--user --map-root-user --mount"} {
			args := append(strings.Fields(flags), "sh", "-c", `mount -t tmpfs probe "$0"`, dir)
			out, err := exec.Command("unshare", args...).CombinedOutput()
			if err == nil {
				unshareOnce.flags = flags
				return
			}
			unshareOnce.why += fmt.Sprintf("unshare %s: %v %s; ", flags, err, strings.TrimSpace(string(out)))
		}
	})
	return unshareOnce.flags, unshareOnce.why
}

// startHidden is startRlnode with a home of its own and, where a mount
// namespace can be had, hide covered by an empty tmpfs; hide must exist.
// Without one it says so in the test log and starts the node plainly.
func startHidden(t *testing.T, hide string, args ...string) *runningNode {
	t.Helper()
	home := t.TempDir()
	flags, why := unshareFlags(t)
	if flags == "" {
		t.Logf("no mount namespace here (%s): %s stays visible to rlnode %v", why, hide, args)
		return startRlnode(t, home, args...)
	}
	if err := os.WriteFile(filepath.Join(hide, hideMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"RLNODE_TEST_HIDE": hide, "RLNODE_TEST_UNSHARE": flags} {
		if err := os.Setenv(k, v); err != nil {
			t.Fatal(err)
		}
		defer os.Unsetenv(k)
	}
	return startRlnode(t, home, args...)
}
