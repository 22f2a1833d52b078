package verify

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"
)

// The init's seccomp filter, inherited by Python: it refuses new user
// namespaces (clone and unshare with CLONE_NEWUSER; clone3, whose flags a
// filter cannot read, as if the kernel lacked it, so libc falls back to
// clone), joining namespaces, the kernel interfaces sandboxed code has
// no use for (bpf, perf_event_open, userfaultfd, the keyring), and the
// memory no rlimit bounds: System V shared memory and message queues
// (segments outlive the process that touched them, up to the namespace's
// shmall, which is unlimited) and memfd_create (anonymous files that
// RLIMIT_AS does not count). Syscalls of another ABI (32-bit x86, x32)
// are refused outright. ModeNamespaces's init installs it; bwrap is
// given the same program (--seccomp).

// seccompArch is the audit arch and syscall numbers of one ABI.
type seccompArch struct {
	audit                  uint32
	x32Bit                 uint32   // syscall numbers with this bit are another ABI (x32); 0 if none
	unshare, clone, clone3 uint32   // the flags are the first argument of unshare and clone
	denied                 []uint32 // refused whatever their arguments
}

var seccompArches = map[string]seccompArch{
	// setns, keyctl, add_key, request_key, bpf, perf_event_open, userfaultfd,
	// shmget, msgget, memfd_create
	"amd64": {audit: 0xC000003E, x32Bit: 0x40000000, unshare: 272, clone: 56, clone3: 435,
		denied: []uint32{308, 250, 248, 249, 321, 298, 323, 29, 68, 319}},
	"arm64": {audit: 0xC00000B7, unshare: 97, clone: 220, clone3: 435,
		denied: []uint32{268, 219, 217, 218, 280, 241, 282, 194, 186, 279}},
}

type bpfInsn struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

const (
	bpfLdAbs     = 0x20 // BPF_LD | BPF_W | BPF_ABS
	bpfJeq       = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfJge       = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	bpfJset      = 0x45 // BPF_JMP | BPF_JSET | BPF_K
	bpfRet       = 0x06 // BPF_RET | BPF_K
	retAllow     = 0x7fff0000
	retErrno     = 0x00050000
	cloneNewUser = 0x10000000
	dataNr       = 0
	dataArch     = 4
	dataArg0Lo   = 16 // args[0], low 32 bits on a little-endian machine
)

// seccompFilter assembles the filter for arch.
func seccompFilter(a seccompArch) []bpfInsn {
	// Jumps are forward offsets to the labels at the end, resolved last.
	var prog []bpfInsn
	type jump struct {
		at     int
		jt, jf string
	}
	var jumps []jump
	labels := map[string]int{}
	emit := func(i bpfInsn, jt, jf string) {
		if jt != "" || jf != "" {
			jumps = append(jumps, jump{len(prog), jt, jf})
		}
		prog = append(prog, i)
	}
	emit(bpfInsn{code: bpfLdAbs, k: dataArch}, "", "")
	emit(bpfInsn{code: bpfJeq, k: a.audit}, "", "deny")
	emit(bpfInsn{code: bpfLdAbs, k: dataNr}, "", "")
	if a.x32Bit != 0 {
		emit(bpfInsn{code: bpfJge, k: a.x32Bit}, "deny", "")
	}
	for _, nr := range a.denied {
		emit(bpfInsn{code: bpfJeq, k: nr}, "deny", "")
	}
	emit(bpfInsn{code: bpfJeq, k: a.clone3}, "nosys", "")
	emit(bpfInsn{code: bpfJeq, k: a.unshare}, "flags", "")
	emit(bpfInsn{code: bpfJeq, k: a.clone}, "flags", "")
	labels["allow"] = len(prog)
	emit(bpfInsn{code: bpfRet, k: retAllow}, "", "")
	labels["flags"] = len(prog)
	emit(bpfInsn{code: bpfLdAbs, k: dataArg0Lo}, "", "")
	emit(bpfInsn{code: bpfJset, k: cloneNewUser}, "deny", "allow2")
	labels["allow2"] = len(prog)
	emit(bpfInsn{code: bpfRet, k: retAllow}, "", "")
	labels["deny"] = len(prog)
	emit(bpfInsn{code: bpfRet, k: retErrno | uint32(syscall.EPERM)}, "", "")
	labels["nosys"] = len(prog)
	emit(bpfInsn{code: bpfRet, k: retErrno | uint32(syscall.ENOSYS)}, "", "")
	for _, j := range jumps {
		if j.jt != "" {
			prog[j.at].jt = uint8(labels[j.jt] - j.at - 1)
		}
		if j.jf != "" {
			prog[j.at].jf = uint8(labels[j.jf] - j.at - 1)
		}
	}
	return prog
}

// seccompProgram is the filter for this machine's architecture as the
// kernel reads it (struct sock_filter, native byte order), as bwrap's
// --seccomp takes it; nil on an architecture without a table.
func seccompProgram() []byte {
	a, ok := seccompArches[runtime.GOARCH]
	if !ok {
		return nil
	}
	var out []byte
	for _, in := range seccompFilter(a) {
		out = binary.NativeEndian.AppendUint16(out, in.code)
		out = append(out, in.jt, in.jf)
		out = binary.NativeEndian.AppendUint32(out, in.k)
	}
	return out
}

// installSeccomp puts the filter on the calling thread (no-new-privs must
// be set); threads and processes it starts afterwards inherit it. On an
// architecture without a table it does nothing and says so.
func installSeccomp() (bool, error) {
	a, ok := seccompArches[runtime.GOARCH]
	if !ok {
		return false, nil
	}
	prog := seccompFilter(a)
	fprog := struct {
		len    uint16
		filter *bpfInsn
	}{uint16(len(prog)), &prog[0]}
	const prSetSeccomp, seccompModeFilter = 22, 2
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetSeccomp, seccompModeFilter, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return false, fmt.Errorf("prctl(PR_SET_SECCOMP): %w", e)
	}
	runtime.KeepAlive(prog)
	return true, nil
}
