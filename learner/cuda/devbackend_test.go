package cuda

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
)

var (
	emuLibOnce sync.Once
	emuLib     string
	emuLibErr  error
)

// emuDevice opens an emulated device with its kernels (the library built
// once per process, cached on disk by content), or returns nil without a
// C++ compiler.
func emuDevice(t testing.TB) *EmuDevice {
	t.Helper()
	emuLibOnce.Do(func() {
		var dir string
		if dir, emuLibErr = EmulationCacheDir(); emuLibErr == nil {
			emuLib, emuLibErr = EmulatorLibrary(dir)
		}
	})
	if errors.Is(emuLibErr, ErrNoCompiler) {
		t.Logf("no emulated device: %v", emuLibErr)
		return nil
	}
	if emuLibErr != nil { // the kernels do not build: a failure, not a skip
		t.Fatal(emuLibErr)
	}
	d, err := OpenEmuDevice(emuLib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// emuBackend is a fp32 device backend on a fresh emulated device (one
// warp a block), or skips t (fails it under RLNODE_REQUIRE_GPU=1) without
// a C++ compiler.
func emuBackend(t *testing.T) (*EmuDevice, *DeviceBackend) {
	t.Helper()
	d := emuDevice(t)
	if d == nil {
		noEmuDevice(t)
	}
	b := NewDeviceBackend(d, F32)
	b.Block = 32
	return d, b
}

// noEmuDevice ends a test that runs on the emulated device alone, where
// emuDevice found no C++ compiler: a skip, or under RLNODE_REQUIRE_GPU=1 a
// failure, except on a host where the GPU can run (the emulated device's
// tests ran in CI, and a GPU host need not have g++).
func noEmuDevice(t *testing.T) {
	t.Helper()
	if requireGPU && Available().Err() == nil {
		t.Skip("no C++ compiler for the emulated device (its tests run in CI; a GPU is here)")
	}
	skipOrFail(t, "no C++ compiler for the emulated device")
}

// accels are the devices the device-backend tests run on: the emulated
// device where a C++ compiler is installed, and GPU 0 where Available says
// the backend can run.
func accels(t *testing.T) map[string]Accel {
	t.Helper()
	out := map[string]Accel{}
	if d := emuDevice(t); d != nil {
		out["emulated"] = d
	}
	if g := testGPU(t); g != nil {
		out["gpu"] = g
	}
	if len(out) == 0 {
		skipOrFail(t, "neither a C++ compiler for the emulated device nor a GPU")
	}
	return out
}

// bf16GEMM is the CPU backend with matrix-product operands rounded to
// bf16: the reference for DeviceBackend with GEMM BF16.
type bf16GEMM struct{ *cpu.Backend }

func rounded(t backend.Tensor) cpu.Tensor { return roundBF16(clone(t.(cpu.Tensor))) }

func (c bf16GEMM) MatMul(transA, transB bool, m, n, k int, alpha float32, a, b backend.Tensor, beta float32, out backend.Tensor) {
	c.Backend.MatMul(transA, transB, m, n, k, alpha, rounded(a), rounded(b), beta, out)
}

func (c bf16GEMM) BatchedMatMul(transA, transB bool, m, n, k int, alpha float32, a backend.Tensor, lda, strideA int, b backend.Tensor, ldb, strideB int, beta float32, out backend.Tensor, ldc, strideC int, batch int) {
	c.Backend.BatchedMatMul(transA, transB, m, n, k, alpha, rounded(a), lda, strideA, rounded(b), ldb, strideB, beta, out, ldc, strideC, batch)
}

// stepResult is what a training step is compared by.
type stepResult struct {
	loss                     float64
	logp                     []float32
	grads, weights, weights2 map[string][]float32
}

// trainStep runs two optimizer steps of a small Qwen2 on b (from the same
// weights and packed batches every time), with a loss over log
// probabilities and entropies, and returns the first step's loss,
// log-probabilities and gradients and the weights after each step.
func trainStep(t *testing.T, b backend.Backend) stepResult {
	t.Helper()
	bt := stepBatch(t)
	obj := logpEntropyLoss
	m := tinyQwen2(t, b, 7)
	logp, _, err := m.Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	var r stepResult
	r.logp = clone(logp)
	// The gradients before the step's clipping (which scales the host
	// copies only where the backend has no host memory).
	m.ZeroGrad()
	_, ent, err := m.Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	_, dl, de, _ := obj(0, bt, logp, ent)
	if err := m.Backward(dl, de); err != nil {
		t.Fatal(err)
	}
	r.grads = m.Grads()
	tr := &model.Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0.01), MaxGradNorm: 1}
	st, err := tr.Step([]*model.Batch{bt}, stepLR, obj)
	if err != nil {
		t.Fatal(err)
	}
	r.loss, r.weights = st.Loss, m.Weights()
	db, onDevice := b.(*DeviceBackend)
	var before AllocStats
	if onDevice {
		before = db.A.Stats()
	}
	if _, err := tr.Step([]*model.Batch{bt}, stepLR, obj); err != nil {
		t.Fatal(err)
	}
	r.weights2 = m.Weights()
	// The second step's tensors and temporaries all come from the cache.
	if onDevice {
		if after := db.A.Stats(); after.DeviceAllocs != before.DeviceAllocs || after.Reuses == before.Reuses {
			t.Errorf("allocator over the second step: %+v, then %+v: want reuses and no device allocation", before, after)
		}
	}
	return r
}

