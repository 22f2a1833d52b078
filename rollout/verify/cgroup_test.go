package verify

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needCgroups returns how runs get their cgroups here, or skips the test
// saying why they get none; RLNODE_REQUIRE_CGROUP=1 (a host that must
// bound runs as a whole) makes that a failure.
func needCgroups(t *testing.T) *cgroupBound {
	t.Helper()
	b := runCgroups()
	if b.version == 0 {
		if os.Getenv("RLNODE_REQUIRE_CGROUP") != "" {
			t.Fatalf("RLNODE_REQUIRE_CGROUP is set, but runs get no cgroup here: %s", b.reason)
		}
		t.Skipf("runs get no cgroup here (RLNODE_REQUIRE_CGROUP=1 makes this a failure): %s", b.reason)
	}
	return b
}

// ownRunCgroups lists the run cgroups of this process still in place.
func ownRunCgroups(t *testing.T, b *cgroupBound) []string {
	t.Helper()
	var out []string
	for _, parent := range []string{b.memParent, b.pidsParent} {
		if parent == "" {
			continue
		}
		ents, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), runCgroupPrefix+b.self+"-") {
				out = append(out, filepath.Join(parent, e.Name()))
			}
		}
	}
	return out
}

// TestSandboxRunMemoryBound: a program whose children each take memory
// within the per-process limit, but together far more than the run's, is
// killed by its run's cgroup and scores 0 with the reason, in every mode;
// the same program taking little scores as before; a run stopped by its
// wall clock leaves nothing behind either.
func TestSandboxRunMemoryBound(t *testing.T) {
	b := needCgroups(t)
	lim := testLimits()
	lim.Wall, lim.Test, lim.CPUSeconds = 20*time.Second, 8*time.Second, 8
	lim.MemoryBytes, lim.RunMemoryBytes = 256<<20, 384<<20
	// Six children hold MiB each at once (each under the 256 MiB of
	// address space a process may have), the parent waits for them.
	forker := func(mib int) string {
		return fmt.Sprintf("```python\nimport os, time\ndef f(x):\n    return x\nkids = []\nfor i in range(6):\n"+
			"    pid = os.fork()\n    if pid == 0:\n        b = b'\\x01' * (%d << 20)\n        time.sleep(1)\n        os._exit(0)\n"+
			"    kids.append(pid)\nfor k in kids:\n    os.waitpid(k, 0)\n```", mib)
	}
	ref := Reference{Tests: []string{"assert f(1) == 1"}}
	for mode, s := range sandboxesWith(t, lim) {
		t.Run(mode, func(t *testing.T) {
			if !strings.Contains(s.RunBound(), "per run: a cgroup") {
				t.Fatalf("RunBound = %q, want a cgroup per run", s.RunBound())
			}
			cases := []struct {
				name     string
				response string
				reward   float64
				oom      bool
				stopped  string
			}{
				{"children over the run's memory", forker(150), 0, true, "out of memory"},
				{"children within it", forker(16), 1, false, ""},
				{"past the wall clock", "```python\nimport os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(100)\ntime.sleep(100)\n```", 0, false, "wall-clock"},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					if tc.stopped == "wall-clock" {
						s.cfg.Limits.Wall = 3 * time.Second
						defer func() { s.cfg.Limits.Wall = lim.Wall }()
					}
					run := runJob(t, s, PythonJob{Program: ExtractProgram(tc.response), Tests: ref.Tests})
					t.Logf("peak memory of the run: %d MiB (bound %d MiB)", run.PeakMemoryBytes>>20, lim.RunMemoryBytes>>20)
					if run.OutOfMemory != tc.oom || !strings.Contains(run.Stopped, tc.stopped) || (tc.stopped == "") != (run.Stopped == "") {
						t.Fatalf("out of memory %v, stopped %q; want %v and %q", run.OutOfMemory, run.Stopped, tc.oom, tc.stopped)
					}
					if run.PeakMemoryBytes <= 0 || run.PeakMemoryBytes > lim.RunMemoryBytes {
						t.Fatalf("peak memory %d bytes: want within (0, %d]", run.PeakMemoryBytes, lim.RunMemoryBytes)
					}
					if left := ownRunCgroups(t, b); len(left) > 0 {
						t.Fatalf("run cgroups left after the run: %v", left)
					}
					if tc.stopped == "wall-clock" {
						return
					}
					res := Code{Sandbox: s}.Verify(context.Background(), tc.response, ref)
					if res.Reward != tc.reward || !strings.Contains(res.Error, tc.stopped) {
						t.Fatalf("Verify = %+v, want reward %v and an error with %q", res, tc.reward, tc.stopped)
					}
				})
			}
		})
	}
	noHarnessLeft(t)
}

