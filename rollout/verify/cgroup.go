package verify

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// RLIMIT_AS bounds each process of a run, not the run: a program that
// forks holds up to Processes × MemoryBytes. Where the host lets this
// process make cgroups (root, or a delegated cgroup v2 subtree), every run
// gets one of its own under this process's cgroup, and its memory (the
// processes' and what they write to /tmp and /dev/shm) and its processes
// are bounded as a whole: memory.max (v2) or memory.limit_in_bytes (v1),
// no swap, and pids.max. The sandboxed process enters it before it runs
// anything (the gate, below); everything in it is killed at the run's end
// and the cgroup removed. Where cgroups cannot be used the reason is kept
// (RunBound says it) and runs keep the per-process limits alone.

// runCgroupPrefix names the cgroups of runs: rlnode-sandbox-PID-START-N,
// PID and START (its start time in clock ticks) the process that made it,
// so that a process starting later can tell the leftovers of one that was
// killed from those of one still running.
const runCgroupPrefix = "rlnode-sandbox-"

// runPidsSlack is what pids.max allows past Limits.Processes: the
// sandbox's own processes and threads (bwrap's two, the namespaces init's
// runtime threads, the judge and the runner).
const runPidsSlack = 16

// cgroupBound is how this host's cgroups bound runs.
type cgroupBound struct {
	version    int    // 1 or 2; 0: runs get no cgroup
	memParent  string // where runs' memory cgroups are made (v2: the one cgroup)
	pidsParent string // v1: where runs' pids cgroups are made; "" without the pids controller
	pids       bool   // pids.max applies
	reason     string // version 0: why not
	self       string // this process's name part: PID-START
	seq        atomic.Int64
}

var hostCgroups struct {
	once sync.Once
	b    *cgroupBound
}

// runCgroups finds, once per process, how runs are bounded, removing
// what runs of killed processes left behind.
func runCgroups() *cgroupBound {
	hostCgroups.once.Do(func() {
		b := &cgroupBound{self: fmt.Sprintf("%d-%s", os.Getpid(), startTime(os.Getpid()))}
		if err := b.detect(); err != nil {
			b.version, b.reason = 0, err.Error()
		}
		hostCgroups.b = b
	})
	return hostCgroups.b
}

// describe says which bound applies to a run with lim.
func (b *cgroupBound) describe(lim Limits) string {
	perProcess := fmt.Sprintf("%d MiB of address space per process, %d processes", lim.MemoryBytes>>20, lim.Processes)
	if b.version == 0 {
		return fmt.Sprintf("per process only (%s, so a run may hold %d × %d MiB): no cgroup per run: %s",
			perProcess, lim.Processes, lim.MemoryBytes>>20, b.reason)
	}
	pids := "no pids controller, so processes by rlimit alone"
	if b.pids {
		pids = fmt.Sprintf("at most %d processes and threads", lim.Processes+runPidsSlack)
	}
	return fmt.Sprintf("per run: a cgroup v%d under %s, %d MiB of memory for all its processes and files, no swap, %s; and %s",
		b.version, b.memParent, lim.RunMemoryBytes>>20, pids, perProcess)
}

