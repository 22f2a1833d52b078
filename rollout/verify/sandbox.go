package verify

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The code sandbox runs untrusted Python in a separate process of
// /usr/bin/python3 -I with, in every mode,
//
//   - rlimits set by the harness before any untrusted code runs (address
//     space, CPU seconds, processes, file size, open files, no core dumps);
//   - where the host allows, a cgroup of its own that bounds the run's
//     memory and processes as a whole (cgroup.go), else the reason said;
//   - a wall-clock limit, after which the whole process group is killed;
//   - stdout and stderr capped (the pipe is closed past the cap);
//   - the tests judged in a process of their own that the program cannot
//     read or write (harness.py), against values the program returns as
//     plain data, so the program cannot forge its verdict;
//   - a private temp dir as working directory and HOME, removed afterwards;
//   - a uid of its own per run when rlnode runs as root (uids.go), so
//     that RLIMIT_NPROC applies (the kernel exempts root from it) and
//     root-owned files are out of reach.
//
// ModeBwrap runs it under bubblewrap: new user, pid, network, ipc, uts
// and cgroup namespaces (no network at all), a read-only view of /usr and
// the /lib links only, size-capped tmpfs as /tmp and /dev/shm, the
// seccomp filter of seccomp.go, a new session, and death with the
// parent. ModeNamespaces builds the same with the kernel's namespaces
// directly (nsinit.go), for hosts without bubblewrap.
// In both, the code sees no host process, file outside /usr, or network,
// and nothing it starts outlives its run: the pid namespace dies with it.
// ModeRlimitOnly has the rlimits alone and contains nothing (the code
// can signal the caller's processes, read its files, reach the network
// and leave processes and files behind); it is only for code the user
// trusts, and is never chosen unless asked for by name.

//go:embed harness.py
var harnessSource string

// Sandbox modes.
const (
	ModeBwrap      = "bwrap"
	ModeNamespaces = "namespaces"
	ModeRlimitOnly = "rlimit-only-trusted-code"
)

// Limits bound one sandboxed run.
type Limits struct {
	Wall        time.Duration // whole run, wall clock
	Test        time.Duration // each of setup, program and test (SIGALRM in the harness)
	CPUSeconds  int           // RLIMIT_CPU
	MemoryBytes int64         // RLIMIT_AS, each process
	// RunMemoryBytes bounds the run as a whole (its processes and its /tmp
	// and /dev/shm) where runs get a cgroup (RunBound); 0: twice MemoryBytes.
	RunMemoryBytes int64
	Processes      int   // RLIMIT_NPROC: processes and threads of the sandbox's uid
	FileBytes      int64 // RLIMIT_FSIZE, and the size of bwrap's /tmp
	OutputBytes    int   // stdout and stderr, each
}

// DefaultLimits suit MBPP-sized programs: 10 s wall, 3 s per test, 5 CPU
// seconds, 512 MiB of address space per process and 1 GiB of memory for
// the run, 32 processes, 16 MiB files, 64 KiB of output.
func DefaultLimits() Limits {
	return Limits{
		Wall:           10 * time.Second,
		Test:           3 * time.Second,
		CPUSeconds:     5,
		MemoryBytes:    512 << 20,
		RunMemoryBytes: 1 << 30,
		Processes:      32,
		FileBytes:      16 << 20,
		OutputBytes:    64 << 10,
	}
}

// SandboxConfig configures NewSandbox; zero fields take the defaults.
type SandboxConfig struct {
	Mode        string // "" (bwrap when it works, else namespaces), ModeBwrap, ModeNamespaces or ModeRlimitOnly
	Python      string // interpreter; default /usr/bin/python3
	Bwrap       string // bubblewrap binary; default "bwrap" from PATH
	Limits      Limits // zero value: DefaultLimits
	Concurrency int    // runs at once, at most MaxConcurrency; default runtime.NumCPU() within that bound
	// UIDBase is the first of the uids the runs take, one each, when running as
	// root; default 0x7A000000 (far above any login uid).
	UIDBase int
	TempDir string // parent of the private temp dirs; default os.TempDir()
}

