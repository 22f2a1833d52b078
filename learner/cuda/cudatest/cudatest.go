// Package cudatest gives tests outside learner/cuda a learner backend on
// the emulated GPU: the CUDA kernels built by g++ and run in host memory.
package cudatest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cuda"
)

// EmuBackend returns a Config.Backend that opens a fresh emulated GPU per
// learner, closed when t ends. It skips t where there is no C++ compiler,
// and fails it instead under RLNODE_REQUIRE_GPU=1.
func EmuBackend(t testing.TB) func() (backend.Backend, error) {
	t.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		if os.Getenv("RLNODE_REQUIRE_GPU") == "1" {
			t.Fatalf("RLNODE_REQUIRE_GPU=1: no g++ for the emulated device: %v", err)
		}
		t.Skip("no g++ for the emulated device")
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "rlnode", "cuda-emu")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lib, err := cuda.EmulatorLibrary(dir)
	if err != nil {
		t.Fatal(err)
	}
	return func() (backend.Backend, error) {
		d, err := cuda.OpenEmuDevice(lib)
		if err != nil {
			return nil, err
		}
		b := cuda.NewDeviceBackend(d, cuda.F32)
		b.Block = 32 // one warp: the fewest threads the emulation schedules
		t.Cleanup(func() { b.Close() })
		return b, nil
	}
}

// GPUBackend returns a Config.Backend that opens GPU 0 afresh per learner
// (fp32; closed when t ends), or nil where the CUDA backend cannot run
// here (cuda.Available's reasons are logged). Under RLNODE_REQUIRE_GPU=1
// it fails t instead of returning nil.
func GPUBackend(t testing.TB) func() (backend.Backend, error) {
	t.Helper()
	if err := cuda.Available().Err(); err != nil {
		if os.Getenv("RLNODE_REQUIRE_GPU") == "1" {
			t.Fatalf("RLNODE_REQUIRE_GPU=1: %v", err)
		}
		t.Logf("no GPU: %v", err)
		return nil
	}
	return func() (backend.Backend, error) {
		g, err := cuda.OpenGPU(0)
		if err != nil {
			return nil, err
		}
		b := cuda.NewDeviceBackend(g, cuda.F32)
		t.Cleanup(func() { b.Close() })
		return b, nil
	}
}

// Backends are the device backends there are to test on, by name: the
// emulated GPU where g++ is ("emulated") and GPU 0 where the CUDA backend
// can run ("gpu"). It skips t where there is neither, and fails it
// instead under RLNODE_REQUIRE_GPU=1 (where a missing GPU fails it too).
func Backends(t testing.TB) map[string]func() (backend.Backend, error) {
	t.Helper()
	out := map[string]func() (backend.Backend, error){}
	if g := GPUBackend(t); g != nil {
		out["gpu"] = g
	}
	if _, err := exec.LookPath("g++"); err == nil || len(out) == 0 {
		out["emulated"] = EmuBackend(t)
	}
	return out
}
