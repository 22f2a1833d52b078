package native

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/learner/cuda/cudatest"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
)

// onDevice builds a model of ref's configuration on the backend newB
// opens and uploads ref's weights to it.
func onDevice(t *testing.T, ref *model.Model, newB func() (backend.Backend, error)) *model.Model {
	t.Helper()
	b, err := newB()
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(ref.Config, b)
	if err != nil {
		t.Fatal(err)
	}
	w := ref.Weights()
	for _, p := range m.Params() {
		m.B.Upload(p.W, w[p.Name])
	}
	return m
}

// TestEngineOnGPU runs the engine with its model, KV caches and
// activations on the CUDA backend (the emulated device here, also the
// GPU where there is one): greedy and seeded samples are the cpu engine's
// tokens, with log probs within 1e-3 (the kernels sum in another order).
func TestEngineOnGPU(t *testing.T) {
	ref := nativetest.Model(t, nativetest.Config(), 3)
	for name, newB := range cudatest.Backends(t) {
		t.Run(name, func(t *testing.T) {
			// Few tokens: the emulation launches each kernel in turn on
			// the CPU (about 0.1 s a decode step of this model).
			sameGenerations(t, ref, onDevice(t, ref, newB), forkingRequests(12, 8, 16), 1e-3)
		})
	}
}

// TestEngineDeviceFailure: a device that runs out of memory mid-generation
// fails the requests with the device's error, instead of sampling from
// the NaN its downloads then read, and the engine still closes.
func TestEngineDeviceFailure(t *testing.T) {
	ref := nativetest.Model(t, nativetest.Config(), 3)
	newB := cudatest.EmuBackend(t)
	m := onDevice(t, ref, newB)
	emu := m.B.(*cuda.DeviceBackend).D.(*cuda.EmuDevice)
	// Room for the weights and little more: the scratch and KV caches of
	// a batch of long sequences do not fit.
	emu.Capacity = emu.Used() + 64<<10
	e, err := New(m, tokenizer.Builtin(), Config{MaxBatch: 16})
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]engine.Request, 16)
	for i := range reqs {
		reqs[i] = engine.Request{Prompt: tokenizer.Builtin().Encode(strings.Repeat("long prompt ", 8)), Params: engine.SamplingParams{MaxTokens: 100}}
	}
	_, err = e.Generate(testCtx(t), reqs)
	if err == nil || !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Fatalf("Generate on a full device: error %v, want one wrapping %v", err, cuda.ErrOutOfMemory)
	}
	if !strings.Contains(err.Error(), "device backend") {
		t.Errorf("error %q does not say it is the device's", err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestLoadOnDevice: Config.Device puts a loaded model on the GPU (where
// the CUDA backend can run: the engine then generates the cpu engine's
// tokens), and where it cannot, Load fails naming the device and the
// reason. A device value that is not one fails on every host.
func TestLoadOnDevice(t *testing.T) {
	ref := nativetest.Model(t, nativetest.Config(), 3)
	dir := nativetest.Save(t, ref)
	if _, err := Load(dir, Config{Device: "gpu"}); err == nil || !strings.Contains(err.Error(), `device "gpu": want cpu, cuda or cuda-bf16`) {
		t.Errorf("Load with device gpu: %v", err)
	}
	if avail := cuda.Available().Err(); avail != nil {
		if os.Getenv("RLNODE_REQUIRE_GPU") == "1" {
			t.Fatalf("RLNODE_REQUIRE_GPU=1: %v", avail)
		}
		_, err := Load(dir, Config{Device: "cuda"})
		if err == nil || !strings.Contains(err.Error(), "cuda: the CUDA backend cannot run here") {
			t.Fatalf("Load on cuda without the CUDA backend: %v", err)
		}
		return
	}
	t.Run("gpu", func(t *testing.T) {
		tok := tokenizer.Builtin()
		want, err := Load(dir, Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer want.Close()
		got, err := Load(dir, Config{Device: "cuda"})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got.m.B.(*cuda.DeviceBackend); !ok {
			t.Fatalf("Load on cuda: backend %T", got.m.B)
		}
		req := []engine.Request{{Prompt: tok.Encode("The answer is"), Params: engine.SamplingParams{MaxTokens: 40}}}
		w, err := want.Generate(testCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		g, err := got.Generate(testCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := g[0].Samples[0].TokenIDs, w[0].Samples[0].TokenIDs; !slices.Equal(a, b) {
			t.Errorf("greedy on the GPU %v, on the cpu %v", a, b)
		}
		if err := got.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// TestOnEmulatedGPU runs the engine's gpu subtests on the emulated GPU:
// the model loaded and decoding through the CUDA driver's and cuBLASLt's
// calls, on the CPU.
func TestOnEmulatedGPU(t *testing.T) {
	cudatest.OnEmulatedGPU(t, "TestEngineOnGPU", "TestLoadOnDevice")
}

// TestEngineKeepsWeightCasts: with bf16 products the engine casts each
// weight for its products once, at the first generation, not at every
// decode step: a second and a third generation of the same greedy
// requests launch the same number of operand casts, one per weight matrix
// fewer than the first, and give the same tokens (each reused cast is
// checked against its weight, RLNODE_CUDA_CHECK_KEPT=1).
func TestEngineKeepsWeightCasts(t *testing.T) {
	t.Setenv("RLNODE_CUDA_CHECK_KEPT", "1")
	emu := cudatest.EmuBackend(t)
	ref := nativetest.Model(t, nativetest.Config(), 3)
	var b *cuda.DeviceBackend
	m := onDevice(t, ref, func() (backend.Backend, error) {
		be, err := emu()
		if err == nil {
			b = be.(*cuda.DeviceBackend)
			b.GEMM = cuda.BF16
		}
		return be, err
	})
	e, err := New(m, tokenizer.Builtin(), Config{MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// One request of two samples: the scheduler admits a request whole,
	// so every generation makes the same forward passes (two requests
	// could be admitted one pass apart, a pass more of activation casts).
	reqs := []engine.Request{
		{Prompt: tokenizer.Builtin().Encode("hello there"), Params: engine.SamplingParams{MaxTokens: 8, N: 2}},
	}
	weights := 0
	for _, p := range m.Params() {
		if len(p.Shape) == 2 {
			weights++
		}
	}
	var casts [3]int
	var first [][]int
	for i := range casts {
		c := b.Casts
		res, err := e.Generate(testCtx(t), reqs)
		if err != nil {
			t.Fatal(err)
		}
		casts[i] = b.Casts - c
		var toks [][]int
		for _, s := range res[0].Samples {
			toks = append(toks, s.TokenIDs)
		}
		if i == 0 {
			first = toks
		} else if !slices.EqualFunc(toks, first, slices.Equal[[]int]) {
			t.Fatalf("generation %d gave %v, the first %v", i+1, toks, first)
		}
	}
	t.Logf("operand casts per generation: %v (%d weight matrices)", casts, weights)
	if casts[1] != casts[2] || casts[0]-casts[1] != weights {
		t.Fatalf("operand casts per generation %v: want the first to have one per weight matrix (%d) more than the next two, which are equal", casts, weights)
	}
}