// Sandbox runs Python programs with the limits above. It is safe for
// concurrent use; at most Concurrency runs go at once, the others wait.
type Sandbox struct {
	cfg       SandboxConfig
	mode      string
	isolation string
	asRoot    bool
	userns    bool // ModeNamespaces: a user namespace too (always, unless running as root where the kernel refuses one)
	slots     chan int
	cg        *cgroupBound // how runs' memory is bounded as a whole (version 0: per process only)
}

// NewSandbox checks the interpreter and picks the mode: with Mode "" it
// runs a probe through bwrap, then through ModeNamespaces, and takes the
// first that works; when neither does it fails, naming ModeRlimitOnly.
// A mode asked for by name that cannot run here is an error.
func NewSandbox(cfg SandboxConfig) (*Sandbox, error) {
	if cfg.Python == "" {
		cfg.Python = "/usr/bin/python3"
	}
	if cfg.Bwrap == "" {
		cfg.Bwrap = "bwrap"
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits()
	}
	if cfg.Limits.RunMemoryBytes == 0 {
		cfg.Limits.RunMemoryBytes = 2 * cfg.Limits.MemoryBytes
	}
	if cfg.UIDBase == 0 {
		cfg.UIDBase = 0x7A000000
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	if cfg.Limits.Wall <= 0 || cfg.Limits.Test <= 0 || cfg.Limits.CPUSeconds <= 0 || cfg.Limits.MemoryBytes <= 0 ||
		cfg.Limits.RunMemoryBytes <= 0 || cfg.Limits.Processes <= 0 || cfg.Limits.FileBytes <= 0 || cfg.Limits.OutputBytes <= 0 {
		return nil, fmt.Errorf("sandbox limits: every limit must be positive: %+v", cfg.Limits)
	}
	most, why := MaxConcurrency(cfg.Limits)
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = min(runtime.NumCPU(), most)
	} else if cfg.Concurrency > most {
		return nil, fmt.Errorf("sandbox: %d runs at once: at most %d on this host (%s)", cfg.Concurrency, most, why)
	}
	if _, err := os.Stat(cfg.Python); err != nil {
		return nil, fmt.Errorf("sandbox python: %w", err)
	}
	s := &Sandbox{cfg: cfg, asRoot: os.Geteuid() == 0, slots: make(chan int, cfg.Concurrency), cg: &cgroupBound{}}
	if fi, err := os.Stat(cfg.TempDir); err != nil {
		return nil, fmt.Errorf("sandbox temp dir: %w", err)
	} else if s.asRoot && fi.Mode().Perm()&0o001 == 0 {
		// The runs' uids must reach their private dirs inside it.
		return nil, fmt.Errorf("sandbox temp dir %s: mode %v is not searchable by other users", cfg.TempDir, fi.Mode().Perm())
	}
	for i := range cfg.Concurrency {
		s.slots <- i
	}
	var bwrapErr, nsErr error
	switch cfg.Mode {
	case "", ModeBwrap, ModeNamespaces:
		if cfg.Mode != ModeNamespaces {
			if bwrapErr = s.probe(ModeBwrap); bwrapErr == nil {
				s.mode = ModeBwrap
				s.isolation = "bwrap: user, pid, network, ipc, uts and cgroup namespaces; read-only /usr; tmpfs /tmp; seccomp; rlimits"
				break
			}
			if cfg.Mode == ModeBwrap {
				return nil, fmt.Errorf("sandbox mode bwrap: %w", bwrapErr)
			}
		}
		if nsErr = s.probeNamespaces(); nsErr == nil {
			s.mode = ModeNamespaces
			s.isolation = "namespaces: user, pid, network, ipc and uts namespaces; read-only /usr; tmpfs /tmp; seccomp; rlimits"
			if !s.userns {
				s.isolation = "namespaces: pid, network, ipc and uts namespaces (the kernel refuses a user one); read-only /usr; tmpfs /tmp; seccomp; rlimits"
			}
			break
		}
		if cfg.Mode == ModeNamespaces {
			return nil, fmt.Errorf("sandbox mode namespaces: %w", nsErr)
		}
		return nil, fmt.Errorf("no sandbox can contain code on this host (bwrap: %v; namespaces: %v); "+
			"install bubblewrap or allow user namespaces, or, only for code you trust, use sandbox mode %q", bwrapErr, nsErr, ModeRlimitOnly)
	case ModeRlimitOnly:
		s.mode = ModeRlimitOnly
		s.isolation = "rlimit-only: rlimits alone; the code is trusted: it can reach the network, this user's files and processes"
		if s.asRoot {
			s.isolation = "rlimit-only: rlimits; own uid per run; network, pid, ipc and uts namespaces; the code is trusted: it can write to world-writable paths"
		}
	case "rlimit":
		return nil, fmt.Errorf("sandbox mode %q: does not contain untrusted code; use %q (the default picks bwrap or namespaces), or %q for code you trust", cfg.Mode, ModeNamespaces, ModeRlimitOnly)
	default:
		return nil, fmt.Errorf("sandbox mode %q: want %q, %q or %q", cfg.Mode, ModeBwrap, ModeNamespaces, ModeRlimitOnly)
	}
	if s.asRoot {
		s.isolation += fmt.Sprintf("; a uid of its own per run, from %d", cfg.UIDBase)
	}
	if s.cg = runCgroups(); s.cg.version != 0 {
		// The cgroup has been made and removed; this checks that a program
		// of this mode runs in one (the gate, the move, the limits).
		if err := s.probe(s.mode); err != nil {
			s.cg = &cgroupBound{reason: fmt.Sprintf("a %s run in a cgroup of its own failed here: %v", s.mode, err)}
		}
	}
	return s, nil
}

