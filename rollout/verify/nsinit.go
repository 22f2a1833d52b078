package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
)

// ModeNamespaces runs the harness under an init process of its own: the
// binary that holds this package, started again as /proc/self/exe with
// argv[0] nsInitArg0 inside new user (where the kernel allows them),
// mount, pid, network, ipc and uts namespaces. The init builds a root of
// its own (read-only /usr, the /lib links, a fresh /proc, a minimal /dev,
// size-capped tmpfs /tmp and /dev/shm; nothing else of the host),
// forbids user namespaces inside its own, sets no-new-privs and a seccomp
// filter (seccomp.go), drops every capability from its bounding set, makes
// itself undumpable and runs Python as its child, reaping orphans. When
// Python exits the init exits with its status, and the kernel kills
// everything left in the pid namespace.

// nsInitArg0 marks a process started as the sandbox's init.
const nsInitArg0 = "rlnode-sandbox-init"

// nsInitConfig is the init's first argument, JSON; the rest of its
// arguments are Python's command line.
type nsInitConfig struct {
	Host     string   // a directory of the host to mount the new root on (in the new mount namespace only)
	Links    []string // top-level host paths that are symlinks, recreated as such
	Dirs     []string // top-level host directories bound read-only (besides /usr)
	TmpBytes int64    // size of /tmp and /dev/shm
	UserNS   bool     // the init runs in a user namespace of its own
	UID, GID int      // Python's ids when the init runs as real root (no user namespace); 0 otherwise
}

// gateArg0 marks a process started as the gate of a run with a cgroup
// (startGated): its arguments are the fd it waits on, then the path and
// the argv it execs.
const gateArg0 = "rlnode-sandbox-gate"

func init() {
	if len(os.Args) > 3 && os.Args[0] == gateArg0 {
		os.Exit(gate(os.Args[1], os.Args[2], os.Args[3:]))
	}
	if len(os.Args) > 1 && os.Args[0] == nsInitArg0 {
		// Package initialisation runs on the main thread with the
		// goroutine locked to it: the per-thread prctls below and the
		// fork of Python happen on that one thread.
		os.Exit(nsInit(os.Args[1], os.Args[2:]))
	}
}

// gate waits for one byte on fd, which its parent writes once this
// process is in its run's cgroup, and then execs path with argv; it exits
// with 125 without running anything when the pipe closes first.
func gate(fdArg, path string, argv []string) int {
	runtime.GOMAXPROCS(1) // few threads while it waits: pids.max counts them
	fd, err := strconv.Atoi(fdArg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox gate: bad fd %q\n", fdArg)
		return 125
	}
	var b [1]byte
	for {
		n, err := syscall.Read(fd, b[:])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if n != 1 {
			return 125 // not let through: the run did not get its cgroup
		}
		break
	}
	syscall.Close(fd)
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "sandbox gate: exec %s: %v\n", path, err)
	return 125
}

