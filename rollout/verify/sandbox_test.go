package verify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// testLimits are tighter than the defaults so hostile programs are
// stopped quickly.
func testLimits() Limits {
	return Limits{
		Wall:        4 * time.Second,
		Test:        1 * time.Second,
		CPUSeconds:  2,
		MemoryBytes: 256 << 20,
		Processes:   16,
		FileBytes:   1 << 20,
		OutputBytes: 4 << 10,
	}
}

// sandboxes returns a sandbox for each mode this host supports:
// rlimit-only always, bwrap when bubblewrap can create its namespaces
// here, namespaces when the kernel lets this user make them. Where one
// cannot run, its subtest is skipped and says why, so the isolation
// subtests never go missing unnoticed; RLNODE_REQUIRE_BWRAP=1 and
// RLNODE_REQUIRE_NAMESPACES=1 (a host that must contain code that way)
// make that a failure.
func sandboxes(t testing.TB) map[string]*Sandbox {
	return sandboxesWith(t, testLimits())
}

func sandboxesWith(t testing.TB, lim Limits) map[string]*Sandbox {
	t.Helper()
	out := map[string]*Sandbox{}
	for _, mode := range []string{ModeBwrap, ModeNamespaces, ModeRlimitOnly} {
		s, err := NewSandbox(SandboxConfig{Mode: mode, Limits: lim, Concurrency: 2, UIDBase: testUIDBase})
		if err != nil {
			if mode == ModeBwrap && os.Getenv("RLNODE_REQUIRE_BWRAP") == "" ||
				mode == ModeNamespaces && os.Getenv("RLNODE_REQUIRE_NAMESPACES") == "" {
				skip := func(t testing.TB) {
					t.Skipf("%s cannot run here (RLNODE_REQUIRE_BWRAP=1 or RLNODE_REQUIRE_NAMESPACES=1 makes this a failure): %v", mode, err)
				}
				switch t := t.(type) {
				case *testing.T:
					t.Run(mode, func(t *testing.T) { skip(t) })
				case *testing.B:
					t.Run(mode, func(b *testing.B) { skip(b) })
				}
				continue
			}
			t.Fatalf("%s mode: %v", mode, err)
		}
		out[mode] = s
	}
	return out
}

func runJob(t *testing.T, s *Sandbox, job PythonJob) *PythonRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, err := s.RunPython(ctx, job)
	if err != nil {
		t.Fatalf("RunPython: %v", err)
	}
	t.Logf("%s: passed %d, program error %q, stopped %q, exit %d, %v, stdout %d bytes, stderr %q",
		run.Mode, run.Passed, run.ProgramError, run.Stopped, run.ExitCode, run.Elapsed.Round(time.Millisecond), len(run.Stdout), truncate(string(run.Stderr), 200))
	return run
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// testUIDBase gives the sandboxes of this test process, when it runs as
// root, uids of their own: other processes sandboxing code on the host
// neither share their process limit nor show up in harnessLeft.
var testUIDBase = 0x7B000000 + os.Getpid()%0x10000*16

// harnessLeft lists host processes still running the harness (as root:
// under this test process's uids): none may outlive its run.
func harnessLeft(t *testing.T) []string {
	t.Helper()
	var left []string
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if os.Geteuid() == 0 {
			status, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
			_, rest, _ := strings.Cut(string(status), "\nUid:")
			uid, err := strconv.Atoi(strings.Fields(rest + " x")[0])
			if err != nil || uid < testUIDBase || uid >= testUIDBase+16 {
				continue
			}
		}
		if strings.Contains(string(b), "_rlnode_harness") {
			stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			left = append(left, e.Name()+" "+strings.Fields(string(stat) + " ? ? ?")[2])
		}
	}
	return left
}