// RunBound says how a run's memory and processes are bounded: by a
// cgroup per run, or (where this host gives none, and why) per process.
func (s *Sandbox) RunBound() string { return s.cg.describe(s.cfg.Limits) }

// claimUID is the uid a run takes as root (uids.go), 0 otherwise.
func (s *Sandbox) claimUID() (int, func(), error) {
	if !s.asRoot {
		return 0, func() {}, nil
	}
	return claimUID(s.cfg.UIDBase, s.cfg.TempDir)
}

// Mode is ModeBwrap, ModeNamespaces or ModeRlimitOnly: which sandbox runs the code.
func (s *Sandbox) Mode() string { return s.mode }

// Isolation describes in words what the sandbox's mode isolates.
func (s *Sandbox) Isolation() string { return s.isolation }

// Limits are the limits each run gets.
func (s *Sandbox) Limits() Limits { return s.cfg.Limits }

// probe runs a trivial program in mode.
func (s *Sandbox) probe(mode string) error {
	if mode == ModeRlimitOnly {
		return nil // nothing to probe but the cgroup, which every mode's run uses alike
	}
	if mode == ModeBwrap {
		path, err := exec.LookPath(s.cfg.Bwrap)
		if err != nil {
			return err
		}
		s.cfg.Bwrap = path
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slot := <-s.slots
	defer func() { s.slots <- slot }()
	uid, release, err := s.claimUID()
	if err != nil {
		return err
	}
	defer release()
	args, dir, err := s.command(mode, uid, "print('ok')")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	if mode == ModeNamespaces {
		cmd.Args[0] = nsInitArg0
	}
	cmd.SysProcAttr = s.sysProcAttr(uid, mode)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if mode == ModeBwrap {
		filter, err := bwrapSeccompFile()
		if err != nil {
			return err
		}
		if filter != nil {
			defer filter.Close()
			cmd.ExtraFiles = []*os.File{nil, filter}
		}
	}
	var rc *runCgroup
	if s.cg != nil && s.cg.version != 0 {
		if rc, err = s.cg.newRun(s.cfg.Limits); err != nil {
			return err
		}
		defer rc.remove()
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err = startGated(cmd, rc); err == nil {
		err = cmd.Wait()
	}
	out := bytes.TrimSpace(buf.Bytes())
	if err != nil && len(out) > 0 {
		return fmt.Errorf("probe %s: %w: %s", args[0], err, out)
	} else if err != nil {
		return fmt.Errorf("probe %s: %w", args[0], err)
	}
	if string(out) != "ok" {
		return fmt.Errorf("probe %s: unexpected output %q", args[0], out)
	}
	return nil
}

// probeNamespaces probes ModeNamespaces with a user namespace and, as
// root where the kernel refuses one, without (root can make the others).
func (s *Sandbox) probeNamespaces() error {
	s.userns = true
	err := s.probe(ModeNamespaces)
	if err != nil && s.asRoot {
		s.userns = false
		if s.probe(ModeNamespaces) == nil {
			return nil
		}
		s.userns = true
	}
	if errors.Is(err, syscall.ENOSPC) {
		// What clone(CLONE_NEWUSER) says when user.max_user_namespaces is
		// 0 (user namespaces off) or used up.
		return fmt.Errorf("%w (the kernel makes no more user namespaces: sysctl user.max_user_namespaces is 0 or used up)", err)
	}
	return err
}

// command is the command line that runs Python's -c program with its
// arguments in mode (ModeBwrap or ModeNamespaces), as uid when running as
// root, and its working directory.
func (s *Sandbox) command(mode string, uid int, program string, arg ...string) ([]string, string, error) {
	python := append([]string{s.cfg.Python, "-I", "-c", program}, arg...)
	if mode == ModeBwrap {
		return append(s.bwrapArgs(), python...), "/", nil
	}
	cfg := nsInitConfig{Host: s.cfg.TempDir, TmpBytes: s.cfg.Limits.FileBytes}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"} {
		if _, err := os.Readlink(d); err == nil {
			cfg.Links = append(cfg.Links, d)
		} else if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			cfg.Dirs = append(cfg.Dirs, d)
		}
	}
	cfg.UserNS = s.userns
	if s.asRoot && !s.userns {
		cfg.UID, cfg.GID = uid, uid
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, "", err
	}
	return append([]string{"/proc/self/exe", string(b)}, python...), "/", nil
}