// nsInit sets up the sandbox's root, runs argv as its child and returns
// its exit status (128+N when it died of signal N), 125 when the setup
// failed.
func nsInit(config string, argv []string) int {
	runtime.GOMAXPROCS(1) // few threads: a run's pids.max counts them
	var cfg nsInitConfig
	if err := json.Unmarshal([]byte(config), &cfg); err != nil || len(argv) == 0 {
		fmt.Fprintf(os.Stderr, "sandbox init: bad arguments: %v\n", err)
		return 125
	}
	if err := nsSetup(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox init: %v\n", err)
		return 125
	}
	attr := &syscall.ProcAttr{
		Dir:   "/tmp",
		Env:   []string{"PATH=/usr/bin:/bin", "HOME=/tmp", "TMPDIR=/tmp", "LANG=C.UTF-8"},
		Files: []uintptr{0, 1, 2, 3},
		Sys:   &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
	}
	if cfg.UID != 0 {
		attr.Sys.Credential = &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.GID), Groups: []uint32{}}
	}
	pid, err := syscall.ForkExec(argv[0], argv, attr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox init: start %s: %v\n", argv[0], err)
		return 125
	}
	for _, fd := range []int{0, 1, 2, 3} {
		syscall.Close(fd)
	}
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 125
		}
		if got != pid {
			continue // an orphan of the namespace, reaped
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

const (
	prSetDumpable       = 4
	prCapBSetDrop       = 24
	prSetNoNewPrivs     = 38
	prCapAmbient        = 47
	prCapAmbientClrAll  = 4
	lastCapabilityGuess = 63
)

func prctl(op, arg uintptr) error {
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, op, arg, 0, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// nsSetup builds the new root and drops the init's privileges (those of
// the thread that will fork Python, and the process's dumpability).
func nsSetup(cfg nsInitConfig) error {
	mount := func(src, dst, fstype string, flags uintptr, data string) error {
		if err := syscall.Mount(src, dst, fstype, flags, data); err != nil {
			return fmt.Errorf("mount %s on %s (%s): %w", src, dst, fstype, err)
		}
		return nil
	}
	// Nothing mounted here propagates to the host.
	if err := mount("none", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return err
	}
	root := cfg.Host
	if err := mount("tmpfs", root, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=1m,mode=0755"); err != nil {
		return err
	}
	for _, d := range []string{"usr", "proc", "dev", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	for _, l := range cfg.Links {
		target, err := os.Readlink(l)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			return err
		}
	}
	for _, d := range append([]string{"/usr"}, cfg.Dirs...) {
		dst := filepath.Join(root, d)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		if err := bindReadOnly(d, dst); err != nil {
			return err
		}
	}
	if err := mount("proc", filepath.Join(root, "proc"), "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return err
	}
	tmpfsOpts := fmt.Sprintf("size=%d,mode=1777", cfg.TmpBytes)
	if err := mount("tmpfs", filepath.Join(root, "tmp"), "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, tmpfsOpts); err != nil {
		return err
	}
	dev := filepath.Join(root, "dev")
	if err := mount("tmpfs", dev, "tmpfs", syscall.MS_NOSUID|syscall.MS_NOEXEC, "size=64k,mode=0755"); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom"} {
		f, err := os.Create(filepath.Join(dev, n))
		if err != nil {
			return err
		}
		f.Close()
		if err := mount("/dev/"+n, filepath.Join(dev, n), "", syscall.MS_BIND, ""); err != nil {
			return err
		}
	}
	for n, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, n)); err != nil {
			return err
		}
	}
	if err := os.Mkdir(filepath.Join(dev, "shm"), 0o755); err != nil {
		return err
	}
	if err := mount("tmpfs", filepath.Join(dev, "shm"), "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, tmpfsOpts); err != nil {
		return err
	}
	if err := mount("none", dev, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NOEXEC, ""); err != nil {
		return err
	}
	// Swap roots; the host's is detached and unreachable.
	if err := syscall.Chdir(root); err != nil {
		return err
	}
	if err := syscall.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root to %s: %w", root, err)
	}
	if err := syscall.Unmount(".", syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host root: %w", err)
	}
	if err := syscall.Chdir("/"); err != nil {
		return err
	}
	if err := mount("none", "/", "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
		return err
	}
	_ = syscall.Sethostname([]byte("sandbox"))
	if cfg.UserNS {
		// The limit is the namespace's own: no user namespace can be
		// made inside it, which keeps the kernel's code for them (and
		// the capabilities a new one would hold) out of reach.
		if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0\n"), 0); err != nil {
			return fmt.Errorf("refuse nested user namespaces: %w", err)
		}
	}

	// Privileges. Python, forked from this thread, inherits no-new-privs
	// and an empty bounding set, so no exec gives it a capability, even
	// as root of the user namespace.
	if err := prctl(prSetDumpable, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	if err := prctl(prSetNoNewPrivs, 1); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if _, err := installSeccomp(); err != nil {
		return err
	}
	if err := prctl(prCapAmbient, prCapAmbientClrAll); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("prctl(PR_CAP_AMBIENT_CLEAR_ALL): %w", err)
	}
	for c := uintptr(0); c <= lastCapabilityGuess; c++ {
		if err := prctl(prCapBSetDrop, c); errors.Is(err, syscall.EINVAL) {
			break // past the kernel's last capability
		} else if err != nil {
			return fmt.Errorf("prctl(PR_CAPBSET_DROP, %d): %w", c, err)
		}
	}
	return nil
}

// bindReadOnly binds src on dst read-only, keeping the flags the kernel
// locks on mounts from a more privileged namespace.
func bindReadOnly(src, dst string) error {
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dst, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dst, err)
	}
	const keep = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC | syscall.MS_NOATIME | syscall.MS_NODIRATIME | syscall.MS_RELATIME
	flags := uintptr(st.Flags)&keep | syscall.MS_REMOUNT | syscall.MS_BIND | syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV
	if err := syscall.Mount("none", dst, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", dst, err)
	}
	return nil
}