// noHarnessLeft waits for killed processes to be reaped by init (zombies
// of an orphaned group; on a loaded host a killed fork bomb's processes
// take seconds to exit), then fails if any are still running.
func noHarnessLeft(t *testing.T) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left = nil
		for _, l := range harnessLeft(t) {
			if !strings.HasSuffix(l, " Z") {
				left = append(left, l)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("sandbox processes still running 30 s after the run: %v", left)
}

func TestSandboxTests(t *testing.T) {
	for mode, s := range sandboxes(t) {
		t.Run(mode, func(t *testing.T) {
			run := runJob(t, s, PythonJob{
				Setup:   "import math",
				Program: "def area(r):\n    return math.pi * r * r\ndef slow():\n    import time\n    try:\n        time.sleep(1.5)\n    except BaseException:\n        pass\nprint('defined')\n",
				Tests: []string{
					"assert abs(area(1) - 3.14159) < 1e-4",
					"assert area(2) == 0, 'wrong on purpose'",
					"assert undefined_name(3)",
					"while True:\n    pass",
					"x = slow()  # swallows its alarm, then the test loops\nwhile True:\n    pass",
					"assert area(0) == 0",
				},
			})
			want := []string{TestPassed, TestFailed, TestError, TestError, TestError, TestPassed}
			for i, w := range want {
				if run.Tests[i].Outcome != w {
					t.Errorf("test %d: %+v, want %s", i+1, run.Tests[i], w)
				}
			}
			if run.Passed != 2 || run.Stopped != "" || run.ProgramError != "" {
				t.Errorf("run: %+v", run)
			}
			if !strings.Contains(run.Tests[1].Detail, "wrong on purpose") || !strings.Contains(run.Tests[2].Detail, "NameError") ||
				!strings.Contains(run.Tests[3].Detail, "longer than") || !strings.Contains(run.Tests[4].Detail, "longer than") {
				t.Errorf("details: %+v", run.Tests)
			}
			if string(run.Stdout) != "defined\n" {
				t.Errorf("stdout %q", run.Stdout)
			}
		})
	}
}

func TestSandboxProgramErrors(t *testing.T) {
	for mode, s := range sandboxes(t) {
		t.Run(mode, func(t *testing.T) {
			for _, tc := range []struct{ program, want string }{
				{"def f(:\n", "SyntaxError"},
				{"raise ValueError('boom')", "ValueError: boom"},
				{"import sys\nsys.exit(0)", "SystemExit"},
			} {
				run := runJob(t, s, PythonJob{Program: tc.program, Tests: []string{"assert True"}})
				if !strings.Contains(run.ProgramError, tc.want) || run.Passed != 0 || run.Tests[0].Outcome != TestNotRun {
					t.Errorf("%q: %+v", tc.program, run)
				}
			}
			// os._exit skips the harness: the tests did not run.
			run := runJob(t, s, PythonJob{Program: "import os\nos._exit(0)", Tests: []string{"assert True"}})
			if run.Passed != 0 || !strings.Contains(run.Stopped, "exited") {
				t.Errorf("os._exit: %+v", run)
			}
			// A line forged on the report pipe without the nonce is ignored.
			run = runJob(t, s, PythonJob{Program: "import os\nos.write(3, b'x [\"test\", 0, \"pass\", \"\"]\\n')\nos._exit(0)", Tests: []string{"assert False"}})
			if run.Passed != 0 {
				t.Errorf("forged report counted: %+v", run)
			}
		})
	}
}

// TestSandboxThreads: honest programs may start threads and processes
// (glibc's clone3 is refused by ModeNamespaces's filter; libc falls back).
func TestSandboxThreads(t *testing.T) {
	for mode, s := range sandboxes(t) {
		t.Run(mode, func(t *testing.T) {
			run := runJob(t, s, PythonJob{Program: `import subprocess, sys, threading
out = []
th = threading.Thread(target=lambda: out.append(sum(range(10))))
th.start()
th.join()
child = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True).stdout.strip()
`, Tests: []string{"assert out == [45]", "assert child == '42'"}})
			if run.Passed != 2 {
				t.Fatalf("threads or processes failed: %+v", run)
			}
		})
	}
}

func TestSandboxHostile(t *testing.T) {
	for mode, s := range sandboxes(t) {
		t.Run(mode, func(t *testing.T) {
			t.Run("infinite loop", func(t *testing.T) {
				// Catches the per-test alarm, so the CPU or wall limit must stop it.
				run := runJob(t, s, PythonJob{Program: "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass\n", Tests: []string{"assert True"}})
				if !strings.Contains(run.Stopped, "CPU") && !strings.Contains(run.Stopped, "wall-clock") || run.Passed != 0 {
					t.Fatalf("not stopped: %+v", run)
				}
				noHarnessLeft(t)
			})
			t.Run("sleeping forever", func(t *testing.T) {
				run := runJob(t, s, PythonJob{Program: "import time\nwhile True:\n    try:\n        time.sleep(100)\n    except BaseException:\n        pass\n", Tests: []string{"assert True"}})
				if !strings.Contains(run.Stopped, "wall-clock") {
					t.Fatalf("not stopped by the wall clock: %+v", run)
				}
				noHarnessLeft(t)
			})
			t.Run("fork bomb", func(t *testing.T) {
				// The process limit must stop it, not the time limits:
				// give a loaded host time to start Python and fork.
				lim := testLimits()
				lim.Test, lim.Wall, lim.CPUSeconds = 20*time.Second, 30*time.Second, 20
				roomy, err := NewSandbox(SandboxConfig{Mode: mode, Limits: lim, Concurrency: 1, UIDBase: testUIDBase})
				if err != nil {
					t.Fatal(err)
				}
				run := runJob(t, roomy, PythonJob{
					Program: `import os, time
children = 0
error = ""
for i in range(10000):
    try:
        pid = os.fork()
    except OSError as e:
        error = type(e).__name__
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children += 1
print(children, error)
`,
					Tests: []string{"assert children < 16", "assert error == 'BlockingIOError'"},
				})
				if run.Passed != 2 {
					t.Fatalf("fork not limited: %+v", run)
				}
				noHarnessLeft(t)
				// The unbounded kind: every child forks again.
				run = runJob(t, s, PythonJob{Program: "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", Tests: []string{"assert True"}})
				if run.Passed != 0 || run.Stopped == "" && run.ProgramError == "" {
					t.Fatalf("fork bomb not stopped: %+v", run)
				}
				noHarnessLeft(t)
			})
			t.Run("memory bomb", func(t *testing.T) {
				run := runJob(t, s, PythonJob{Program: "x = bytearray(8 << 30)", Tests: []string{"assert True"}})
				if !strings.Contains(run.ProgramError, "MemoryError") {
					t.Fatalf("allocation not refused: %+v", run)
				}
				// Filling 256 MB can take longer than the 1 s test alarm on a
				// loaded host: give time, so only the memory limit stops it.
				lim := testLimits()
				lim.Test, lim.Wall, lim.CPUSeconds = 20*time.Second, 30*time.Second, 20
				slow, err := NewSandbox(SandboxConfig{Mode: mode, Limits: lim, Concurrency: 1, UIDBase: testUIDBase})
				if err != nil {
					t.Fatal(err)
				}
				run = runJob(t, slow, PythonJob{Program: "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n", Tests: []string{"assert True"}})
				if !strings.Contains(run.ProgramError, "MemoryError") {
					t.Fatalf("growth not stopped: %+v", run)
				}
			})
			t.Run("socket", func(t *testing.T) {
				if mode == ModeRlimitOnly && os.Geteuid() != 0 {
					t.Skip("rlimit mode as a non-root user leaves the network reachable (Isolation says so)")
				}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				accepted := make(chan struct{}, 1)
				go func() {
					if c, err := ln.Accept(); err == nil {
						accepted <- struct{}{}
						c.Close()
					}
				}()
				port := ln.Addr().(*net.TCPAddr).Port
				run := runJob(t, s, PythonJob{
					Program: fmt.Sprintf("import socket\ntry:\n    socket.create_connection(('127.0.0.1', %d), timeout=1)\n    result = 'connected'\nexcept OSError as e:\n    result = type(e).__name__\nprint(result)\n", port),
					Tests:   []string{"assert result != 'connected'"},
				})
				if run.Passed != 1 {
					t.Fatalf("socket reached the host: %+v stdout %q", run, run.Stdout)
				}
				select {
				case <-accepted:
					t.Fatal("the host listener accepted a connection from the sandbox")
				default:
				}
			})
			t.Run("write outside the temp dir", func(t *testing.T) {
				if mode == ModeRlimitOnly && os.Geteuid() != 0 {
					t.Skip("rlimit mode as a non-root user runs with the user's own file permissions")
				}
				hostDir := t.TempDir()
				target := filepath.Join(hostDir, "escaped.txt")
				run := runJob(t, s, PythonJob{
					Program: fmt.Sprintf("import os\nwritten = []\nfor p in [%q, '/usr/escaped.txt', '/etc/escaped.txt']:\n    try:\n        os.makedirs(os.path.dirname(p), exist_ok=True)\n        with open(p, 'w') as f:\n            f.write('x')\n        written.append(p)\n    except OSError:\n        pass\nwith open('inside.txt', 'w') as f:\n    f.write('ok')\nprint(os.getcwd())\n", target),
					Tests:   []string{"assert open('inside.txt').read() == 'ok'"},
				})
				if run.Passed != 1 {
					t.Fatalf("the temp dir is not writable: %+v", run)
				}
				for _, p := range []string{target, "/usr/escaped.txt", "/etc/escaped.txt"} {
					if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s was written on the host (%v)", p, err)
					}
				}
				if dir := strings.TrimSpace(string(run.Stdout)); mode == ModeRlimitOnly {
					if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("temp dir %s left behind (%v)", dir, err)
					}
				}
			})
			t.Run("huge output", func(t *testing.T) {
				run := runJob(t, s, PythonJob{Program: "while True:\n    print('x' * 1000)\n", Tests: []string{"assert True"}})
				if !run.Truncated || len(run.Stdout) != testLimits().OutputBytes || run.Passed != 0 {
					t.Fatalf("output not capped: truncated %v, %d bytes, %+v", run.Truncated, len(run.Stdout), run)
				}
				noHarnessLeft(t)
			})
			t.Run("huge file", func(t *testing.T) {
				run := runJob(t, s, PythonJob{Program: "with open('big', 'wb') as f:\n    f.write(b'x' * (64 << 20))\n", Tests: []string{"assert True"}})
				if run.ProgramError == "" || run.Passed != 0 {
					t.Fatalf("file size not limited: %+v", run)
				}
			})
		})
	}
}