// bwrapArgs is the bubblewrap command line up to the program.
func (s *Sandbox) bwrapArgs() []string {
	args := []string{s.cfg.Bwrap,
		"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr",
	}
	// Debian and most others link /bin, /lib, /lib64 and /sbin into /usr;
	// older layouts have real directories there.
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"} {
		if target, err := os.Readlink(d); err == nil {
			args = append(args, "--symlink", target, d)
		} else if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			args = append(args, "--ro-bind", d, d)
		}
	}
	// bwrap's /dev is a tmpfs without a size: it gets a capped /dev/shm
	// and is made read-only, so no file there holds memory past the limits.
	args = append(args,
		"--proc", "/proc", "--dev", "/dev",
		"--size", fmt.Sprint(s.cfg.Limits.FileBytes), "--tmpfs", "/dev/shm",
		"--remount-ro", "/dev",
		"--size", fmt.Sprint(s.cfg.Limits.FileBytes), "--tmpfs", "/tmp",
		"--remount-ro", "/",
		"--chdir", "/tmp",
		"--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
		"--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
	)
	if seccompProgram() != nil {
		args = append(args, "--seccomp", fmt.Sprint(bwrapSeccompFD))
	}
	return args
}

// bwrapSeccompFD is where bwrap reads the seccomp program from: the fd
// after the harness's report pipe (3).
const bwrapSeccompFD = 4

// bwrapSeccompFile is the read end of a pipe that holds the seccomp
// program, for bwrap's --seccomp; nil where there is no program for this
// architecture.
func bwrapSeccompFile() (*os.File, error) {
	prog := seccompProgram()
	if prog == nil {
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seccomp pipe: %w", err)
	}
	// The program is a few hundred bytes: the pipe's buffer holds it.
	_, err = w.Write(prog)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("seccomp pipe: %w", err)
	}
	return r, nil
}