// TestRunCgroupPids: a process started through the gate is in its run's
// cgroup before it runs anything, and pids.max holds what it forks (no
// rlimit here: the process is this test's, with none set).
func TestRunCgroupPids(t *testing.T) {
	b := needCgroups(t)
	if !b.pids {
		t.Skipf("no pids controller for runs here: %s", b.describe(testLimits()))
	}
	lim := testLimits()
	lim.Processes, lim.RunMemoryBytes = 4, 256<<20
	rc, err := b.newRun(lim)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.remove()
	forks := "import os, time\nn = 0\nfor i in range(200):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n" +
		"    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\nprint(n, flush=True)\n"
	cmd := exec.Command("/usr/bin/python3", "-I", "-c", forks)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outPath := filepath.Join(t.TempDir(), "out")
	outFile, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	if err := startGated(cmd, rc); err != nil {
		t.Fatal(err)
	}
	// The forked sleepers outlive python: its exit is awaited, not theirs.
	werr := cmd.Wait()
	rc.killAll()
	out, _ := os.ReadFile(outPath)
	t.Logf("python: %v, output %q", werr, out)
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	// pids.max counts python itself: it may fork one fewer.
	if want := lim.Processes + runPidsSlack - 1; n != want {
		t.Fatalf("forked %d processes, want %d (pids.max %d)", n, want, lim.Processes+runPidsSlack)
	}
}

// TestRunCgroupLeftovers: run cgroups of a process that is gone (a node
// killed mid-run) are emptied and removed; a live process's are not.
func TestRunCgroupLeftovers(t *testing.T) {
	b := needCgroups(t)
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(b.memParent, fmt.Sprintf("%s%d-1-1", runCgroupPrefix, gone.Process.Pid))
	live := filepath.Join(b.memParent, fmt.Sprintf("%s%s-999999", runCgroupPrefix, b.self))
	for _, d := range []string{dead, live} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer syscall.Rmdir(live)
	defer syscall.Rmdir(dead)
	// What the killed run left running in its cgroup.
	straggler := exec.Command("/bin/sleep", "600")
	if err := straggler.Start(); err != nil {
		t.Fatal(err)
	}
	defer straggler.Process.Kill()
	if err := os.WriteFile(filepath.Join(dead, "cgroup.procs"), []byte(strconv.Itoa(straggler.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	b.removeLeftovers()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("%s: still there (%v)", dead, err)
	}
	if err := straggler.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the straggler in the dead process's cgroup: %v, want killed", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("%s, a live process's: %v", live, err)
	}
}

// TestMaxConcurrency: the bound is 2 runs per core, less where memory
// holds fewer runs, and never below one; NewSandbox refuses more.
func TestMaxConcurrency(t *testing.T) {
	mem, _ := hostMemory()
	if mem <= 0 {
		t.Skip("this host's memory is unknown (/proc/meminfo)")
	}
	cases := []struct {
		name      string
		runMemory int64
		want      int
	}{
		{"cores bound", 1 << 20, RunsPerCore * runtime.NumCPU()},
		{"memory bound", mem / 1, 1},
		{"never below one", mem * 4, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lim := testLimits()
			lim.RunMemoryBytes = tc.runMemory
			got, why := MaxConcurrency(lim)
			if got != tc.want || why == "" {
				t.Fatalf("MaxConcurrency = %d (%s), want %d", got, why, tc.want)
			}
		})
	}
	lim := testLimits()
	most, _ := MaxConcurrency(lim)
	if _, err := NewSandbox(SandboxConfig{Mode: ModeRlimitOnly, Limits: lim, Concurrency: most + 1, UIDBase: testUIDBase}); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("at most %d on this host", most)) {
		t.Fatalf("NewSandbox with %d runs at once: %v, want refused", most+1, err)
	}
	s, err := NewSandbox(SandboxConfig{Mode: ModeRlimitOnly, Limits: lim, UIDBase: testUIDBase})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cap(s.slots), min(runtime.NumCPU(), most); got != want {
		t.Fatalf("default runs at once = %d, want %d", got, want)
	}
}

// TestCgroupV2WithoutMemory: a cgroup v2 whose controllers do not include
// memory (a hybrid host, where memory is v1's) gives runs no v2 cgroup,
// and says why.
func TestCgroupV2WithoutMemory(t *testing.T) {
	mounts, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	paths, err := selfCgroups()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := mounts[""]
	if !ok {
		t.Skip("no cgroup v2 is mounted here")
	}
	dir, err := m.dir(paths[""])
	if err != nil {
		t.Skipf("this process's cgroup v2: %v", err)
	}
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		t.Skipf("cgroup v2 %s: %v", dir, err)
	}
	if strings.Contains(string(ctrl), "memory") {
		t.Skipf("cgroup v2 %s has the memory controller (%q): the run tests use it", dir, strings.TrimSpace(string(ctrl)))
	}
	b := &cgroupBound{version: 2, memParent: dir}
	if err := b.delegateV2(); err == nil || !strings.Contains(err.Error(), "the memory controller is not delegated to it") {
		t.Fatalf("delegateV2 on %s with controllers %q: %v, want refused saying why", dir, strings.TrimSpace(string(ctrl)), err)
	}
}