func TestCodeVerify(t *testing.T) {
	modes := sandboxes(t)
	s := modes[ModeRlimitOnly]
	if b, ok := modes[ModeBwrap]; ok {
		s = b
	}
	v := Code{Sandbox: s}
	ctx := context.Background()
	tests := []struct {
		name, response string
		ref            Reference
		reward         float64
		errHas         string
	}{
		{"all pass", "```python\ndef add(a, b):\n    return a + b\n```", Reference{Tests: []string{"assert add(1, 2) == 3", "assert add(0, 0) == 0"}}, 1, ""},
		{"half pass", "def add(a, b):\n    return a * b\n", Reference{Tests: []string{"assert add(2, 2) == 4", "assert add(1, 2) == 3"}}, 0.5, ""},
		{"last fence wins", "```\nbroken(\n```\nthen\n```py\ndef f():\n    return 1\n```", Reference{Tests: []string{"assert f() == 1"}}, 1, ""},
		{"setup used", "def g():\n    return helper() + 1\n", Reference{Setup: "def helper():\n    return 41", Tests: []string{"assert g() == 42"}}, 1, ""},
		{"syntax error", "def f(:", Reference{Tests: []string{"assert f() == 1"}}, 0, "SyntaxError"},
		{"empty", "   ", Reference{Tests: []string{"assert True"}}, 0, "empty program"},
		{"no tests", "x = 1", Reference{}, 0, "no tests"},
		{"huge", strings.Repeat("#", MaxResponseBytes+1), Reference{Tests: []string{"assert True"}}, 0, "over the"},
		{"loop", "while True:\n    pass", Reference{Tests: []string{"assert True"}}, 0, "TestTimeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := v.Verify(ctx, tc.response, tc.ref)
			if res.Reward != tc.reward || !strings.Contains(res.Error, tc.errHas) || (tc.errHas == "") != (res.Error == "") {
				t.Fatalf("Verify = %+v, want reward %v and error containing %q", res, tc.reward, tc.errHas)
			}
		})
	}
}