const stepLR = 1e-3

// compareSteps checks a device run against its reference: gradients
// within g, weights within 2·lr per step (AdamW moves a weight by about lr
// whatever the gradient's size, and a gradient that is rounding noise, as
// the key bias's, may take either sign).
func compareSteps(t *testing.T, got, want stepResult, logp, g tol) {
	t.Helper()
	if d := got.loss - want.loss; d > logp.rel*abs(want.loss)+logp.abs || -d > logp.rel*abs(want.loss)+logp.abs {
		t.Errorf("loss %v, want %v", got.loss, want.loss)
	}
	near(t, "logp", got.logp, want.logp, logp)
	for name, w := range want.grads {
		near(t, "grad "+name, got.grads[name], w, g)
	}
	for name, w := range want.weights {
		near(t, "weight after step 1 "+name, got.weights[name], w, tol{abs: 2 * stepLR / maxAbs(w)})
	}
	for name, w := range want.weights2 {
		near(t, "weight after step 2 "+name, got.weights2[name], w, tol{abs: 4 * stepLR / maxAbs(w)})
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestDeviceBackendTrainingStep runs two optimizer steps of a small Qwen2
// on the device-resident backend (tensors in device memory, kernels,
// GEMMs on the device, the caching allocator) and on the CPU backend, in
// fp32 and with bf16 matrix products, and compares loss,
// log-probabilities, every gradient and the weights after each step.
func TestDeviceBackendTrainingStep(t *testing.T) {
	want := trainStep(t, cpu.New())
	wantBF16 := trainStep(t, bf16GEMM{cpu.New()})
	// The bf16 reference must differ from fp32 by more than the bf16
	// comparison allows, or that comparison could not tell the modes apart.
	if diff := maxRelDiff(wantBF16.logp, want.logp); diff < 1e-3 {
		t.Fatalf("bf16 products moved logp by %.2g only: the test cannot tell bf16 from fp32", diff)
	}
	for name, d := range accels(t) {
		t.Run(name+"/fp32", func(t *testing.T) {
			db := NewDeviceBackend(d, F32)
			db.Block = 32 // one warp: the fewest threads to schedule in the emulation
			got := trainStep(t, db)
			must(t, db.Sync())
			compareSteps(t, got, want, tol{rel: 1e-5, abs: 1e-5}, tol{rel: 1e-3, abs: 1e-4})
			st := db.A.Stats()
			t.Logf("allocator: %+v", st)
			if st.Reuses == 0 {
				t.Errorf("allocator: no block reused over two steps: %+v", st)
			}
		})
		t.Run(name+"/bf16", func(t *testing.T) {
			db := NewDeviceBackend(d, BF16)
			db.Block = 32
			got := trainStep(t, db)
			must(t, db.Sync())
			// Against the CPU backend with the same bf16 operands: the
			// same math, summed in another order.
			compareSteps(t, got, wantBF16, tol{rel: 1e-4, abs: 1e-4}, tol{rel: 5e-3, abs: 5e-4})
			// Against fp32: what bf16 products cost.
			near(t, "bf16 logp against fp32", got.logp, want.logp, tol{rel: 2e-2, abs: 1e-2})
			for name, w := range want.grads {
				near(t, "bf16 grad against fp32 "+name, got.grads[name], w, tol{rel: 0.1, abs: 0.05})
			}
		})
		t.Run(name+"/bf16-tensor-cores", func(t *testing.T) {
			// The attention's forward products in bf16 too: against fp32
			// with the bounds of the bf16 run's own comparison with fp32.
			db := NewDeviceBackend(d, BF16)
			db.Block = 32
			db.AttnTensorCores = true
			got := trainStep(t, db)
			must(t, db.Sync())
			compareSteps(t, got, want, tol{rel: 2e-2, abs: 1e-2}, tol{rel: 0.1, abs: 0.05})
			// And it is not the fp32 attention: logp moves from the
			// bf16 run's by more than that run's comparison allows.
			diff := maxRelDiff(got.logp, wantBF16.logp)
			t.Logf("logp against bf16 products with fp32 attention: %.2g relative", diff)
			if diff < 1e-3 {
				t.Errorf("tensor-core attention left logp within %.2g of fp32 attention's: was it used?", diff)
			}
		})
	}
}

var (
	gpuOnce sync.Once
	gpu     *GPU
	gpuErr  error
)

// testGPU is GPU 0 as an Accel, opened once per process, or nil where the
// backend cannot run (failing under RLNODE_REQUIRE_GPU=1).
func testGPU(t testing.TB) Accel {
	t.Helper()
	gpuOnce.Do(func() { gpu, gpuErr = OpenGPU(0) })
	if gpuErr != nil {
		if requireGPU {
			t.Fatalf("RLNODE_REQUIRE_GPU=1: %v", gpuErr)
		}
		return nil
	}
	return gpu
}

// ownAccel is d, or in place of the process's shared GPU another handle
// on GPU 0 for the test alone: for tests that close their backend, which
// closes its device (the emulated devices are each test's own already).
func ownAccel(t *testing.T, d Accel) Accel {
	t.Helper()
	if d != Accel(gpu) {
		return d
	}
	g, err := OpenGPU(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func maxRelDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = max(m, abs(float64(a[i]-b[i]))/max(abs(float64(b[i])), 1e-6))
	}
	return m
}

// TestForwardReportsDeviceFailure: a device that runs out of memory in the
// middle of a forward pass makes Forward, and a training step, fail with
// its error, not return the NaNs a failed device downloads.
func TestForwardReportsDeviceFailure(t *testing.T) {
	d, b := emuBackend(t)
	m := tinyQwen2(t, b, 7)
	d.Capacity = d.Used() + 4096 // the weights are there; the activations do not fit
	bt := stepBatch(t)
	if _, _, err := m.Forward(bt); !errors.Is(err, ErrOutOfMemory) || !strings.HasPrefix(err.Error(), "forward: device backend: ") {
		t.Fatalf("Forward on a full device: %v, want a forward error wrapping ErrOutOfMemory", err)
	}
	tr := &model.Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0.01)}
	if _, err := tr.Step([]*model.Batch{bt}, stepLR, logpEntropyLoss); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("a training step on a full device: %v, want an error wrapping ErrOutOfMemory", err)
	}
}
