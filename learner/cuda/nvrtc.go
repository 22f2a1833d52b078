package cuda

import (
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// MinNVRTC is the oldest NVRTC the kernels compile with: the first that
// targets sm_90.
var MinNVRTC = Version{11, 8}

// nvrtcBuiltinFailure is NVRTC_ERROR_BUILTIN_OPERATION_FAILURE (nvrtc.h).
const nvrtcBuiltinFailure = 7

// NVRTCCandidates are the names NVRTC is looked up by, newest first.
var NVRTCCandidates = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}

// NVRTC is the CUDA runtime compiler, loaded at run time.
type NVRTC struct {
	lib     *library
	version Version
	// builtins is the libnvrtc-builtins loaded from lib's folder, or "".
	builtins string

	nvrtcVersion           func(major, minor *int32) int32
	nvrtcGetErrorString    func(r int32) *byte
	nvrtcCreateProgram     func(prog *uintptr, src, name string, numHeaders int32, headers, includeNames unsafe.Pointer) int32
	nvrtcCompileProgram    func(prog uintptr, numOptions int32, options unsafe.Pointer) int32
	nvrtcDestroyProgram    func(prog *uintptr) int32
	nvrtcGetProgramLogSize func(prog uintptr, n *uint64) int32
	nvrtcGetProgramLog     func(prog uintptr, log *byte) int32
	nvrtcGetCUBINSize      func(prog uintptr, n *uint64) int32
	nvrtcGetCUBIN          func(prog uintptr, cubin *byte) int32
}

// OpenNVRTC loads NVRTC from the first of candidates that opens
// (when none are given: $RLNODE_NVRTC alone if set, else
// NVRTCCandidates, then NVIDIA's Python wheels). The errors wrap ErrNoLibrary,
// ErrNoSymbol or ErrTooOld.
func OpenNVRTC(candidates ...string) (*NVRTC, error) {
	if len(candidates) == 0 {
		candidates = searchList(EnvNVRTC, NVRTCCandidates, "libnvrtc.so.1[0-9]*")
	}
	lib, err := openLibrary("NVRTC", candidates)
	if err != nil {
		return nil, err
	}
	n := &NVRTC{lib: lib}
	if err := lib.bind(map[string]any{
		"nvrtcVersion":           &n.nvrtcVersion,
		"nvrtcGetErrorString":    &n.nvrtcGetErrorString,
		"nvrtcCreateProgram":     &n.nvrtcCreateProgram,
		"nvrtcCompileProgram":    &n.nvrtcCompileProgram,
		"nvrtcDestroyProgram":    &n.nvrtcDestroyProgram,
		"nvrtcGetProgramLogSize": &n.nvrtcGetProgramLogSize,
		"nvrtcGetProgramLog":     &n.nvrtcGetProgramLog,
		"nvrtcGetCUBINSize":      &n.nvrtcGetCUBINSize,
		"nvrtcGetCUBIN":          &n.nvrtcGetCUBIN,
	}); err != nil {
		return nil, fmt.Errorf("NVRTC: %w", err)
	}
	var major, minor int32
	if r := n.nvrtcVersion(&major, &minor); r != 0 {
		return nil, fmt.Errorf("NVRTC %s: nvrtcVersion: %w", lib.path, n.err(r))
	}
	n.version = Version{int(major), int(minor)}
	if n.version.Less(MinNVRTC) {
		return nil, fmt.Errorf("NVRTC %s: %w: it is CUDA %s, the kernels need %s or newer", lib.path, ErrTooOld, n.version, MinNVRTC)
	}
	n.builtins = preloadBuiltins(lib.path, n.version)
	return n, nil
}

// preloadBuiltins loads the libnvrtc-builtins beside an NVRTC opened by
// path, the one of its version first, and returns its path ("" if none
// loaded). NVRTC opens its builtins by soname on its first compile, and
// the CUDA 13 wheels (nvidia/cu13/lib) give libnvrtc.so.13 no RUNPATH to
// its own folder, so from there every compile failed with
// NVRTC_ERROR_BUILTIN_OPERATION_FAILURE unless that folder was on
// LD_LIBRARY_PATH. The dynamic linker matches a soname against the
// libraries already loaded, so NVRTC then finds these. The library stays
// loaded for the process's life.
func preloadBuiltins(nvrtcPath string, v Version) string {
	if !strings.Contains(nvrtcPath, "/") {
		return "" // found by the dynamic linker's search, which finds its builtins too
	}
	dir := filepath.Dir(nvrtcPath)
	cands := []string{filepath.Join(dir, fmt.Sprintf("libnvrtc-builtins.so.%d.%d", v.Major, v.Minor))}
	others, _ := filepath.Glob(filepath.Join(dir, "libnvrtc-builtins.so.*"))
	slices.Sort(others)
	slices.Reverse(others)
	for _, p := range others {
		if !slices.Contains(cands, p) {
			cands = append(cands, p)
		}
	}
	for _, p := range cands {
		if _, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
			return p
		}
	}
	return ""
}

// Path is the library NVRTC was loaded from.
func (n *NVRTC) Path() string { return n.lib.path }