// TestCodeVerifyForgedVerdicts: programs written to score without solving
// the task (none of them computes f) must score 0 in every mode, the
// trusted one too: the verdict is the harness's, not the program's.
func TestCodeVerifyForgedVerdicts(t *testing.T) {
	ref := Reference{Tests: []string{"assert f(1) == 2", "assert f(2) == 5"}}
	forgeries := []struct{ name, program string }{
		{"report with the harness's own function", `import os, sys
say = sys._getframe(1).f_locals['say']
for i in range(2):
    say('test', i, 'pass', '')
say('done')
os._exit(0)
`},
		{"rewrite the harness's report encoder", `import json
encode = json.dumps
def forged(parts, *a, **k):
    parts = list(parts)
    if parts and parts[0] == 'test':
        parts[2], parts[3] = 'pass', ''
    return encode(parts, *a, **k)
json.dumps = forged
def f(x):
    return None
`},
		{"an answer equal to everything", `class Anything:
    def __eq__(self, other):
        return True
def f(x):
    return Anything()
`},
		{"an int equal to everything", `class Anything(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
def f(x):
    return Anything(0)
`},
		{"read the expected values from the harness's memory", `import os, re
want = {}
for pid in (os.getpid(), os.getppid()):
    try:
        maps = open('/proc/%d/maps' % pid).read().splitlines()
        mem = open('/proc/%d/mem' % pid, 'rb')
    except OSError:
        continue
    for line in maps:
        addr, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in addr.split('-'))
        if not perms.startswith('rw') or hi - lo > 64 << 20:
            continue
        try:
            mem.seek(lo)
            chunk = mem.read(hi - lo)
        except (OSError, ValueError, OverflowError):
            continue
        for m in re.finditer(rb'assert f\((\d+)\) == (\d+)', chunk):
            want[int(m.group(1))] = int(m.group(2))
def f(x):
    return want.get(x)
`},
		{"read the expected values from memory", `import gc, re
want = {}
for o in gc.get_objects():
    try:
        values = list(o.values()) if isinstance(o, dict) else list(o) if isinstance(o, list) else []
    except Exception:
        continue
    for v in values:
        for t in (v if isinstance(v, list) else [v]):
            m = re.match(r'assert f\((\d+)\) == (\d+)', t) if isinstance(t, str) else None
            if m:
                want[int(m.group(1))] = int(m.group(2))
def f(x):
    return want.get(x)
`},
	}
	for mode, s := range sandboxes(t) {
		t.Run(mode, func(t *testing.T) {
			v := Code{Sandbox: s}
			for _, tc := range forgeries {
				t.Run(tc.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					res := v.Verify(ctx, tc.program, ref)
					t.Logf("%+v", res)
					if res.Reward != 0 {
						t.Fatalf("a program that does not compute f scored %v: %+v", res.Reward, res)
					}
				})
			}
		})
	}
}

// TestCodeVerifyHonestShapes: the ways MBPP-style tests use a program's
// values (calls, globals, generators, classes, the program's imports,
// namedtuples and Counters against plain literals) score as before.
func TestCodeVerifyHonestShapes(t *testing.T) {
	program := `import math
from collections import Counter, namedtuple
Point = namedtuple('Point', 'x y')
LIMIT = 10
import sys
ARGV = list(sys.argv)
import numbers
class Six:  # an integer that is not an int, as numpy's are
    def __int__(self):
        return 6
    def __eq__(self, other):
        return other == 6
numbers.Integral.register(Six)
SIX = Six()
def area(r):
    return math.pi * r * r
def evens(n):
    return (i for i in range(n) if i % 2 == 0)
def counts(s):
    return Counter(s)
def point(x, y):
    return Point(x, y)
def big(n):
    return 7 ** n
def raises():
    raise ValueError('bad input')
def checks(x):
    assert x > 0, 'not positive'
    return x
def apply(xs, k=1):
    return [x * k for x in xs]
class Money:
    def __init__(self, cents):
        self.cents = cents
    def __str__(self):
        return '$%d.%02d' % divmod(self.cents, 100)
    def __int__(self):
        return self.cents
    def __float__(self):
        return self.cents / 100
    def __format__(self, spec):
        return format(self.cents / 100, spec)
class Stack:
    def __init__(self):
        self.items = []
    def push(self, x):
        self.items.append(x)
        return len(self.items)
    def top(self):
        return self.items[-1]
def same(x):
    return x
def call(fn, *args):
    return fn(*args)
def matcher(s):
    import re
    return re.search('a+', s)
`
	tests := []struct {
		test, outcome string
	}{
		{"assert math.isclose(area(1), 3.14159, rel_tol=1e-4)", TestPassed},
		{"assert list(evens(7)) == [0, 2, 4, 6]", TestPassed},
		{"assert set(evens(5)) == {0, 2, 4}", TestPassed},
		{"assert 4 in evens(5)", TestPassed},
		{"assert counts('abca') == {'a': 2, 'b': 1, 'c': 1}", TestPassed},
		{"assert point(1, 2) == (1, 2)", TestPassed},
		{"assert big(3000) % 1000 == 7 ** 3000 % 1000", TestPassed},
		{"assert LIMIT == 10", TestPassed},
		{"assert apply([1, 2], k=3) == [3, 6]", TestPassed},
		{"assert all(same(i) == i for i in range(3))", TestPassed},
		{"assert [same(x) for x in (1.5, -0.0, 'é', b'\\x00', None, True, (1, [2]), frozenset({3}), 2j)] == [1.5, -0.0, 'é', b'\\x00', None, True, (1, [2]), frozenset({3}), 2j]", TestPassed},
		{"s = Stack()\nassert s.push(5) == 1\nassert s.top() == 5", TestPassed},
		{"assert len(Stack().items) == 0", TestPassed},
		{"assert same(1) is not None and same(None) is None", TestPassed},
		{"assert ARGV == ['-c']", TestPassed},
		{"assert SIX == 6 and [SIX] == [6]", TestPassed},
		{"assert str(Money(150)) == '$1.50' and int(Money(150)) == 150 and float(Money(150)) == 1.5 and f'{Money(150):.1f}' == '1.5'", TestPassed},
		{"assert call(abs, -3) == 3 and call(math.sqrt, 4) == 2 and call(int, '7') == 7 and call(same, 5) == 5", TestPassed},
		{"kept = same([1, 2])", TestPassed},
		{"assert kept == [1, 2]", TestPassed},
		{"assert area(1) == 3", TestFailed},
		{"assert checks(-1) == -1", TestFailed},
		{"assert raises() == 1", TestError},
		{"assert matcher('baa')", TestPassed},
		{"assert matcher('baa') == 'aa'", TestError},
		{"assert undefined_name(3)", TestError},
	}
	ref := Reference{}
	for _, tc := range tests {
		ref.Tests = append(ref.Tests, tc.test)
	}
	for mode, s := range sandboxes(t) {
		t.Run(mode, func(t *testing.T) {
			run := runJob(t, s, PythonJob{Program: program, Tests: ref.Tests})
			if run.ProgramError != "" || run.Stopped != "" {
				t.Fatalf("run: %+v", run)
			}
			for i, tc := range tests {
				if run.Tests[i].Outcome != tc.outcome {
					t.Errorf("%q: %+v, want %s", tc.test, run.Tests[i], tc.outcome)
				}
			}
			if !strings.Contains(run.Tests[21].Detail, "not positive") || !strings.Contains(run.Tests[22].Detail, "ValueError: bad input") ||
				!strings.Contains(run.Tests[24].Detail, "not plain data") || !strings.Contains(run.Tests[25].Detail, "NameError") {
				t.Errorf("details: %+v", run.Tests[21:])
			}
		})
	}
}

