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