// sysProcAttr puts the child in its own process group (so the wall-clock
// kill reaches its children) and kills it with its parent. In
// ModeNamespaces it makes the namespaces, mapping uid and gid 0 inside to
// the caller's (as root: the run's) ids. As root in the other modes it
// switches to the run's uid and, in ModeRlimitOnly, unshares the
// namespaces that need no mounts.
func (s *Sandbox) sysProcAttr(runUID int, mode string) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	uid := uint32(runUID)
	if mode == ModeNamespaces {
		attr.Cloneflags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS
		if !s.userns {
			return attr // the init runs as root and starts Python as the run's uid
		}
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		hostUID, hostGID := os.Getuid(), os.Getgid()
		// Become uid 0 of the namespace, so the host sees the mapped ids
		// (not the caller's) on every file access.
		attr.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
		if s.asRoot {
			hostUID, hostGID = int(uid), int(uid)
			attr.GidMappingsEnableSetgroups = true
			attr.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
		}
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostUID, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostGID, Size: 1}}
		return attr
	}
	if s.asRoot {
		attr.Credential = &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
		if mode == ModeRlimitOnly {
			attr.Cloneflags = syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS
		}
	}
	return attr
}

// PythonJob is one program to run: Setup, then Program, then each of
// Tests (Python statements, usually one assert each) in the same module
// namespace.
type PythonJob struct {
	Setup   string
	Program string
	Tests   []string
}

// Test outcomes.
const (
	TestPassed  = "pass"
	TestFailed  = "fail"    // an AssertionError
	TestError   = "error"   // another exception, or the per-test alarm
	TestNotRun  = "not run" // the program failed or the run was stopped before it
	stageLimits = "limits"
)

// TestOutcome is the verdict on one test.
type TestOutcome struct {
	Outcome string // TestPassed, TestFailed, TestError or TestNotRun
	Detail  string // exception type and message
}

// PythonRun is what one sandboxed run did.
type PythonRun struct {
	Mode         string
	ProgramError string // setup or program raised (exception type and message)
	Tests        []TestOutcome
	Passed       int
	Stopped      string // why the run was stopped early: wall-clock limit, CPU limit, signal, output limit, ...
	ExitCode     int
	Stdout       []byte // at most Limits.OutputBytes
	Stderr       []byte // at most Limits.OutputBytes
	Truncated    bool   // stdout or stderr went over the cap
	Elapsed      time.Duration
	// OutOfMemory: the kernel killed a process of the run because the run
	// as a whole went over Limits.RunMemoryBytes (its cgroup's bound).
	OutOfMemory bool
	// PeakMemoryBytes is the most memory the run held at once, by its
	// cgroup (0 without one).
	PeakMemoryBytes int64
}

// errOutputCap stops the copy of a stream that went over its cap.
var errOutputCap = errors.New("output over the limit")

// cappedBuffer keeps the first max bytes and fails writes past them, so
// exec closes the pipe and the writer gets EPIPE.
type cappedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	max     int
	overCap bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - c.buf.Len()
	if len(p) > room {
		c.buf.Write(p[:max(room, 0)])
		c.overCap = true
		return max(room, 0), errOutputCap
	}
	return c.buf.Write(p)
}

