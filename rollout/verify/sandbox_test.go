package verify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// sandboxes returns a sandbox for each mode this host supports: rlimit
// always, bwrap when bubblewrap can create its namespaces here. Where it
// cannot, a bwrap subtest is skipped and says why, so the isolation
// subtests never go missing unnoticed; RLNODE_REQUIRE_BWRAP=1 (a host that
// must contain code with bwrap) makes that a failure.
func sandboxes(t testing.TB) map[string]*Sandbox {
	t.Helper()
	out := map[string]*Sandbox{}
	for _, mode := range []string{ModeBwrap, ModeRlimit} {
		s, err := NewSandbox(SandboxConfig{Mode: mode, Limits: testLimits(), Concurrency: 2})
		if err != nil {
			if mode == ModeBwrap && os.Getenv("RLNODE_REQUIRE_BWRAP") == "" {
				skip := func(t testing.TB) {
					t.Skipf("bubblewrap cannot run here (RLNODE_REQUIRE_BWRAP=1 makes this a failure): %v", err)
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

// harnessLeft lists host processes still running the harness: none may
// outlive its run.
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
		if strings.Contains(string(b), "_rlnode_harness") {
			stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			left = append(left, e.Name()+" "+strings.Fields(string(stat) + " ? ? ?")[2])
		}
	}
	return left
}

// noHarnessLeft waits a little for killed processes to be reaped by init
// (zombies of an orphaned group), then fails if any are still running.
func noHarnessLeft(t *testing.T) {
	t.Helper()
	var left []string
	for range 50 {
		left = nil
		for _, l := range harnessLeft(t) {
			if !strings.HasSuffix(l, " Z") {
				left = append(left, l)
			}
		}
		if len(left) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sandbox processes still running after the run: %v", left)
}

func TestSandboxTests(t *testing.T) {
	for mode, s := range sandboxes(t) {
		t.Run(mode, func(t *testing.T) {
			run := runJob(t, s, PythonJob{
				Setup:   "import math",
				Program: "def area(r):\n    return math.pi * r * r\nprint('defined')\n",
				Tests: []string{
					"assert abs(area(1) - 3.14159) < 1e-4",
					"assert area(2) == 0, 'wrong on purpose'",
					"assert undefined_name(3)",
					"while True:\n    pass",
					"assert area(0) == 0",
				},
			})
			want := []string{TestPassed, TestFailed, TestError, TestError, TestPassed}
			for i, w := range want {
				if run.Tests[i].Outcome != w {
					t.Errorf("test %d: %+v, want %s", i+1, run.Tests[i], w)
				}
			}
			if run.Passed != 2 || run.Stopped != "" || run.ProgramError != "" {
				t.Errorf("run: %+v", run)
			}
			if !strings.Contains(run.Tests[1].Detail, "wrong on purpose") || !strings.Contains(run.Tests[2].Detail, "NameError") ||
				!strings.Contains(run.Tests[3].Detail, "longer than") {
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
				run := runJob(t, s, PythonJob{
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
				slow, err := NewSandbox(SandboxConfig{Mode: mode, Limits: lim, Concurrency: 1})
				if err != nil {
					t.Fatal(err)
				}
				run = runJob(t, slow, PythonJob{Program: "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n", Tests: []string{"assert True"}})
				if !strings.Contains(run.ProgramError, "MemoryError") {
					t.Fatalf("growth not stopped: %+v", run)
				}
			})
			t.Run("socket", func(t *testing.T) {
				if mode == ModeRlimit && os.Geteuid() != 0 {
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
				if mode == ModeRlimit && os.Geteuid() != 0 {
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
				if dir := strings.TrimSpace(string(run.Stdout)); mode == ModeRlimit {
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
	s := modes[ModeRlimit]
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