// detect picks the cgroup version runs use and checks that a run's cgroup
// can be made, limited and removed here.
func (b *cgroupBound) detect() error {
	paths, err := selfCgroups()
	if err != nil {
		return err
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	if m, ok := mounts["memory"]; ok {
		b.version = 1
		if b.memParent, err = m.dir(paths["memory"]); err != nil {
			return err
		}
		if p, ok := mounts["pids"]; ok {
			if b.pidsParent, err = p.dir(paths["pids"]); err != nil {
				return err
			}
			b.pids = true
		}
	} else if m, ok := mounts[""]; ok {
		b.version = 2
		if b.memParent, err = m.dir(paths[""]); err != nil {
			return err
		}
		if err := b.delegateV2(); err != nil {
			return err
		}
	} else {
		return errors.New("no memory controller is mounted (neither cgroup v1's memory hierarchy nor cgroup v2)")
	}
	b.removeLeftovers()
	// A run's cgroup, made and removed once: what a run needs works here.
	rc, err := b.newRun(Limits{RunMemoryBytes: 64 << 20, Processes: 1})
	switch {
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%w (this user may not make cgroups there: not root, and the cgroup is not delegated to it)", err)
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("%w (the cgroup file system is mounted read-only)", err)
	case err != nil:
		return err
	}
	return rc.remove()
}

// delegateV2 makes the memory (and pids) controllers available to the
// children of this process's cgroup v2. A cgroup with processes cannot
// hand controllers to its children (the kernel's no-internal-process
// rule): when this process is the only one in it, it moves into a child
// of its own (rlnode-node) first, as a unit with Delegate=yes must.
func (b *cgroupBound) delegateV2() error {
	dir := b.memParent
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup v2 %s: %w", dir, err)
	}
	have := strings.Fields(string(ctrl))
	if !slices.Contains(have, "memory") {
		return fmt.Errorf("cgroup v2 %s: the memory controller is not delegated to it (it has %q)", dir, strings.TrimSpace(string(ctrl)))
	}
	b.pids = slices.Contains(have, "pids")
	want := "+memory"
	if b.pids {
		want += " +pids"
	}
	subtree := filepath.Join(dir, "cgroup.subtree_control")
	err = writeCgroup(subtree, want)
	if errors.Is(err, syscall.EBUSY) {
		procs, rerr := cgroupProcs(dir)
		if rerr != nil || len(procs) != 1 || procs[0] != os.Getpid() {
			return fmt.Errorf("cgroup v2 %s holds other processes than this one, so it cannot give its children the memory controller; "+
				"run rlnode in a cgroup of its own with Delegate=yes (systemd-run --scope -p Delegate=yes ...): %w", dir, err)
		}
		leaf := filepath.Join(dir, "rlnode-node")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup v2: make %s: %w", leaf, err)
		}
		if err := writeCgroup(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
			return fmt.Errorf("cgroup v2: move this process into %s: %w", leaf, err)
		}
		err = writeCgroup(subtree, want)
	}
	if err != nil {
		return fmt.Errorf("cgroup v2: enable %s in %s: %w", want, subtree, err)
	}
	return nil
}

// newRun makes the cgroup(s) of one run with lim's bounds.
func (b *cgroupBound) newRun(lim Limits) (*runCgroup, error) {
	if lim.RunMemoryBytes <= 0 || lim.Processes <= 0 {
		return nil, fmt.Errorf("run cgroup: memory %d and processes %d: want both positive", lim.RunMemoryBytes, lim.Processes)
	}
	name := fmt.Sprintf("%s%s-%d", runCgroupPrefix, b.self, b.seq.Add(1))
	rc := &runCgroup{version: b.version, mem: filepath.Join(b.memParent, name)}
	rc.dirs = []string{rc.mem}
	if b.version == 1 && b.pidsParent != "" {
		rc.dirs = append(rc.dirs, filepath.Join(b.pidsParent, name))
	}
	fail := func(err error) (*runCgroup, error) {
		rc.remove()
		return nil, fmt.Errorf("run cgroup: %w", err)
	}
	for _, d := range rc.dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fail(err)
		}
		rc.made = append(rc.made, d)
	}
	pidsDir := rc.dirs[len(rc.dirs)-1]
	mem := strconv.FormatInt(lim.RunMemoryBytes, 10)
	pids := strconv.Itoa(lim.Processes + runPidsSlack)
	var writes [][3]string // file, value, "optional" when a kernel may lack it
	if b.version == 2 {
		writes = [][3]string{{"memory.max", mem}, {"memory.swap.max", "0", "optional"}, {"memory.oom.group", "1", "optional"}}
	} else {
		// memsw (memory and swap) is set after the memory limit it must not be under.
		writes = [][3]string{{"memory.limit_in_bytes", mem}, {"memory.memsw.limit_in_bytes", mem, "optional"}}
	}
	for _, w := range writes {
		err := writeCgroup(filepath.Join(rc.mem, w[0]), w[1])
		if err != nil && !(w[2] == "optional" && errors.Is(err, os.ErrNotExist)) {
			return fail(err)
		}
	}
	if b.pids {
		if err := writeCgroup(filepath.Join(pidsDir, "pids.max"), pids); err != nil {
			return fail(err)
		}
	}
	return rc, nil
}