// RunPython runs job in the sandbox. The error is for failures of the
// sandbox itself (no temp dir, no process); what the program did, however
// badly, is in PythonRun.
func (s *Sandbox) RunPython(ctx context.Context, job PythonJob) (*PythonRun, error) {
	var slot int
	select {
	case slot = <-s.slots:
	case <-ctx.Done():
		return nil, fmt.Errorf("sandbox: waiting for a free slot: %w", ctx.Err())
	}
	defer func() { s.slots <- slot }()
	uid, release, err := s.claimUID()
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	defer release()

	nonceBytes := make([]byte, 16)
	if _, err := rand.Read(nonceBytes); err != nil {
		return nil, fmt.Errorf("sandbox: nonce: %w", err)
	}
	nonce := hex.EncodeToString(nonceBytes)
	lim := s.cfg.Limits
	// The limits are the harness's argument: it sets them and starts the
	// program's process before it reads the job (with the tests) from stdin.
	limits, err := json.Marshal(map[string]any{
		"memory_bytes": lim.MemoryBytes, "processes": lim.Processes, "file_bytes": lim.FileBytes,
		"cpu_seconds": lim.CPUSeconds, "test_seconds": lim.Test.Seconds(),
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: encode limits: %w", err)
	}
	input, err := json.Marshal(map[string]any{"nonce": nonce, "setup": job.Setup, "program": job.Program, "tests": job.Tests})
	if err != nil {
		return nil, fmt.Errorf("sandbox: encode job: %w", err)
	}

	var args []string
	var dir string
	env := []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	if s.mode == ModeRlimitOnly {
		dir, err = os.MkdirTemp(s.cfg.TempDir, "rlnode-sandbox-")
		if err != nil {
			return nil, fmt.Errorf("sandbox: temp dir: %w", err)
		}
		defer os.RemoveAll(dir)
		if s.asRoot {
			if err := os.Chown(dir, uid, uid); err != nil {
				return nil, fmt.Errorf("sandbox: temp dir %s: %w", dir, err)
			}
		}
		args = []string{s.cfg.Python, "-I", "-c", harnessSource, string(limits)}
		env = append(env, "HOME="+dir, "TMPDIR="+dir)
	} else if args, dir, err = s.command(s.mode, uid, harnessSource, string(limits)); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}

	runCtx, cancel := context.WithTimeout(ctx, lim.Wall)
	defer cancel()
	cmd := exec.CommandContext(runCtx, args[0], args[1:]...)
	if s.mode == ModeNamespaces {
		cmd.Args[0] = nsInitArg0
	}
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = s.sysProcAttr(uid, s.mode)
	var rc *runCgroup
	if s.cg.version != 0 {
		if rc, err = s.cg.newRun(lim); err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		defer rc.remove()
	}
	cmd.Cancel = func() error {
		// The whole group: bwrap, the init or python and anything it
		// forked (with a pid namespace, all of it dies with its init);
		// and whatever is in the run's cgroup.
		if rc != nil {
			rc.killAll()
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 2 * time.Second
	cmd.Stdin = bytes.NewReader(input)
	stdout := &cappedBuffer{max: lim.OutputBytes}
	stderr := &cappedBuffer{max: lim.OutputBytes}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	reportR, reportW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: report pipe: %w", err)
	}
	defer reportR.Close()
	cmd.ExtraFiles = []*os.File{reportW}
	if s.mode == ModeBwrap {
		filter, err := bwrapSeccompFile()
		if err != nil {
			reportW.Close()
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		if filter != nil {
			defer filter.Close()
			cmd.ExtraFiles = append(cmd.ExtraFiles, filter)
		}
	}

	start := time.Now()
	if err := startGated(cmd, rc); err != nil {
		reportW.Close()
		return nil, fmt.Errorf("sandbox: start %s: %w", args[0], err)
	}
	reportW.Close()
	reports := make(chan []reportLine, 1)
	go func() { reports <- readReports(reportR, nonce) }()
	waitErr := cmd.Wait()
	// Kill anything of the group still alive (ModeRlimitOnly without a
	// pid namespace), then stop reading the report pipe if a straggler holds
	// it open.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if rc != nil {
		rc.killAll()
	}
	var lines []reportLine
	select {
	case lines = <-reports:
	case <-time.After(2 * time.Second):
		reportR.Close()
		lines = <-reports
	}
	run := &PythonRun{
		Mode:      s.mode,
		Stdout:    stdout.buf.Bytes(),
		Stderr:    stderr.buf.Bytes(),
		Truncated: stdout.overCap || stderr.overCap,
		Elapsed:   time.Since(start),
		Tests:     make([]TestOutcome, len(job.Tests)),
	}
	if cmd.ProcessState != nil {
		run.ExitCode = cmd.ProcessState.ExitCode()
	}
	if rc != nil {
		run.OutOfMemory = rc.oomKills() > 0
		run.PeakMemoryBytes = rc.peak()
	}
	for i := range run.Tests {
		run.Tests[i].Outcome = TestNotRun
	}
	limitsSet, done := false, false
	for _, l := range lines {
		switch {
		case l.stage == stageLimits:
			limitsSet = true
		case (l.stage == "setup" || l.stage == "program") && l.outcome == "error":
			run.ProgramError = l.stage + ": " + l.detail
		case l.stage == "test" && l.index >= 0 && l.index < len(run.Tests):
			run.Tests[l.index] = TestOutcome{Outcome: l.outcome, Detail: l.detail}
			if l.outcome == TestPassed {
				run.Passed++
			}
		case l.stage == "done":
			done = true
		}
	}
	switch {
	case runCtx.Err() != nil && ctx.Err() == nil:
		run.Stopped = fmt.Sprintf("wall-clock limit of %v", lim.Wall)
	case ctx.Err() != nil:
		run.Stopped = "cancelled: " + ctx.Err().Error()
	case run.OutOfMemory:
		run.Stopped = fmt.Sprintf("out of memory: the run's processes and files went over its %d MiB (its cgroup killed them)", lim.RunMemoryBytes>>20)
	case !limitsSet:
		return run, fmt.Errorf("sandbox: the harness did not start (exit %d): %s", run.ExitCode, strings.TrimSpace(string(run.Stderr)))
	case stdout.overCap || stderr.overCap:
		run.Stopped = fmt.Sprintf("output over %d bytes", lim.OutputBytes)
	case !done && run.ProgramError == "":
		run.Stopped = exitReason(cmd.ProcessState, waitErr)
	}
	return run, nil
}

// startGated starts cmd. With rc, cmd's process waits first, in a gate
// (gateArg0) that runs nothing of the command, until it is in rc; then
// the gate execs the command, and all it starts is born in rc.
func startGated(cmd *exec.Cmd, rc *runCgroup) error {
	if rc == nil {
		return cmd.Start()
	}
	gateR, gateW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("gate pipe: %w", err)
	}
	defer gateW.Close()
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, gateR)
	cmd.Args = append([]string{gateArg0, strconv.Itoa(fd), cmd.Path}, cmd.Args...)
	cmd.Path = "/proc/self/exe"
	err = cmd.Start()
	gateR.Close()
	if err != nil {
		return err
	}
	if err = rc.add(cmd.Process.Pid); err == nil {
		_, err = gateW.Write([]byte{1})
	}
	if err != nil {
		// Closed without a byte, the gate exits without running anything.
		gateW.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
	return err
}

