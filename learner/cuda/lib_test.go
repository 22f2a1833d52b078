package cuda

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	fakeMu    sync.Mutex
	fakeBuilt = map[string]string{}
)

// fakeLib builds testdata/fakecuda.c with defines into a shared library in
// its own directory (dlopen caches by path, so each variant needs its own
// path), once per variant and process.
func fakeLib(t *testing.T, name string, defines ...string) string {
	t.Helper()
	key := name + " " + strings.Join(defines, " ")
	fakeMu.Lock()
	defer fakeMu.Unlock()
	if p, ok := fakeBuilt[key]; ok {
		return p
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		// Not a GPU matter: skipped even under RLNODE_REQUIRE_GPU=1, as
		// GPU hosts may lack a C compiler.
		t.Skip("gcc not installed")
	}
	dir, err := os.MkdirTemp(fakeDir, "lib")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	args := []string{"-shared", "-fPIC", "-o", out, "testdata/fakecuda.c"}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	fakeBuilt[key] = out
	return out
}

func TestProbe(t *testing.T) {
	goodNVRTC := func(t *testing.T) string { return fakeLib(t, "libnvrtc.so", "FAKE_NVRTC") }
	goodBlas := func(t *testing.T) string { return fakeLib(t, "libcublasLt.so", "FAKE_CUBLASLT") }
	garbage := func(t *testing.T) string {
		p := filepath.Join(t.TempDir(), "libcuda.so.1")
		if err := os.WriteFile(p, []byte(strings.Repeat("not an ELF file\n", 64)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name    string
		driver  func(t *testing.T) string
		nvrtc   func(t *testing.T) string
		blas    func(t *testing.T) string
		want    []error  // every problem, in order; nil: available
		mention []string // substrings of the report
	}{
		{name: "usable", mention: []string{"Fake GPU 0 (sm_90, 132 SMs, 80.0 GiB)", "CUDA backend: available"}},
		{name: "nothing installed",
			driver: func(t *testing.T) string { return "/nonexistent/libcuda.so.1" },
			nvrtc:  func(t *testing.T) string { return "/nonexistent/libnvrtc.so" },
			blas:   func(t *testing.T) string { return "/nonexistent/libcublasLt.so" },
			want:   []error{ErrNoLibrary, ErrNoLibrary, ErrNoLibrary}, mention: []string{"CUDA driver: library not found (no /nonexistent/libcuda.so.1)"}},
		{name: "not a library", driver: garbage, want: []error{ErrNoLibrary}, mention: []string{"invalid ELF header"}},
		{name: "driver lacks symbols",
			driver: func(t *testing.T) string {
				return fakeLib(t, "libcuda.so.1", "FAKE_DRIVER", "OMIT_DEVICE_COUNT", "OMIT_LAUNCH")
			},
			want: []error{ErrNoSymbol}, mention: []string{"symbol missing: cuDeviceGetCount, cuLaunchKernel"}},
		{name: "driver too old",
			driver: func(t *testing.T) string { return fakeLib(t, "libcuda.so.1", "FAKE_DRIVER", "DRIVER_VERSION=11040") },
			want:   []error{ErrTooOld}, mention: []string{"supports CUDA 11.4, the backend needs 11.8"}},
		{name: "driver older than NVRTC",
			driver: func(t *testing.T) string { return fakeLib(t, "libcuda.so.1", "FAKE_DRIVER", "DRIVER_VERSION=11080") },
			want:   []error{ErrTooOld}, mention: []string{"older than NVRTC 12.4"}},
		{name: "no device at init",
			driver: func(t *testing.T) string { return fakeLib(t, "libcuda.so.1", "FAKE_DRIVER", "INIT_RESULT=100") },
			want:   []error{ErrNoDevice}, mention: []string{"cuInit: no CUDA device"}},
		{name: "no device listed",
			driver: func(t *testing.T) string { return fakeLib(t, "libcuda.so.1", "FAKE_DRIVER", "DEVICE_COUNT=0") },
			want:   []error{ErrNoDevice}, mention: []string{"CUDA_VISIBLE_DEVICES"}},
		{name: "device too old",
			driver: func(t *testing.T) string { return fakeLib(t, "libcuda.so.1", "FAKE_DRIVER", "ARCH=75") },
			want:   []error{ErrTooOld}, mention: []string{"sm_75", "needs sm_80"}},
		{name: "NVRTC too old",
			nvrtc: func(t *testing.T) string {
				return fakeLib(t, "libnvrtc.so", "FAKE_NVRTC", "NVRTC_MAJOR=11", "NVRTC_MINOR=2")
			},
			want: []error{ErrTooOld}, mention: []string{"NVRTC", "CUDA 11.2, the kernels need 11.8"}},
		{name: "NVRTC lacks cubin output",
			nvrtc: func(t *testing.T) string { return fakeLib(t, "libnvrtc.so", "FAKE_NVRTC", "OMIT_CUBIN") },
			want:  []error{ErrNoSymbol}, mention: []string{"nvrtcGetCUBIN"}},
		{name: "cuBLASLt too old",
			blas: func(t *testing.T) string {
				return fakeLib(t, "libcublasLt.so", "FAKE_CUBLASLT", "CUBLASLT_VERSION=110100")
			},
			want: []error{ErrTooOld}, mention: []string{"cuBLASLt", "it is 11.1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.driver == nil {
				c.driver = func(t *testing.T) string { return fakeLib(t, "libcuda.so.1", "FAKE_DRIVER") }
			}
			if c.nvrtc == nil {
				c.nvrtc = goodNVRTC
			}
			if c.blas == nil {
				c.blas = goodBlas
			}
			r := Probe(Libraries{Driver: []string{c.driver(t)}, NVRTC: []string{c.nvrtc(t)}, CublasLt: []string{c.blas(t)}})
			text := r.String()
			if len(r.Problems) != len(c.want) {
				t.Fatalf("%d problems, want %d:\n%s", len(r.Problems), len(c.want), text)
			}
			for i, w := range c.want {
				if !errors.Is(r.Problems[i], w) {
					t.Errorf("problem %d is %v, want one wrapping %v", i, r.Problems[i], w)
				}
			}
			if (r.Err() == nil) != (len(c.want) == 0) {
				t.Errorf("Err() = %v with %d problems", r.Err(), len(c.want))
			}
			for _, m := range c.mention {
				if !strings.Contains(text, m) {
					t.Errorf("report lacks %q:\n%s", m, text)
				}
			}
		})
	}
}

func TestOpenLibraryTriesCandidatesInOrder(t *testing.T) {
	good := fakeLib(t, "libnvrtc.so", "FAKE_NVRTC")
	n, err := OpenNVRTC("/nonexistent/libnvrtc.so.13", good)
	if err != nil {
		t.Fatal(err)
	}
	if n.Path() != good || n.Version() != (Version{12, 4}) {
		t.Errorf("loaded %s version %s, want %s 12.4", n.Path(), n.Version(), good)
	}
}

func TestSearchFindsWheelsAndHonoursEnv(t *testing.T) {
	venv := t.TempDir()
	lib := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "cu13", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	built := fakeLib(t, "libnvrtc.so", "FAKE_NVRTC", "NVRTC_MAJOR=13", "NVRTC_MINOR=0")
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	wheel := filepath.Join(lib, "libnvrtc.so.13")
	if err := os.WriteFile(wheel, b, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VIRTUAL_ENV", venv)
	t.Setenv(EnvNVRTC, "")
	list := searchList(EnvNVRTC, []string{"libnvrtc.so.99"}, "libnvrtc.so.1[0-9]*")
	if len(list) < 2 || list[0] != "libnvrtc.so.99" || list[1] != wheel {
		t.Fatalf("search list %q: want the soname, then %s", list, wheel)
	}
	n, err := OpenNVRTC(list...)
	if err != nil || n.Path() != wheel || n.Version() != (Version{13, 0}) {
		t.Fatalf("OpenNVRTC from the wheel: %v, %v", n, err)
	}

	// An explicit path is the only one tried.
	t.Setenv(EnvNVRTC, "/nonexistent/libnvrtc.so.13")
	if _, err := OpenNVRTC(); !errors.Is(err, ErrNoLibrary) || !strings.Contains(err.Error(), "/nonexistent/libnvrtc.so.13") || strings.Contains(err.Error(), wheel) {
		t.Errorf("with %s set to a missing file: %v", EnvNVRTC, err)
	}
}

// TestSearchFindsUnactivatedVenvAndToolkit: a GPU host's PyTorch often
// lives in a virtual environment whose bin is on PATH but that nobody
// activated (no VIRTUAL_ENV), and a CUDA toolkit keeps its libraries in
// $CUDA_HOME/lib64: both are searched, the wheel first.
func TestSearchFindsUnactivatedVenvAndToolkit(t *testing.T) {
	built := fakeLib(t, "libnvrtc.so", "FAKE_NVRTC", "NVRTC_MAJOR=13", "NVRTC_MINOR=0")
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	put := func(path string, mode os.FileMode, data []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, mode); err != nil {
			t.Fatal(err)
		}
	}
	venv, toolkit := t.TempDir(), t.TempDir()
	put(filepath.Join(venv, "bin", "python3"), 0o755, []byte("#!/bin/sh\n"))
	wheel := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "cu13", "lib", "libnvrtc.so.13")
	put(wheel, 0o755, b)
	inToolkit := filepath.Join(toolkit, "lib64", "libnvrtc.so.13")
	put(inToolkit, 0o755, b)
	t.Setenv("PATH", filepath.Join(venv, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("VIRTUAL_ENV", "")
	t.Setenv("CONDA_PREFIX", "")
	t.Setenv("CUDA_HOME", toolkit)
	t.Setenv(EnvNVRTC, "")
	list := searchList(EnvNVRTC, []string{"libnvrtc.so.99"}, "libnvrtc.so.1[0-9]*")
	iw, it := slices.Index(list, wheel), slices.Index(list, inToolkit)
	if iw < 1 || it < 1 || iw > it {
		t.Fatalf("search list %q: want the soname, the venv's wheel %s, later the toolkit's %s", list, wheel, inToolkit)
	}
	n, err := OpenNVRTC(list...)
	if err != nil || n.Path() != wheel {
		t.Fatalf("OpenNVRTC: %v, %v; want the wheel's", n, err)
	}
	// Without the wheel, the toolkit's library is the one that loads.
	if err := os.Remove(wheel); err != nil {
		t.Fatal(err)
	}
	n, err = OpenNVRTC(searchList(EnvNVRTC, []string{"libnvrtc.so.99"}, "libnvrtc.so.1[0-9]*")...)
	if err != nil || n.Path() != inToolkit {
		t.Fatalf("OpenNVRTC without the wheel: %v, %v; want %s", n, err, inToolkit)
	}
}

// TestNVRTCFindsBuiltinsBesideIt: NVIDIA's CUDA 13 wheel keeps
// libnvrtc-builtins.so.13.0 beside libnvrtc.so.13 in nvidia/cu13/lib, and
// NVRTC opens it by soname on its first compile without a RUNPATH to its
// own folder: a libnvrtc opened by path from there failed every compile
// (NVRTC_ERROR_BUILTIN_OPERATION_FAILURE) unless that folder was on
// LD_LIBRARY_PATH. The stand-in's compile opens its builtins the same way.
func TestNVRTCFindsBuiltinsBesideIt(t *testing.T) {
	const soname = "libnvrtc-builtins.so.13.0"
	built := fakeLib(t, "libnvrtc.so", "FAKE_NVRTC", "NVRTC_MAJOR=13", "NVRTC_MINOR=0", `NVRTC_BUILTINS="`+soname+`"`)
	lib := filepath.Join(t.TempDir(), "site-packages", "nvidia", "cu13", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	nvrtc := filepath.Join(lib, "libnvrtc.so.13")
	if err := os.WriteFile(nvrtc, b, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "builtins.c")
	if err := os.WriteFile(src, []byte("int nvrtc_builtins_stand_in;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-Wl,-soname,"+soname, "-o", filepath.Join(lib, soname), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	n, err := OpenNVRTC(nvrtc)
	if err != nil {
		t.Fatal(err)
	}
	if r := n.nvrtcCompileProgram(0, 0, nil); r != 0 {
		t.Fatalf("compile with %s beside %s: nvrtc error %d, want 0 (builtins preloaded: %q)", soname, nvrtc, r, n.builtins)
	}
	if n.builtins != filepath.Join(lib, soname) {
		t.Errorf("builtins loaded from %q, want %s", n.builtins, filepath.Join(lib, soname))
	}
}

// TestDriverSearchListHasNVIDIADirs: a host whose driver is mounted at
// /usr/local/nvidia/lib64 (container and VM images), with that folder in
// neither LD_LIBRARY_PATH nor the linker's cache, still finds libcuda.so.1
// there, after the sonames; RLNODE_CUDA_DRIVER alone is tried when set.
func TestDriverSearchListHasNVIDIADirs(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(lib, []byte("not loaded here"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := driverDirs
	driverDirs = []string{filepath.Join(dir, "absent"), dir}
	t.Cleanup(func() { driverDirs = old })
	t.Setenv(EnvDriver, "")
	list := driverSearchList(DriverCandidates)
	if !slices.Equal(list, append(slices.Clone(DriverCandidates), lib)) {
		t.Errorf("search list %q: want %q, then %s", list, DriverCandidates, lib)
	}
	t.Setenv(EnvDriver, "/elsewhere/libcuda.so.1")
	if list := driverSearchList(DriverCandidates); !slices.Equal(list, []string{"/elsewhere/libcuda.so.1"}) {
		t.Errorf("with %s set: search list %q", EnvDriver, list)
	}
}
