package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
)

// TestActivationsBF16OnDevice: a three-layer Qwen2 keeping its layer
// activations as bf16 between the passes (model.Model.ActivationsBF16;
// the casts are cast_f32_bf16 and cast_bf16_f32) gives on the device the
// CPU backend's gradients under the same option: within rel 1e-3 and
// 1e-3 of each tensor's peak, the fp32 step tolerance widened because an
// activation lying near a bf16 rounding boundary may round the other way
// on the other backend (a step of 2⁻⁸ relative). A value through bf16
// storage is the CPU's rounding, bit for bit.
func TestActivationsBF16OnDevice(t *testing.T) {
	cfg := model.Config{Architecture: model.Qwen2, HiddenSize: 32, IntermediateSize: 48, NumLayers: 3, NumHeads: 4,
		NumKVHeads: 2, HeadDim: 8, VocabSize: 64, MaxPositions: 128, RMSNormEps: 1e-6,
		RopeTheta: 1e6, TorchDType: "float32", AttentionBias: true, TieWordEmbeddings: true}
	bt := stepBatch(t)
	run := func(t *testing.T, b backend.Backend, bf16 bool) (logp []float32, grads map[string][]float32) {
		m, err := model.New(cfg, b)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 1))
		for _, p := range m.Params() {
			v := randn(rng, p.Len(), 0.3)
			if len(p.Shape) == 1 && p.Name[len(p.Name)-6:] == "weight" {
				for i := range v {
					v[i] += 1 // the norms
				}
			}
			m.B.Upload(p.W, v)
		}
		m.ActivationsBF16 = bf16
		m.ZeroGrad()
		logp, ent, err := m.Forward(bt)
		if err != nil {
			t.Fatal(err)
		}
		_, dl, de, _ := logpEntropyLoss(0, bt, logp, ent)
		if err := m.Backward(dl, de); err != nil {
			t.Fatal(err)
		}
		return clone(logp), m.Grads()
	}
	_, want := run(t, cpu.New(), true)
	_, plain := run(t, cpu.New(), false)
	moved := 0.0
	for p, w := range want {
		var peak, d float64
		for i := range w {
			peak = max(peak, abs(float64(plain[p][i])))
			d = max(d, abs(float64(w[i]-plain[p][i])))
		}
		moved = max(moved, d/max(peak, 1e-30))
	}
	if moved < 3e-3 {
		t.Fatalf("bf16 activations moved the gradients by %.2g of their peak only: the test cannot tell the modes apart", moved)
	}
	t.Logf("bf16 activations move the CPU's gradients by up to %.2g of their peak", moved)
	_, want16 := run(t, bf16GEMM{cpu.New()}, true)
	for name, d := range accels(t) {
		t.Run(name, func(t *testing.T) {
			// onDevice runs the step on d with products in gemm and
			// compares the gradients with want's.
			onDevice := func(gemm DType, want map[string][]float32) *DeviceBackend {
				db := NewDeviceBackend(d, gemm)
				db.Block = 32
				_, got := run(t, db, true)
				must(t, db.Sync())
				for p, w := range want {
					near(t, gemm.String()+" products: grad "+p, got[p], w, tol{rel: 1e-3, abs: 1e-3})
				}
				return db
			}
			db := onDevice(F32, want)
			x := db.AllocBF16(1000)
			if x.Len() != 1000 || !x.(*Tensor).bf16 {
				t.Fatalf("AllocBF16(1000): %d elements, bf16 %v", x.Len(), x.(*Tensor).bf16)
			}
			src := db.Alloc(1000)
			vals := randn(rand.New(rand.NewPCG(5, 5)), 1000, 3)
			db.Upload(src, vals)
			db.ToBF16(x, src)
			back := db.Alloc(1000)
			db.FromBF16(back, x)
			got1 := make([]float32, 1000)
			db.Download(got1, back)
			must(t, db.Sync())
			for i, v := range vals {
				if want := roundBF16(cpu.Tensor{v})[0]; got1[i] != want {
					t.Fatalf("element %d: %v through bf16 storage, want %v", i, got1[i], want)
				}
			}
			db.Free(x)
			must(t, db.Sync())

			// With bf16 products too, where a restored activation's
			// products read its bf16 storage (a borrowed cast; the tests
			// check every reused cast against its operand).
			db16 := onDevice(BF16, want16)
			borrowed := false
			for _, k := range db16.kept {
				borrowed = borrowed || k.borrowed
			}
			if db16.KeptReuses == 0 || !borrowed {
				t.Errorf("bf16 products: %d kept casts read, borrowed ones held: %v; want both", db16.KeptReuses, borrowed)
			}
		})
	}
}
