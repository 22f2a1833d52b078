// Package fsizetest runs part of a test in a child process whose files may
// not grow past a limit (RLIMIT_FSIZE), as on a full disk: a write past
// the limit fails with EFBIG, midway, where the real failure would. For
// tests of writers that must leave the old file whole. It must not be used
// outside tests.
package fsizetest

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

const (
	envTest  = "RLNODE_FSIZETEST_TEST"
	envLimit = "RLNODE_FSIZETEST_LIMIT"
	envDir   = "RLNODE_FSIZETEST_DIR"
)

// Child reports whether this process is the child Run started for test t,
// and the folder Run passed. In the child the file size limit is already
// set: the test goes on to the writes that must fail, failing the child
// (and so the parent's Run) if they do not.
func Child(t *testing.T) (dir string, ok bool) {
	t.Helper()
	if os.Getenv(envTest) != t.Name() {
		return "", false
	}
	n, err := strconv.ParseUint(os.Getenv(envLimit), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", envLimit, err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
		t.Fatalf("limit file size to %d bytes: %v", n, err)
	}
	return os.Getenv(envDir), true
}

// Run runs test t (a top-level test) again in a child process in which no
// file may grow past limit bytes, passing it dir, and fails t if the child
// test fails. Go's runtime ignores SIGXFSZ, so the write past the limit
// fails with EFBIG instead of killing the child.
func Run(t *testing.T, dir string, limit uint64) {
	t.Helper()
	if strings.Contains(t.Name(), "/") {
		t.Fatalf("fsizetest.Run: %s is a subtest; run it from a top-level test", t.Name())
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envTest+"="+t.Name(), envLimit+"="+strconv.FormatUint(limit, 10), envDir+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child with files limited to %d bytes: %v\n%s", limit, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the child with files limited to %d bytes did not run %s:\n%s", limit, t.Name(), out)
	}
}