// Version is NVRTC's CUDA version.
func (n *NVRTC) Version() Version { return n.version }

func (n *NVRTC) err(r int32) error {
	if p := n.nvrtcGetErrorString(r); p != nil {
		return fmt.Errorf("nvrtc error %d (%s)", r, goString(p, 256))
	}
	return fmt.Errorf("nvrtc error %d", r)
}

// Compiled is the result of one compilation.
type Compiled struct {
	Cubin []byte
	Log   string
	// Kernels are ptxas's figures per entry function, parsed from Log
	// when compiled with --ptxas-options=-v.
	Kernels []KernelStats
}

// KernelStats is ptxas's resource report for one kernel.
type KernelStats struct {
	Name                    string
	Arch                    string // "sm_90"
	Registers               int
	SharedBytes             int // static shared memory
	StackBytes              int
	SpillStores, SpillLoads int
}

// maxSource bounds what Compile accepts, so a runaway input fails fast.
const maxSource = 4 << 20

// Compile compiles CUDA C source (name is used in messages) to a cubin
// for arch ("sm_90") with extra NVRTC options. A compile error returns the
// compiler's log in the error.
func (n *NVRTC) Compile(src, name, arch string, options ...string) (*Compiled, error) {
	if len(src) > maxSource {
		return nil, fmt.Errorf("nvrtc %s: source is %d bytes, over the %d limit", name, len(src), maxSource)
	}
	if strings.IndexByte(src, 0) >= 0 || strings.IndexByte(name, 0) >= 0 {
		return nil, fmt.Errorf("nvrtc %s: source or name holds a NUL byte", name)
	}
	var prog uintptr
	if r := n.nvrtcCreateProgram(&prog, src, name, 0, nil, nil); r != 0 {
		return nil, fmt.Errorf("nvrtc %s: create program: %w", name, n.err(r))
	}
	defer n.nvrtcDestroyProgram(&prog)

	opts := append([]string{"--gpu-architecture=" + arch}, options...)
	cstrs := make([][]byte, len(opts))
	ptrs := make([]*byte, len(opts))
	for i, o := range opts {
		cstrs[i] = append([]byte(o), 0)
		ptrs[i] = &cstrs[i][0]
	}
	r := n.nvrtcCompileProgram(prog, int32(len(ptrs)), unsafe.Pointer(&ptrs[0]))
	runtime.KeepAlive(cstrs)
	log := n.log(prog)
	if r == nvrtcBuiltinFailure {
		return nil, fmt.Errorf("nvrtc %s for %s: compile: %w: NVRTC (%s) could not load its libnvrtc-builtins.so.%d.%d; put the folder that holds it on LD_LIBRARY_PATH\n%s",
			name, arch, n.err(r), n.lib.path, n.version.Major, n.version.Minor, log)
	}
	if r != 0 {
		return nil, fmt.Errorf("nvrtc %s for %s: compile: %w\n%s", name, arch, n.err(r), log)
	}
	var size uint64
	if r := n.nvrtcGetCUBINSize(prog, &size); r != 0 {
		return nil, fmt.Errorf("nvrtc %s: cubin size: %w", name, n.err(r))
	}
	c := &Compiled{Log: log, Kernels: ParsePtxasLog(log)}
	if size > 0 {
		c.Cubin = make([]byte, size)
		if r := n.nvrtcGetCUBIN(prog, &c.Cubin[0]); r != 0 {
			return nil, fmt.Errorf("nvrtc %s: cubin: %w", name, n.err(r))
		}
	}
	return c, nil
}

func (n *NVRTC) log(prog uintptr) string {
	var size uint64
	if n.nvrtcGetProgramLogSize(prog, &size) != 0 || size <= 1 {
		return ""
	}
	b := make([]byte, size)
	if n.nvrtcGetProgramLog(prog, &b[0]) != 0 {
		return ""
	}
	return cString(b)
}

var (
	ptxasEntry = regexp.MustCompile(`Compiling entry function '(\w+)' for '(\w+)'`)
	ptxasFrame = regexp.MustCompile(`(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads`)
	// "Used 40 registers, 1024 bytes smem, ..." (CUDA 11); CUDA 12 and
	// later insert ", used 1 barriers" after the registers.
	ptxasUsed = regexp.MustCompile(`Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?`)
)

// ParsePtxasLog reads the per-kernel figures out of a log written with
// --ptxas-options=-v.
func ParsePtxasLog(log string) []KernelStats {
	var out []KernelStats
	var cur *KernelStats
	atoi := func(s string) int { v, _ := strconv.Atoi(s); return v }
	for _, line := range strings.Split(log, "\n") {
		if m := ptxasEntry.FindStringSubmatch(line); m != nil {
			out = append(out, KernelStats{Name: m[1], Arch: m[2]})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil {
			continue
		}
		if m := ptxasFrame.FindStringSubmatch(line); m != nil {
			cur.StackBytes, cur.SpillStores, cur.SpillLoads = atoi(m[1]), atoi(m[2]), atoi(m[3])
		}
		if m := ptxasUsed.FindStringSubmatch(line); m != nil {
			cur.Registers, cur.SharedBytes = atoi(m[1]), atoi(m[2])
		}
	}
	return out
}