// BenchmarkSandboxTrivial measures sandboxed executions per second of a
// trivial program with one test, in each available mode.
func BenchmarkSandboxTrivial(b *testing.B) {
	for mode, s := range sandboxes(b) {
		b.Run(mode, func(b *testing.B) {
			job := PythonJob{Program: "x = 1", Tests: []string{"assert x == 1"}}
			start := time.Now()
			for b.Loop() {
				run, err := s.RunPython(context.Background(), job)
				if err != nil || run.Passed != 1 {
					b.Fatalf("%v %+v", err, run)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "execs/s")
		})
	}
}

// BenchmarkBarePython is the side-by-side peer of BenchmarkSandboxTrivial:
// the same program and assert run by /usr/bin/python3 -I with no sandbox,
// no harness and no limits.
func BenchmarkBarePython(b *testing.B) {
	start := time.Now()
	for b.Loop() {
		out, err := exec.Command("/usr/bin/python3", "-I", "-c", "x = 1\nassert x == 1").CombinedOutput()
		if err != nil {
			b.Fatalf("%v: %s", err, out)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "execs/s")
}

// escapeChildEnv marks the test binary run again as uid 65534 by
// TestSandboxEscapes.
const escapeChildEnv = "RLNODE_SANDBOX_ESCAPE_CHILD"

// TestSandboxEscapes runs programs that try to get out of the sandbox, as
// the user running the tests and, when that is root, again as uid 65534
// (the test binary started once more under that uid): each must stay
// contained in every mode that claims to contain code.
func TestSandboxEscapes(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Run("as root", sandboxEscapes)
		t.Run("as an unprivileged user", escapesAsNobody)
		return
	}
	t.Run("as an unprivileged user", sandboxEscapes)
	if os.Getenv(escapeChildEnv) == "" {
		t.Run("as root", func(t *testing.T) { t.Skip("the tests do not run as root, so the root case cannot be run") })
	}
}

// escapesAsNobody runs TestSandboxEscapes in a copy of the test binary as
// uid and gid 65534 and fails if it fails.
func escapesAsNobody(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "verify-escapes.test")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^TestSandboxEscapes$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=/tmp", "HOME=" + dir, escapeChildEnv + "=1"}
	for _, k := range []string{"RLNODE_REQUIRE_BWRAP", "RLNODE_REQUIRE_NAMESPACES"} {
		if v := os.Getenv(k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid 65534:\n%s", out)
	if err != nil {
		t.Fatalf("the test as uid 65534 failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestSandboxEscapes/as_an_unprivileged_user") {
		t.Fatal("the test as uid 65534 did not pass")
	}
}

// nsWithoutUserNS names ModeNamespaces as root without a user namespace
// (what root falls back to where the kernel refuses one).
const nsWithoutUserNS = "namespaces-as-root-without-userns"

// containingSandboxes are the sandboxes of the modes that claim to
// contain code, and as root the namespaces without a user namespace.
// Their time limits leave a loaded host time to run what the escapes try.
func containingSandboxes(t *testing.T) map[string]*Sandbox {
	lim := testLimits()
	lim.Wall, lim.Test, lim.CPUSeconds = 30*time.Second, 15*time.Second, 15
	out := sandboxesWith(t, lim)
	delete(out, ModeRlimitOnly)
	if len(out) == 0 {
		t.Fatal("no mode that contains code can run here")
	}
	if os.Geteuid() == 0 {
		s, err := namespacesWithoutUserNS(lim)
		if err != nil {
			t.Fatal(err)
		}
		out[nsWithoutUserNS] = s
	}
	return out
}

func namespacesWithoutUserNS(lim Limits) (*Sandbox, error) {
	s, err := NewSandbox(SandboxConfig{Mode: ModeNamespaces, Limits: lim, Concurrency: 2, UIDBase: testUIDBase})
	if err != nil {
		return nil, err
	}
	s.userns = false
	return s, s.probe(ModeNamespaces)
}

func sandboxEscapes(t *testing.T) {
	nonce := fmt.Sprintf("rlnode-escape-%d-%d", os.Getpid(), time.Now().UnixNano())
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for mode, s := range containingSandboxes(t) {
		t.Run(mode, func(t *testing.T) {
			t.Run("kill the verifier by its parent pids", func(t *testing.T) {
				// Every ancestor the program can see gets SIGKILL; if one
				// is this process, the test dies.
				run := runJob(t, s, PythonJob{Program: `import os, signal
seen = []
p = os.getppid()
while p > 0 and len(seen) < 10:
    seen.append(p)
    try:
        status = open('/proc/%d/status' % p).read()
        nxt = int(status.split('PPid:')[1].split()[0])
    except Exception:
        nxt = 0
    try:
        os.kill(p, signal.SIGKILL)
    except OSError:
        pass
    p = nxt
print(seen)
`, Tests: []string{"assert True"}})
				t.Logf("ancestors seen: %s", run.Stdout)
			})
			t.Run("kill the verifier found in /proc", func(t *testing.T) {
				run := runJob(t, s, PythonJob{Program: fmt.Sprintf(`import os, signal
found = []
for p in os.listdir('/proc'):
    if not p.isdigit() or int(p) == os.getpid():
        continue
    try:
        cmdline = open('/proc/%%s/cmdline' %% p, 'rb').read()
    except OSError:
        continue
    if %q.encode() in cmdline:
        found.append(int(p))
        try:
            os.kill(int(p), signal.SIGKILL)
        except OSError:
            pass
print(found)
`, filepath.Base(exe)), Tests: []string{"assert found == []"}})
				if run.Passed != 1 {
					t.Fatalf("the program saw the verifier's process: %s", run.Stdout)
				}
			})
			t.Run("read a 0600 file of the same user", func(t *testing.T) {
				secret := filepath.Join(t.TempDir(), "secret")
				if err := os.WriteFile(secret, []byte(nonce), 0o600); err != nil {
					t.Fatal(err)
				}
				run := runJob(t, s, PythonJob{Program: fmt.Sprintf(`try:
    got = open(%q).read()
except OSError as e:
    got = type(e).__name__
print(got)
`, secret), Tests: []string{"assert True"}})
				if strings.Contains(string(run.Stdout), nonce) || run.Passed != 1 {
					t.Fatalf("the program read %s: %+v stdout %q", secret, run, run.Stdout)
				}
			})
			t.Run("leave a daemon running", func(t *testing.T) {
				marker := nonce + "-daemon-" + mode
				run := runJob(t, s, PythonJob{Program: fmt.Sprintf(`import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/usr/bin/python3', ['python3', '-c', 'import time; time.sleep(60)', %q])
    os._exit(0)
os.wait()
started = False
deadline = time.time() + 10
while time.time() < deadline:
    for p in os.listdir('/proc'):
        try:
            started = started or %q in open('/proc/%%s/cmdline' %% p).read()
        except Exception:
            pass
    if started:
        break
    time.sleep(0.03)
`, marker, marker), Tests: []string{"assert started"}})
				if run.Passed != 1 {
					t.Fatalf("the daemon did not start: %+v", run)
				}
				var left []int
				for range 20 {
					if left = processesWith(t, marker); len(left) == 0 {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if len(left) > 0 {
					for _, pid := range left {
						syscall.Kill(pid, syscall.SIGKILL)
					}
					t.Fatalf("processes started in the sandbox still run after it: %v", left)
				}
			})
			t.Run("reach a control endpoint on loopback", func(t *testing.T) {
				var hits atomic.Int32
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hits.Add(1)
					fmt.Fprintln(w, "stopping")
				}))
				defer srv.Close()
				run := runJob(t, s, PythonJob{Program: fmt.Sprintf(`import urllib.request
try:
    got = urllib.request.urlopen(urllib.request.Request(%q, data=b'{}', method='POST'), timeout=1).read().decode()
except Exception as e:
    got = type(e).__name__
print(got)
`, srv.URL+"/stop"), Tests: []string{"assert 'stopping' not in got"}})
				if hits.Load() != 0 || run.Passed != 1 {
					t.Fatalf("the program reached %s or did not finish: %d requests, %+v stdout %q", srv.URL, hits.Load(), run, run.Stdout)
				}
			})
			t.Run("leave files in /tmp, /var/tmp and /dev/shm", func(t *testing.T) {
				var paths []string
				for _, d := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
					paths = append(paths, filepath.Join(d, nonce+"-"+mode))
				}
				run := runJob(t, s, PythonJob{Program: fmt.Sprintf(`written = []
for p in %s:
    try:
        with open(p, 'w') as f:
            f.write('x')
        written.append(p)
    except OSError:
        pass
print(written)
`, pyList(paths)), Tests: []string{"assert True"}})
				if run.Passed != 1 {
					t.Fatalf("the program did not run: %+v", run)
				}
				for _, p := range paths {
					if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
						os.Remove(p)
						t.Errorf("%s was left on the host (%v)", p, err)
					}
				}
			})
			t.Run("hold memory that no rlimit counts", func(t *testing.T) {
				// System V shared memory outlives its mapping, memfds and
				// tmpfs files are not address space: each must stay within
				// the run's limits (RLIMIT_AS, the tmpfs sizes).
				lim := s.Limits()
				run := runJob(t, s, PythonJob{Program: fmt.Sprintf(`import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
seg = %d // 2
shm = 0
for i in range(4):
    id = libc.shmget(0, ctypes.c_size_t(seg), 0o1600)
    if id < 0:
        break
    p = libc.shmat(id, None, 0)
    if p is None or p == ctypes.c_void_p(-1).value:
        break
    ctypes.memset(p, 1, seg)
    libc.shmdt(p)
    shm += seg
memfd = 0
fds = []
try:
    for i in range(8):
        fd = os.memfd_create('m%%d' %% i)
        fds.append(fd)
        os.write(fd, b'x' * (%d // 2))
        memfd += %d // 2
except OSError:
    pass
files = {}
for d in ['/dev', '/dev/shm', '/tmp']:
    files[d] = 0
    for i in range(8):
        try:
            with open('%%s/fill%%d' %% (d, i), 'wb') as f:
                f.write(b'x' * (%d // 2))
        except OSError:
            break
        files[d] += %d // 2
print(shm, memfd, files)
`, lim.MemoryBytes, lim.FileBytes, lim.FileBytes, lim.FileBytes, lim.FileBytes), Tests: []string{
					fmt.Sprintf("assert shm <= %d // 2, shm", lim.MemoryBytes),
					fmt.Sprintf("assert memfd <= %d // 2, memfd", lim.FileBytes),
					fmt.Sprintf("assert max(files.values()) <= %d, files", lim.FileBytes),
				}})
				t.Logf("held: %s", run.Stdout)
				if run.Passed != 3 {
					t.Fatalf("the program held memory past its limits: %+v stdout %q", run.Tests, run.Stdout)
				}
			})
			t.Run("make a user namespace", func(t *testing.T) {
				run := runJob(t, s, PythonJob{Program: `import ctypes
libc = ctypes.CDLL(None, use_errno=True)
got = libc.unshare(0x10000000)
print(got, ctypes.get_errno())
`, Tests: []string{"assert got == -1"}})
				if run.Passed != 1 {
					t.Fatalf("the program made a user namespace (and held every capability in it): %+v stdout %q", run, run.Stdout)
				}
			})
			t.Run("outlive a verifier killed during the run", func(t *testing.T) { killedVerifier(t, mode) })
			t.Run("capabilities", func(t *testing.T) {
				run := runJob(t, s, PythonJob{Program: `caps = {}
for line in open('/proc/self/status'):
    k, _, v = line.partition(':')
    if k in ('CapInh', 'CapPrm', 'CapEff', 'CapAmb', 'NoNewPrivs'):
        caps[k] = v.strip()
print(caps)
`, Tests: []string{"assert int(caps['CapPrm'], 16) == 0 and int(caps['CapEff'], 16) == 0 and int(caps['CapInh'], 16) == 0 and int(caps['CapAmb'], 16) == 0", "assert caps['NoNewPrivs'] == '1'"}})
				if run.Passed != 2 {
					t.Fatalf("the program holds capabilities or may gain them: %s", run.Stdout)
				}
			})
		})
	}
}