// exitReason says why the harness ended without finishing.
func exitReason(ps *os.ProcessState, waitErr error) string {
	if ps == nil {
		return fmt.Sprintf("no exit status: %v", waitErr)
	}
	sig := syscall.Signal(0)
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig = ws.Signal()
	} else if code := ps.ExitCode(); code > 128 && code < 128+65 {
		// bwrap exits with 128+N when its child dies of signal N.
		sig = syscall.Signal(code - 128)
	}
	if sig != 0 {
		switch sig {
		case syscall.SIGXCPU:
			return "CPU time limit"
		case syscall.SIGKILL:
			return "killed (CPU time limit or out of memory)"
		}
		return "killed by " + sig.String()
	}
	return fmt.Sprintf("exited with status %d before the tests finished", ps.ExitCode())
}

type reportLine struct {
	stage, outcome, detail string
	index                  int
}

// readReports parses the harness's lines; lines without the nonce (forged
// by the program, or garbage) are skipped.
func readReports(r io.Reader, nonce string) []reportLine {
	var out []reportLine
	sc := bufio.NewScanner(io.LimitReader(r, 4<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), nonce+" ")
		if !ok {
			continue
		}
		var parts []any
		if json.Unmarshal([]byte(rest), &parts) != nil || len(parts) == 0 {
			continue
		}
		l := reportLine{index: -1}
		l.stage, _ = parts[0].(string)
		if l.stage == "test" && len(parts) == 4 {
			if f, ok := parts[1].(float64); ok {
				l.index = int(f)
			}
			l.outcome, _ = parts[2].(string)
			l.detail, _ = parts[3].(string)
		} else if len(parts) == 3 {
			l.outcome, _ = parts[1].(string)
			l.detail, _ = parts[2].(string)
		}
		out = append(out, l)
	}
	return out
}
