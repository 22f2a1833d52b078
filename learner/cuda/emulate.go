package cuda

import (
	"bufio"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"
)

//go:embed emu/cuda_emu.h emu/registry.h emu/harness.cpp emu/device.cpp emu/driver.cpp
var emuFS embed.FS

// ErrNoCompiler: the emulation needs a host C++ compiler (g++, or $CXX).
var ErrNoCompiler = errors.New("no C++ compiler")

// Emulator runs the kernels on the CPU: kernels/*.cu and emu/ compiled by
// the host C++ compiler into one program that takes launches on stdin. It
// implements Launcher; a launch that runs longer than Timeout (a kernel
// whose threads never meet at a barrier) kills the program and fails,
// as do every launch after it. The default, 5 minutes, is a hang guard:
// every emulated thread is an OS thread, and on a loaded host a launch
// that takes a second alone can take minutes.
type Emulator struct {
	Timeout time.Duration

	mu   sync.Mutex
	cmd  *exec.Cmd
	in   *bufio.Writer
	out  *bufio.Reader
	dead error
}

// EmulationCacheDir is where the emulation's builds are kept:
// rlnode/cuda-emu in the user's cache directory (the system's temporary
// directory where there is none or it cannot be written), created if
// missing.
func EmulationCacheDir() (string, error) {
	dir, err := cacheDir("cuda-emu")
	if err != nil {
		return "", fmt.Errorf("cuda emulation: %w", err)
	}
	return dir, nil
}

// EmulatorBinary builds the emulation program, or finds it already built
// under cacheDir (keyed by the hash of its sources and compiler), and
// returns its path.
func EmulatorBinary(cacheDir string) (string, error) {
	return emuBuild(cacheDir, "harness", "harness.cpp")
}

// EmulatorLibrary builds the emulated device's shared library (EmuDevice),
// or finds it already built under cacheDir, and returns its path.
func EmulatorLibrary(cacheDir string) (string, error) {
	return emuBuild(cacheDir, "libdevice.so", "device.cpp", "-shared", "-fPIC")
}

// EmulatedDriverLibrary builds a shared library that is both a CUDA
// driver and a cuBLASLt for an emulated GPU (emu/driver.cpp: the kernels
// run as under the emulation, device memory is host memory), or finds it
// already built under cacheDir, and returns its path. With
// RLNODE_CUDA_DRIVER and RLNODE_CUBLASLT naming it, GPU and Device run
// on the CPU through the same calls they make on a GPU (NVRTC stays the
// real one: modules are its cubins).
func EmulatedDriverLibrary(cacheDir string) (string, error) {
	return emuBuild(cacheDir, "libcuda-emu.so", "driver.cpp", "-shared", "-fPIC", "-O2")
}

// EmulatedGPUEnv builds the emulated GPU's library (EmulatedDriverLibrary,
// in EmulationCacheDir) and returns the environment entries that make the
// backend load it: RLNODE_CUDA_DRIVER and RLNODE_CUBLASLT.
func EmulatedGPUEnv() ([]string, error) {
	dir, err := EmulationCacheDir()
	if err != nil {
		return nil, err
	}
	lib, err := EmulatedDriverLibrary(dir)
	if err != nil {
		return nil, err
	}
	return []string{EnvDriver + "=" + lib, EnvCublasLt + "=" + lib}, nil
}

// emuBuild compiles main (one of emu/) with the kernels into out under
// cacheDir, keyed by the hash of every source, the options and the
// compiler.
func emuBuild(cacheDir, out, main string, extra ...string) (string, error) {
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	cxxPath, err := exec.LookPath(cxx)
	if err != nil {
		return "", fmt.Errorf("cuda emulation: %w: %v", ErrNoCompiler, err)
	}
	files := map[string]string{}
	var inc, reg strings.Builder
	for _, s := range Sources() {
		files[s.Name] = s.Text
		fmt.Fprintf(&inc, "#include %q\n", s.Name)
		for _, k := range s.Kernels {
			fmt.Fprintf(&reg, "{%q, invoker(%s)},\n", k, k)
		}
	}
	headers, err := fs.Glob(kernelFS, "kernels/*.cuh")
	if err != nil {
		return "", err
	}
	for _, h := range headers {
		text, err := Header(path.Base(h))
		if err != nil {
			return "", err
		}
		files[path.Base(h)] = text
	}
	files["kernels.inc"] = inc.String()
	files["registry.inc"] = reg.String()
	for _, name := range []string{"cuda_emu.h", "registry.h", main} {
		b, err := emuFS.ReadFile("emu/" + name)
		if err != nil {
			return "", err
		}
		files[name] = string(b)
	}
	args := append([]string{"-std=c++20", "-O1", "-pthread", `-DKERNELS_INC="kernels.inc"`}, extra...)
	args = append(args, "-o", out, main)
	h := sha256.New()
	fmt.Fprintf(h, "%s %q\n", cxxPath, args)
	if v, err := exec.Command(cxxPath, "--version").Output(); err == nil {
		h.Write(v)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s %d\n%s", n, len(files[n]), files[n])
	}
	dir := filepath.Join(cacheDir, hex.EncodeToString(h.Sum(nil))[:16])
	bin := filepath.Join(dir, out)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp, err := os.MkdirTemp(cacheDir, "build-")
	if err != nil {
		return "", fmt.Errorf("cuda emulation: %w", err)
	}
	defer os.RemoveAll(tmp)
	for n, text := range files {
		if err := os.WriteFile(filepath.Join(tmp, n), []byte(text), 0o644); err != nil {
			return "", fmt.Errorf("cuda emulation: %w", err)
		}
	}
	cmd := exec.Command(cxxPath, args...)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cuda emulation: %s %s: %v\n%s", cxx, strings.Join(args, " "), err, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cuda emulation: %w", err)
	}
	// Rename is atomic: a concurrent build of the same sources wins or loses whole.
	if err := os.Rename(filepath.Join(tmp, out), bin); err != nil {
		if _, statErr := os.Stat(bin); statErr != nil {
			return "", fmt.Errorf("cuda emulation: %w", err)
		}
	}
	return bin, nil
}