func pyList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// processesWith lists the host's live processes whose command line
// contains marker.
func processesWith(t *testing.T, marker string) []int {
	t.Helper()
	var found []int
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), marker) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if f := strings.Fields(string(stat) + " ? ? ?"); f[2] != "Z" {
			found = append(found, pid)
		}
	}
	return found
}

// TestSandboxModeChoice: without bubblewrap the default takes the
// namespaces; the mode that contains nothing is only taken by its name.
func TestSandboxModeChoice(t *testing.T) {
	if _, err := NewSandbox(SandboxConfig{Mode: ModeNamespaces, Concurrency: 1, UIDBase: testUIDBase}); err != nil {
		t.Skipf("namespaces cannot run here (the default then refuses code): %v", err)
	}
	for _, tc := range []struct {
		mode, bwrap, want, errHas string
	}{
		{"", "/nonexistent/bwrap", ModeNamespaces, ""},
		{ModeBwrap, "/nonexistent/bwrap", "", "sandbox mode bwrap"},
		{"rlimit", "", "", "rlimit-only-trusted-code"},
		{"chroot", "", "", `sandbox mode "chroot"`},
		{ModeRlimitOnly, "", ModeRlimitOnly, ""},
	} {
		s, err := NewSandbox(SandboxConfig{Mode: tc.mode, Bwrap: tc.bwrap, Concurrency: 1, UIDBase: testUIDBase})
		switch {
		case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("mode %q, bwrap %q: error %v, want one containing %q", tc.mode, tc.bwrap, err, tc.errHas)
		case tc.errHas == "" && err != nil:
			t.Errorf("mode %q, bwrap %q: %v", tc.mode, tc.bwrap, err)
		case tc.errHas == "" && s.Mode() != tc.want:
			t.Errorf("mode %q, bwrap %q: got mode %s, want %s", tc.mode, tc.bwrap, s.Mode(), tc.want)
		}
	}
}

