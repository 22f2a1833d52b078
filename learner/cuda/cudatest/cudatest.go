// Package cudatest gives tests outside learner/cuda a learner backend on
// the emulated GPU: the CUDA kernels built by g++ and run in host memory.
package cudatest

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cuda"
)

// EmuBackend returns a Config.Backend that opens a fresh emulated GPU per
// learner, closed when t ends. It skips t where there is no C++ compiler,
// and fails it instead under RLNODE_REQUIRE_GPU=1, except on a host where
// the GPU can run (the emulated GPU's tests ran in CI, and a GPU host need
// not have g++).
func EmuBackend(t testing.TB) func() (backend.Backend, error) {
	t.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		if os.Getenv("RLNODE_REQUIRE_GPU") == "1" && cuda.Available().Err() != nil {
			t.Fatalf("RLNODE_REQUIRE_GPU=1: no g++ for the emulated device: %v", err)
		}
		t.Skip("no g++ for the emulated device")
	}
	dir, err := cuda.EmulationCacheDir()
	if err != nil {
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

// OnEmulatedGPU runs the "gpu" subtests of tests again, in a child process
// of this test binary whose CUDA driver and cuBLASLt are the emulated
// GPU's (cuda.EmulatedGPUEnv; two of them), under RLNODE_REQUIRE_GPU=1 and
// RLNODE_CUDA_CHECK_KEPT=1: the GPU code paths (driver memory, modules,
// launches, cuBLASLt) on the CPU. It fails t unless every one of tests
// passed a gpu subtest there. It skips where a GPU is here (its subtests
// ran on it), under -short, and without g++ or NVRTC.
func OnEmulatedGPU(t *testing.T, tests ...string) {
	t.Helper()
	if os.Getenv(cuda.EnvDriver) != "" {
		t.Skipf("%s is set: this process already runs on the driver it names", cuda.EnvDriver)
	}
	if cuda.Available().Err() == nil {
		t.Skip("a GPU is here: the gpu subtests ran on it")
	}
	if testing.Short() {
		t.Skip("-short: the gpu subtests on the emulated GPU take a while")
	}
	if _, err := cuda.OpenNVRTC(); err != nil {
		t.Skipf("no NVRTC for the emulated GPU's modules: %v", err)
	}
	env, err := cuda.EmulatedGPUEnv()
	if errors.Is(err, cuda.ErrNoCompiler) {
		t.Skipf("no emulated GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^("+strings.Join(tests, "|")+")$/^gpu$", "-test.v", "-test.count=1", "-test.timeout=25m")
	// Two GPUs: tests that want a second one find it. Each reused bf16
	// cast of a product's operand is checked against the operand.
	cmd.Env = append(append(os.Environ(), env...), "RLNODE_REQUIRE_GPU=1", "RLNODE_EMU_GPU_COUNT=2", "RLNODE_CUDA_CHECK_KEPT=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the gpu subtests on the emulated GPU: %v\n%s", err, tail(out, 8000))
	}
	for _, name := range tests {
		if !regexp.MustCompile(`--- PASS: ` + regexp.QuoteMeta(name) + `/gpu[/ ]`).Match(out) {
			t.Errorf("%s: no gpu subtest passed on the emulated GPU\n%s", name, tail(out, 4000))
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