// StartEmulator starts the emulation program at bin.
func StartEmulator(bin string) (*Emulator, error) {
	cmd := exec.Command(bin)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cuda emulation: start %s: %w", bin, err)
	}
	return &Emulator{Timeout: 5 * time.Minute, cmd: cmd, in: bufio.NewWriter(in), out: bufio.NewReader(out)}, nil
}

// Close stops the emulation program.
func (e *Emulator) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cmd == nil {
		return nil
	}
	e.cmd.Process.Kill()
	e.cmd.Wait()
	e.cmd = nil
	if e.dead == nil {
		e.dead = errors.New("cuda emulation: closed")
	}
	return nil
}

// sliceBytes is the storage of a slice argument; nil for a nil slice and
// for scalars.
func sliceBytes(a any) []byte {
	switch s := a.(type) {
	case []float32:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
	case []uint16:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
	case []int32:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
	case []int64:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 8*len(s))
	case []float64:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 8*len(s))
	}
	return nil
}

// Launch runs the kernel in the emulation; see Launcher.
func (e *Emulator) Launch(kernel string, grid, block Dim3, args ...any) error {
	if err := checkArgs(kernel, grid, block, args); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead != nil {
		return fmt.Errorf("launch %s: %w", kernel, e.dead)
	}
	done := make(chan error, 1)
	go func() { done <- e.roundTrip(kernel, grid, block, args) }()
	select {
	case err := <-done:
		if err != nil {
			var ke kernelError
			if !errors.As(err, &ke) {
				e.dead = err
				e.cmd.Process.Kill()
			}
			return fmt.Errorf("launch %s (grid %v, block %v): %w", kernel, grid, block, err)
		}
		return nil
	case <-time.After(e.Timeout):
		e.dead = fmt.Errorf("cuda emulation: a launch of %s ran over %v", kernel, e.Timeout)
		e.cmd.Process.Kill()
		<-done
		return e.dead
	}
}

// kernelError is the emulation refusing a launch; the program goes on.
type kernelError string

func (k kernelError) Error() string { return string(k) }

func (e *Emulator) roundTrip(kernel string, grid, block Dim3, args []any) error {
	le := binary.LittleEndian
	w := e.in
	var b4 [4]byte
	var b8 [8]byte
	u32 := func(v uint32) { le.PutUint32(b4[:], v); w.Write(b4[:]) }
	u64 := func(v uint64) { le.PutUint64(b8[:], v); w.Write(b8[:]) }
	u32(uint32(len(kernel)))
	w.WriteString(kernel)
	for _, d := range []Dim3{grid, block} {
		u32(uint32(d.X))
		u32(uint32(d.Y))
		u32(uint32(d.Z))
	}
	u32(uint32(len(args)))
	for _, a := range args {
		switch v := a.(type) {
		case Null:
			w.WriteByte('N')
		case int32:
			w.WriteByte('i')
			u32(uint32(v))
		case int64:
			w.WriteByte('l')
			u64(uint64(v))
		case float32:
			w.WriteByte('f')
			u32(*(*uint32)(unsafe.Pointer(&v)))
		case float64:
			w.WriteByte('d')
			u64(*(*uint64)(unsafe.Pointer(&v)))
		default:
			b := sliceBytes(a)
			if b == nil {
				w.WriteByte('N') // a nil slice is a null pointer
				continue
			}
			w.WriteByte('B')
			u64(uint64(len(b)))
			w.Write(b)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("cuda emulation: write: %w", err)
	}
	r := e.out
	if _, err := io.ReadFull(r, b4[:]); err != nil {
		return fmt.Errorf("cuda emulation: the program stopped (a crash in the kernel?): %w", err)
	}
	if st := le.Uint32(b4[:]); st != 0 {
		if _, err := io.ReadFull(r, b4[:]); err != nil {
			return fmt.Errorf("cuda emulation: read: %w", err)
		}
		msg := make([]byte, min(le.Uint32(b4[:]), 4096))
		if _, err := io.ReadFull(r, msg); err != nil {
			return fmt.Errorf("cuda emulation: read: %w", err)
		}
		return kernelError(msg)
	}
	for _, a := range args {
		b := sliceBytes(a)
		if b == nil {
			continue
		}
		if _, err := io.ReadFull(r, b8[:]); err != nil {
			return fmt.Errorf("cuda emulation: read: %w", err)
		}
		if n := le.Uint64(b8[:]); n != uint64(len(b)) {
			return fmt.Errorf("cuda emulation: a buffer of %d bytes came back as %d", len(b), n)
		}
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("cuda emulation: read: %w", err)
		}
	}
	return nil
}