// victimEnv makes TestSandboxVictim run: the test binary started again
// by TestSandboxEscapes, as a verifier that gets SIGKILL mid-run.
const victimEnv = "RLNODE_SANDBOX_VICTIM"

// TestSandboxVictim is not a test of its own: run by
// TestSandboxEscapes, it starts a program in the sandbox of mode
// RLNODE_SANDBOX_VICTIM_MODE that leaves a daemon named by victimEnv and
// waits for the kill.
func TestSandboxVictim(t *testing.T) {
	marker := os.Getenv(victimEnv)
	if marker == "" {
		t.Skip("runs only as TestSandboxEscapes's child")
	}
	lim := testLimits()
	lim.Wall, lim.Test, lim.CPUSeconds = time.Minute, time.Minute, 60
	var s *Sandbox
	var err error
	if mode := os.Getenv(victimEnv + "_MODE"); mode == nsWithoutUserNS {
		s, err = namespacesWithoutUserNS(lim)
	} else {
		s, err = NewSandbox(SandboxConfig{Mode: mode, Limits: lim, Concurrency: 1, UIDBase: testUIDBase})
	}
	if err != nil {
		t.Fatal(err)
	}
	run, err := s.RunPython(context.Background(), PythonJob{Program: fmt.Sprintf(`import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/usr/bin/python3', ['python3', '-c', 'import time; time.sleep(60)', %q])
    os._exit(0)
time.sleep(60)
`, marker), Tests: []string{"assert True"}})
	t.Fatalf("the run ended before the verifier was killed: %+v %v", run, err)
}

