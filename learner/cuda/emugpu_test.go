package cuda_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/learner/cuda/cudatest"
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

// TestOnEmulatedGPU runs the gpu subtests of gpuTests on the emulated GPU
// (emu/driver.cpp): GPU and Device make the calls they make on a GPU, load
// NVRTC's cubins and launch kernels through cuLaunchKernel, and cuBLASLt's
// descriptors, heuristic and products run, under checks of contexts,
// allocations and alignments.
func TestOnEmulatedGPU(t *testing.T) {
	cudatest.OnEmulatedGPU(t, gpuTests...)
}

// TestEmulatedGPUChecks: on the emulated GPU (TestOnEmulatedGPU's child),
// the GPU code's driver calls meet the checks a GPU makes or would fail
// later for, with CUDA's error codes: memory comes uninitialised (0xff
// bytes), copies past an allocation fail, a launch with a pointer outside
// the device's memory (freed, or another GPU's) fails, a queued copy reads
// its source when it runs, a device too small says out of memory, and a
// closed GPU refuses work.
func TestEmulatedGPUChecks(t *testing.T) {
	t.Run("gpu", func(t *testing.T) {
		if os.Getenv(cuda.EnvDriver) == "" || cuda.Available().Err() != nil {
			t.Skip("not on the emulated GPU (TestOnEmulatedGPU runs this there)")
		}
		check := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		g, err := cuda.OpenGPU(0)
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
		check(g.ToHost(got, p))
		for i, b := range got {
			if b != 0xff {
				t.Fatalf("fresh memory: byte %d is %#x, want 0xff", i, b)
			}
		}
		var de *cuda.DriverError
		if err := g.ToDevice(p+32, make([]byte, 64)); !errors.As(err, &de) || de.Code != 1 {
			t.Errorf("a copy past the allocation: %v, want CUDA error 1", err)
		}
		if err := g.ToHost(make([]byte, 8), p+64); !errors.As(err, &de) || de.Code != 1 {
			t.Errorf("a copy from past the allocation: %v, want CUDA error 1", err)
		}
		check(g.Launch("scale_f32", cuda.D1(1), cuda.D1(32), p, float32(2), int64(16)))
		q, err := g.Malloc(64)
		if err != nil {
			t.Fatal(err)
		}
		check(g.MemFree(q))
		if err := g.Launch("scale_f32", cuda.D1(1), cuda.D1(32), q, float32(2), int64(16)); !errors.As(err, &de) || de.Code != 700 {
			t.Errorf("a launch on freed memory: %v, want CUDA error 700", err)
		}
		if err := g.MemFree(q); !errors.As(err, &de) || de.Code != 1 {
			t.Errorf("a second free: %v, want CUDA error 1", err)
		}
		if _, err := g.Malloc(1 << 50); !errors.Is(err, cuda.ErrOutOfMemory) {
			t.Errorf("allocating 1 PiB: %v, want cuda.ErrOutOfMemory", err)
		}
		// A queued copy reads its page-locked source when it runs, and
		// runs when the host waits: a source changed before then changes
		// what arrives, as on a GPU.
		src, err := g.HostAlloc(64)
		check(err)
		for i := range src {
			src[i] = 1
		}
		check(g.ToDeviceAsync(p, src))
		src[0] = 2
		check(g.Sync())
		check(g.ToHost(got, p))
		if got[0] != 2 || got[1] != 1 {
			t.Errorf("a queued copy whose source changed before it ran delivered %d, %d; want 2, 1", got[0], got[1])
		}
		check(g.HostFree(src))
		// Another GPU's memory is not this one's, as without peer access.
		if other, err := cuda.OpenGPU(1); err == nil {
			r, err := other.Malloc(64)
			check(err)
			if err := g.Launch("scale_f32", cuda.D1(1), cuda.D1(32), r, float32(2), int64(16)); !errors.As(err, &de) || de.Code != 700 {
				t.Errorf("a launch on GPU 0 with GPU 1's memory: %v, want CUDA error 700", err)
			}
			check(other.Launch("scale_f32", cuda.D1(1), cuda.D1(32), r, float32(2), int64(16)))
			check(other.Close())
		} else {
			t.Errorf("GPU 1 of two emulated GPUs: %v", err)
		}
		check(g.MemFree(p))
		check(g.Close())
		if _, err := g.Malloc(64); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("Malloc on a closed GPU: %v, want an error saying it is closed", err)
		}
	})
}