// removeLeftovers kills what runs in, and removes, the run cgroups of
// processes that are gone (a node killed mid-run).
func (b *cgroupBound) removeLeftovers() {
	for _, parent := range []string{b.memParent, b.pidsParent} {
		if parent == "" {
			continue
		}
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			rest, ok := strings.CutPrefix(e.Name(), runCgroupPrefix)
			f := strings.Split(rest, "-")
			if !ok || !e.IsDir() || len(f) != 3 {
				continue
			}
			pid, err := strconv.Atoi(f[0])
			if err != nil || startTime(pid) == f[1] {
				continue // a live process's
			}
			rc := &runCgroup{version: b.version, mem: filepath.Join(parent, e.Name())}
			rc.dirs = []string{rc.mem}
			rc.made = rc.dirs
			rc.remove()
		}
	}
}

// runCgroup is one run's cgroup: one directory in v2, one per hierarchy
// (memory, pids) in v1.
type runCgroup struct {
	version int
	mem     string   // the memory cgroup's directory
	dirs    []string // every directory, memory first
	made    []string // those made so far
}

// add moves pid (every thread of it) into the run's cgroups.
func (rc *runCgroup) add(pid int) error {
	for _, d := range rc.dirs {
		if err := writeCgroup(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("run cgroup: move process %d into %s: %w", pid, d, err)
		}
	}
	return nil
}

// oomKills is how many processes the kernel killed in the run for want
// of memory within its cgroup.
func (rc *runCgroup) oomKills() int {
	file := "memory.oom_control"
	if rc.version == 2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(rc.mem, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(line, "oom_kill "); ok {
			v, _ := strconv.Atoi(strings.TrimSpace(n))
			return v
		}
	}
	return 0
}

// peak is the most memory the run held at once (0 where the kernel does
// not say).
func (rc *runCgroup) peak() int64 {
	file := "memory.max_usage_in_bytes"
	if rc.version == 2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(rc.mem, file))
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

// killAll kills every process in the run's cgroups.
func (rc *runCgroup) killAll() {
	for _, d := range rc.made {
		if rc.version == 2 && writeCgroup(filepath.Join(d, "cgroup.kill"), "1") == nil {
			continue
		}
		procs, _ := cgroupProcs(d)
		for _, pid := range procs {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// remove kills what is left in the run's cgroups and removes them,
// waiting (at most 5 s) for the killed processes to leave.
func (rc *runCgroup) remove() error {
	deadline := time.Now().Add(5 * time.Second)
	var err error
	for i := len(rc.made) - 1; i >= 0; i-- {
		d := rc.made[i]
		for {
			rc.killAll()
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("run cgroup: remove %s: %w", d, err)
		}
		rc.made = rc.made[:i]
	}
	return nil
}

// cgroupProcs lists the processes in the cgroup at dir.
func cgroupProcs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// selfCgroups maps each v1 controller of this process to its cgroup's
// path, and "" to its cgroup v2 path.
func selfCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read this process's cgroups: %w", err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			out[""] = f[2]
		}
		for _, c := range strings.Split(f[1], ",") {
			out[c] = f[2]
		}
	}
	return out, nil
}

// cgroupMount is a mounted cgroup hierarchy.
type cgroupMount struct{ root, point string }

// dir is where the cgroup at path (as /proc/self/cgroup names it) is.
func (m cgroupMount) dir(path string) (string, error) {
	rel, ok := strings.CutPrefix(path, m.root)
	if !ok || path == "" {
		return "", fmt.Errorf("this process's cgroup %q is outside the hierarchy mounted at %s (root %s)", path, m.point, m.root)
	}
	return filepath.Join(m.point, rel), nil
}

// cgroupMounts maps the v1 controllers mounted (memory, pids) to their
// hierarchy, and "" to cgroup v2's.
func cgroupMounts() (map[string]cgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	out := map[string]cgroupMount{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if !ok || len(pf) < 5 || len(qf) < 3 {
			continue
		}
		m := cgroupMount{root: unescapeMount(pf[3]), point: unescapeMount(pf[4])}
		switch qf[0] {
		case "cgroup2":
			out[""] = m
		case "cgroup":
			for _, opt := range strings.Split(qf[2], ",") {
				if opt == "memory" || opt == "pids" {
					out[opt] = m
				}
			}
		}
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// startTime is pid's start time in clock ticks since boot ("" when there
// is no such process).
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// Fields after the command, which is in parentheses and may hold anything.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// writeCgroup writes value to a cgroup's file. The file is never created:
// one the kernel does not have (memory.swap.max without swap accounting)
// is ENOENT, where a create would be EACCES.
func writeCgroup(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