// killedVerifier: when the verifier dies by SIGKILL during a run in
// mode, nothing the run started survives it.
func killedVerifier(t *testing.T, mode string) {
	marker := fmt.Sprintf("rlnode-victim-%d-%d-%s", os.Getpid(), time.Now().UnixNano(), mode)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSandboxVictim$", "-test.count=1")
	cmd.Env = append(os.Environ(), victimEnv+"="+marker, victimEnv+"_MODE="+mode)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for len(processesWith(t, marker)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not start within 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	var left []int
	for range 50 {
		if left = processesWith(t, marker); len(left) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, pid := range left {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	t.Fatalf("processes of the sandbox outlived the killed verifier: %v", left)
}

// TestSandboxRunsShareNoUID: as root each run has a uid of its own, so
// that RLIMIT_NPROC is its own where no user namespace keeps the count
// apart (rlimit-only, and namespaces where the kernel refuses a user
// namespace); two sandboxes of one process (a run's verifier and python
// tool, two rollout actors of a node) must not hand the same uid to two
// runs at once, or one run's fork bomb stops the other's honest subprocess.
func TestSandboxRunsShareNoUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("per-run uids are made only as root")
	}
	lim := testLimits()
	lim.Wall, lim.Test, lim.CPUSeconds = 60*time.Second, 40*time.Second, 20
	for _, mode := range []string{ModeBwrap, ModeNamespaces, nsWithoutUserNS, ModeRlimitOnly} {
		t.Run(mode, func(t *testing.T) {
			var boxes [2]*Sandbox
			for i := range boxes {
				var s *Sandbox
				var err error
				if mode == nsWithoutUserNS {
					s, err = namespacesWithoutUserNS(lim)
				} else {
					s, err = NewSandbox(SandboxConfig{Mode: mode, Limits: lim, Concurrency: 1, UIDBase: testUIDBase})
				}
				if err != nil {
					t.Skipf("%s cannot run here: %v", mode, err)
				}
				boxes[i] = s
			}
			// The first run takes every process its limit allows, then
			// becomes a process the test can see, and holds them all until
			// it is cancelled.
			marker := fmt.Sprintf("rlnode-forks-held-%d-%s", os.Getpid(), mode)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				boxes[0].RunPython(ctx, PythonJob{Program: fmt.Sprintf(`import os, sys, time
for i in range(64):
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError:
        break
os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', %q])
`, marker), Tests: []string{"assert True"}})
			}()
			for deadline := time.Now().Add(30 * time.Second); len(processesWith(t, marker)) == 0; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the first run did not take its processes")
				}
			}
			run := runJob(t, boxes[1], PythonJob{Program: `import subprocess, sys
out = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True).stdout.strip()
`, Tests: []string{"assert out == '42'"}})
			cancel()
			<-done
			if run.Passed != 1 {
				t.Fatalf("a run beside another sandbox's fork bomb could not start a subprocess: %+v", run)
			}
		})
	}
}

// TestSandboxHarnessTakesNoProcessOfTheLimit: where RLIMIT_NPROC counts
// processes the run did not start (rlimit-only as a user who has others
// running), a program that starts none must still run: the harness's own
// second process is not the program's to pay for. As root the test gives
// a uid more processes than the limit and runs there.
func TestSandboxHarnessTakesNoProcessOfTheLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start processes as another uid")
	}
	lim := testLimits()
	base := testUIDBase + 8
	ctx, cancel := context.WithCancel(context.Background())
	var others []*exec.Cmd
	defer func() {
		cancel()
		for _, cmd := range others {
			cmd.Wait()
		}
	}()
	for range lim.Processes + 4 {
		cmd := exec.CommandContext(ctx, "/usr/bin/sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(base), Gid: uint32(base), Groups: []uint32{}}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		others = append(others, cmd)
	}
	s, err := NewSandbox(SandboxConfig{Mode: ModeRlimitOnly, Limits: lim, Concurrency: 1, UIDBase: base})
	if err != nil {
		t.Fatal(err)
	}
	run := runJob(t, s, PythonJob{Program: "def f(x):\n    return x + 1\n", Tests: []string{"assert f(1) == 2"}})
	if run.Passed != 1 {
		t.Fatalf("the program did not run: %+v", run)
	}
}

// userNSOffEnv marks the test binary run again by
// TestSandboxWithUserNamespacesOff in a user namespace that may make none.
const userNSOffEnv = "RLNODE_SANDBOX_USERNS_OFF_CHILD"

// TestSandboxWithUserNamespacesOff: where the kernel makes no user
// namespace, auto says that no sandbox can contain code, and why, and
// never falls back to rlimits alone. The test binary runs again in a user
// namespace of its own whose limit of user namespaces is 0.
func TestSandboxWithUserNamespacesOff(t *testing.T) {
	if os.Getenv(userNSOffEnv) != "" {
		if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0\n"), 0); err != nil {
			t.Fatal(err)
		}
		_, err := NewSandbox(SandboxConfig{Limits: testLimits(), Concurrency: 1})
		t.Logf("NewSandbox: %v", err)
		for _, want := range []string{"no sandbox can contain code", "user.max_user_namespaces", ModeRlimitOnly} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("NewSandbox with user namespaces off: %v; want an error naming %q", err, want)
			}
		}
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run", "^TestSandboxWithUserNamespacesOff$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), userNSOffEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(err.Error(), "fork/exec") {
		t.Skipf("this host makes no user namespace for the test either: %v", err)
	}
	t.Logf("in a user namespace that may make none:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSandboxWithUserNamespacesOff") {
		t.Fatalf("the test in a user namespace that may make none failed: %v", err)
	}
}
