// Package proctest runs the current test binary again as a separate process,
// so multi-node tests put every other node in a real process of its own (two
// protoactor remotes in one process share gRPC's global logger, see
// shared/DESIGN.md). The child's TestMain recognises it by the environment
// the test passes and runs the node instead of the tests.
package proctest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Child is the re-executed test binary.
type Child struct {
	Cmd   *exec.Cmd
	Stdin io.WriteCloser // closing it asks the child to stop gracefully
	Line  string         // the first line the child printed
	// Exited is closed when the child process has ended.
	Exited <-chan struct{}
}

// Start runs the test binary with env added to the environment, waits up to
// timeout for the first line on its stdout, and registers a cleanup that
// closes its stdin and kills it if it has not exited 10 s later. Output after
// the first line is drained so the child never blocks on a full pipe.
func Start(t testing.TB, timeout time.Duration, env ...string) *Child {
	t.Helper()
	return StartWith(t, timeout, nil, env...)
}

// StartWith is Start with attr as the child's process attributes (new
// namespaces, for one).
func StartWith(t testing.TB, timeout time.Duration, attr *syscall.SysProcAttr, env ...string) *Child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = attr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// An OS pipe of our own, not StdoutPipe: Wait (below, concurrent with
	// the reads) closes a StdoutPipe as soon as the child exits, which
	// loses a line the child printed just before exiting (an "ERR ..."
	// from a child that fails fast). Ours reads to EOF whatever Wait does.
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	cmd.Stderr = os.Stderr
	err = cmd.Start()
	w.Close() // the child holds its own copy
	if err != nil {
		out.Close()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			first <- sc.Text()
		}
		close(first)
		_, _ = io.Copy(io.Discard, out)
		out.Close()
	}()
	select {
	case l, ok := <-first:
		if !ok {
			t.Fatalf("child %v exited without a line", env)
		}
		return &Child{Cmd: cmd, Stdin: stdin, Line: l, Exited: exited}
	case <-time.After(timeout):
		t.Fatalf("child %v printed nothing within %s", env, timeout)
	}
	return nil
}

// isolatedEnv names the test a re-executed binary runs by itself.
const isolatedEnv = "RLNODE_PROCTEST_ISOLATED"

// Isolated runs the calling test alone in a fresh process of the test
// binary (within 3 minutes) and reports its outcome and output here; it
// returns true in the calling process, where the test should return at
// once, and false in the fresh one, where it goes on. A test whose process
// runs a cluster node of its own uses it: the other tests of its package
// may hold an actor system already, and two in one process share gRPC's
// global logger.
func Isolated(t *testing.T) bool {
	t.Helper()
	if os.Getenv(isolatedEnv) == t.Name() {
		return false
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), isolatedEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("%s in its own process:\n%s", t.Name(), out)
	if err != nil {
		t.Fatalf("%s in its own process: %v", t.Name(), err)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in its own process did not run", t.Name())
	}
	return true
}

// Rerun runs the tests matching pattern again in a fresh process of the
// test binary with env added to its environment (within 10 minutes), and
// fails the calling test, with their output, unless they pass.
func Rerun(t *testing.T, pattern string, env ...string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run="+pattern, "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s with %v: %v\n%s", pattern, env, err, out)
	}
	if !bytes.Contains(out, []byte("PASS")) {
		t.Fatalf("%s with %v: no PASS in:\n%s", pattern, env, out)
	}
}
