package cuda

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// gpuTests are this package's tests with a "gpu" subtest (accels,
// launchers): TestOnEmulatedGPU runs those subtests on the emulated GPU.
var gpuTests = []string{
	"TestAccelGemm", "TestActivationsBF16OnDevice", "TestAdamW", "TestAttention", "TestAttentionDecode",
	"TestBF16WeightCopies", "TestCasts", "TestColumnReductions", "TestDeviceBackendKVCache",
	"TestDeviceBackendTrainingStep", "TestEmulatedGPUChecks", "TestFusedAdamW", "TestFusedAdamWRefusesNonFinite",
	"TestHostBuffers", "TestLogProbs", "TestOpProfile", "TestPolicyLossTokens", "TestRMSNorm", "TestRoPE",
	"TestSoftmax", "TestSwiGLU", "TestTrainerFusedAdamW", "TestTrainingStepOnKernels",
}

// emulatedGPUName is the device name emu/driver.cpp reports.
const emulatedGPUName = "rlnode emulated GPU (CPU)"

// TestOnEmulatedGPU runs the GPU subtests of gpuTests in a child process
// whose CUDA driver and cuBLASLt are the emulated GPU's (emu/driver.cpp):
// GPU and Device make the calls they make on a GPU, load NVRTC's cubins
// and launch kernels through cuLaunchKernel, and cuBLASLt's descriptors,
// heuristic and products run, under checks of contexts, allocations and
// alignments. Where a real GPU is here its own subtests ran instead.
func TestOnEmulatedGPU(t *testing.T) {
	if os.Getenv(EnvDriver) != "" {
		t.Skipf("%s is set: this process already runs on the driver it names", EnvDriver)
	}
	if Available().Err() == nil {
		t.Skip("a GPU is here: the gpu subtests ran on it")
	}
	if testing.Short() {
		t.Skip("-short: the emulated GPU's run takes a minute or two")
	}
	openNVRTC(t)
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "rlnode", "cuda-emu")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lib, err := EmulatedDriverLibrary(dir)
	if errors.Is(err, ErrNoCompiler) {
		t.Skipf("no emulated GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^("+strings.Join(gpuTests, "|")+")$/^gpu$", "-test.v", "-test.count=1", "-test.timeout=25m")
	cmd.Env = append(os.Environ(), EnvDriver+"="+lib, EnvCublasLt+"="+lib, "RLNODE_REQUIRE_GPU=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the gpu subtests on the emulated GPU: %v\n%s", err, tail(out, 8000))
	}
	for _, name := range gpuTests {
		if !regexp.MustCompile(`--- PASS: ` + name + `/gpu[/ ]`).Match(out) {
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

// TestEmulatedGPUChecks: on the emulated GPU (TestOnEmulatedGPU's child),
// the GPU code's driver calls meet the checks a GPU makes or would fail
// later for, with CUDA's error codes: memory comes uninitialised (0xff
// bytes), copies past an allocation fail, a launch with a pointer outside
// device memory fails, a device too small says out of memory, and a
// closed GPU refuses work.
func TestEmulatedGPUChecks(t *testing.T) {
	t.Run("gpu", func(t *testing.T) {
		if os.Getenv(EnvDriver) == "" || Available().Err() != nil {
			t.Skip("not on the emulated GPU (TestOnEmulatedGPU runs this there)")
		}
		g, err := OpenGPU(0)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if !strings.Contains(g.Name(), emulatedGPUName) {
			t.Skipf("%s is not the emulated GPU", g.Name())
		}
		p, err := g.Malloc(64)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 64)
		must(t, g.ToHost(got, p))
		for i, b := range got {
			if b != 0xff {
				t.Fatalf("fresh memory: byte %d is %#x, want 0xff", i, b)
			}
		}
		var de *DriverError
		if err := g.ToDevice(p+32, make([]byte, 64)); !errors.As(err, &de) || de.Code != 1 {
			t.Errorf("a copy past the allocation: %v, want CUDA error 1", err)
		}
		if err := g.ToHost(make([]byte, 8), p+64); !errors.As(err, &de) || de.Code != 1 {
			t.Errorf("a copy from past the allocation: %v, want CUDA error 1", err)
		}
		must(t, g.Launch("scale_f32", D1(1), D1(32), p, float32(2), int64(16)))
		q, err := g.Malloc(64)
		if err != nil {
			t.Fatal(err)
		}
		must(t, g.MemFree(q))
		if err := g.Launch("scale_f32", D1(1), D1(32), q, float32(2), int64(16)); !errors.As(err, &de) || de.Code != 700 {
			t.Errorf("a launch on freed memory: %v, want CUDA error 700", err)
		}
		if err := g.MemFree(q); !errors.As(err, &de) || de.Code != 1 {
			t.Errorf("a second free: %v, want CUDA error 1", err)
		}
		if _, err := g.Malloc(1 << 50); !errors.Is(err, ErrOutOfMemory) {
			t.Errorf("allocating 1 PiB: %v, want ErrOutOfMemory", err)
		}
		must(t, g.MemFree(p))
		must(t, g.Close())
		if _, err := g.Malloc(64); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("Malloc on a closed GPU: %v, want an error saying it is closed", err)
		}
	})
}
