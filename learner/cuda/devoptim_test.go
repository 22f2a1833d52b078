package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
)

// TestFusedAdamW runs five AdamW steps with global-norm clipping on the
// device (SumSquares, then AdamW over every tensor in one launch) and
// with learner/optim on the host, from the same weights and gradients,
// and compares the norms, the weights, the moments and (with bf16
// products) the weights' bf16 copies.
func TestFusedAdamW(t *testing.T) {
	sizes := []int{1, 37, 300, 1000} // 1000 takes several blocks per tensor at 32 threads
	for name, d := range accels(t) {
		for _, gemm := range []DType{F32, BF16} {
			t.Run(name+"/"+gemm.String(), func(t *testing.T) {
				b := NewDeviceBackend(d, gemm)
				b.Block = 32
				rng := rand.New(rand.NewPCG(5, 6))
				ref := optim.NewAdamW(0.9, 0.95, 1e-8, 0.05)
				dev := optim.NewAdamW(0.9, 0.95, 1e-8, 0.05)
				var host []*optim.Param
				var sets []backend.AdamWTensors
				var grads []backend.Tensor
				for i, n := range sizes {
					w := randn(rng, n, 1)
					host = append(host, &optim.Param{Name: fmt.Sprint("p", i), Data: clone(w), Grad: make([]float32, n)})
					s := backend.AdamWTensors{W: b.Alloc(n), G: b.Alloc(n), M: b.Alloc(n), V: b.Alloc(n)}
					b.Upload(s.W, w)
					sets = append(sets, s)
					grads = append(grads, s.G)
				}
				sums := make([]float64, len(sizes))
				var after1 AllocStats
				const maxNorm = 2.0
				for step := 1; step <= 5; step++ {
					// Large gradients on odd steps, so that clipping
					// scales some steps and not others.
					scale := 0.01
					if step%2 == 1 {
						scale = 1
					}
					for i, p := range host {
						g := randn(rng, len(p.Data), scale)
						copy(p.Grad, g)
						b.Upload(sets[i].G, g)
					}
					must(t, b.SumSquares(sums, grads))
					var sq float64
					for i, p := range host {
						var want float64
						for _, g := range p.Grad {
							want += float64(g) * float64(g)
						}
						if math.Abs(sums[i]-want) > 1e-12*want {
							t.Fatalf("step %d: sum of squares of %s is %v, want %v", step, p.Name, sums[i], want)
						}
						sq += sums[i]
					}
					norm := math.Sqrt(sq)
					if got := optim.ClipGradNorm(host, maxNorm); math.Abs(got-norm) > 1e-12*got {
						t.Fatalf("step %d: norm %v, the host's %v", step, norm, got)
					}
					gs := float32(1)
					if c := maxNorm / (norm + 1e-6); c < 1 {
						gs = float32(c)
					}
					must(t, ref.Step(host, 1e-2))
					c, err := dev.Advance(1e-2)
					must(t, err)
					must(t, b.AdamW(sets, backend.AdamWCoef{GradScale: gs, Decay: c.Decay, Beta1: c.Beta1, Beta2: c.Beta2,
						OneMinusB1: c.OneMinusB1, OneMinusB2: c.OneMinusB2, BC2Sqrt: c.BC2Sqrt, Eps: c.Eps, StepSize: c.StepSize}))
					if step == 1 {
						after1 = b.A.Stats()
					}
				}
				if st := b.A.Stats(); st.DeviceAllocs != after1.DeviceAllocs {
					t.Errorf("steps 2-5 allocated from the device: %+v after step 1, %+v after step 5", after1, st)
				}
				state := map[string][]float32{}
				for _, x := range ref.State().Tensors {
					state[x.Name] = x.Data
				}
				for i, hp := range host {
					got := make([]float32, len(hp.Data))
					b.Download(got, sets[i].W)
					// Same float32 operations; a compiler may contract
					// a·b+c into one rounding.
					near(t, "weights "+hp.Name, got, hp.Data, tol{rel: 1e-6})
					b.Download(got, sets[i].M)
					near(t, "exp_avg "+hp.Name, got, state[optim.ExpAvgPrefix+hp.Name], tol{rel: 1e-6})
					b.Download(got, sets[i].V)
					near(t, "exp_avg_sq "+hp.Name, got, state[optim.ExpAvgSqPrefix+hp.Name], tol{rel: 1e-6})
					if gemm == BF16 {
						// The copy the products read is the weights rounded.
						b.Download(got, sets[i].W)
						s := b.shadowAt(p(sets[i].W), 4*int64(len(got)))
						if s == nil || !s.valid {
							t.Fatalf("%s: no current bf16 copy after AdamW", hp.Name)
						}
						h := make([]uint16, len(got))
						must(t, d.ToHost(sliceBytes(h), s.copy))
						near(t, "bf16 copy "+hp.Name, fromBF16(h), roundBF16(got), tol{})
					}
				}
				// A NaN gradient shows in its tensor's sum only.
				g := make([]float32, sizes[2])
				g[7] = float32(math.NaN())
				b.Upload(sets[2].G, g)
				must(t, b.SumSquares(sums, grads))
				for i, s := range sums {
					if math.IsNaN(s) != (i == 2) {
						t.Errorf("sum of squares %d is %v with a NaN in gradient 2 only", i, s)
					}
				}
				must(t, b.Sync())
			})
		}
	}
}

// hostOnly hides a DeviceBackend's fused optimizer: a Trainer over it
// steps on the host, as before the fused AdamW existed.
type hostOnly struct{ backend.Backend }

// fusedRun is three optimizer steps of a small Qwen2 on b through
// model.Trainer: weights after each step, gradient norms, the optimizer's
// state at the end.
type fusedRun struct {
	weights []map[string][]float32
	norms   []float64
	state   map[string][]float32
	step    int
}

func trainFused(t *testing.T, b backend.Backend, db *DeviceBackend) fusedRun {
	t.Helper()
	bt := stepBatch(t)
	m := tinyQwen2(t, b, 7)
	tr := &model.Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0.01), MaxGradNorm: 0.5}
	var r fusedRun
	var before AllocStats
	for step := 1; step <= 3; step++ {
		if step == 2 {
			before = db.A.Stats()
		}
		st, err := tr.Step([]*model.Batch{bt}, 1e-2, logpEntropyLoss)
		must(t, err)
		r.norms = append(r.norms, st.GradNorm)
		r.weights = append(r.weights, m.Weights())
	}
	if after := db.A.Stats(); after.DeviceAllocs != before.DeviceAllocs {
		t.Errorf("steps 2 and 3 allocated from the device: %+v, then %+v", before, after)
	}
	must(t, tr.SyncOptimizer())
	st := tr.Opt.State()
	r.step, r.state = st.Step, map[string][]float32{}
	for _, x := range st.Tensors {
		r.state[x.Name] = x.Data
	}
	return r
}

// TestTrainerFusedAdamW trains a small Qwen2 for three steps on the same
// device with the fused AdamW and with the host optimizer: the gradients
// are the same bits, so weights, gradient norms and the optimizer state
// (after SyncOptimizer) agree to float32 rounding. The fused run copies
// no weight to the host, and its steps after the first allocate nothing.
func TestTrainerFusedAdamW(t *testing.T) {
	for name, d := range accels(t) {
		for _, gemm := range []DType{F32, BF16} {
			t.Run(name+"/"+gemm.String(), func(t *testing.T) {
				hb := NewDeviceBackend(d, gemm)
				hb.Block = 32
				want := trainFused(t, hostOnly{hb}, hb)
				must(t, hb.Sync())
				fb := NewDeviceBackend(d, gemm)
				fb.Block = 32
				got := trainFused(t, fb, fb)
				must(t, fb.Sync())
				if fb.opt.tables == 0 {
					t.Fatal("the device backend's fused AdamW never ran")
				}
				if got.step != 3 || want.step != 3 {
					t.Fatalf("optimizer steps %d fused, %d on the host; want 3", got.step, want.step)
				}
				for i := range want.norms {
					if math.Abs(got.norms[i]-want.norms[i]) > 1e-9*want.norms[i] {
						t.Errorf("step %d: gradient norm %v fused, %v on the host", i+1, got.norms[i], want.norms[i])
					}
					for n, w := range want.weights[i] {
						near(t, fmt.Sprintf("step %d: %s", i+1, n), got.weights[i][n], w, tol{rel: 1e-5, abs: 1e-6})
					}
				}
				if len(got.state) != len(want.state) {
					t.Fatalf("optimizer state: %d tensors fused, %d on the host", len(got.state), len(want.state))
				}
				for n, w := range want.state {
					near(t, "state "+n, got.state[n], w, tol{rel: 1e-4, abs: 1e-6})
				}
				if gemm == BF16 {
					// The weights' bf16 copies replaced their casts: the
					// fused run casts only activations.
					if fb.Casts >= hb.Casts {
						t.Errorf("bf16 operand casts: %d with the weights' copies, %d without", fb.Casts, hb.Casts)
					}
					t.Logf("bf16 operand casts over three steps: %d with the weights' copies, %d without", fb.Casts, hb.Casts)
				}
			})
		}
	}
}

// TestFusedAdamWRefusesNonFinite: gradients that overflow stop the fused
// step with the host optimizer's message (the same tensor, index and
// value) before any weight or the step count moves.
func TestFusedAdamWRefusesNonFinite(t *testing.T) {
	for name, d := range accels(t) {
		t.Run(name, func(t *testing.T) {
			hugeLoss := func(i int, bt *model.Batch, logp, ent []float32) (float64, []float32, []float32, error) {
				loss, dl, de, err := logpEntropyLoss(i, bt, logp, ent)
				for j := range dl {
					dl[j] = 3e38
				}
				return loss, dl, de, err
			}
			var msgs []string
			for _, fused := range []bool{false, true} {
				b := NewDeviceBackend(d, F32)
				b.Block = 32
				var bb backend.Backend = hostOnly{b}
				if fused {
					bb = b
				}
				m := tinyQwen2(t, bb, 7)
				tr := &model.Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0.01), MaxGradNorm: 1}
				before := m.Weights()
				_, err := tr.Step([]*model.Batch{stepBatch(t)}, 1e-2, hugeLoss)
				if err == nil || !strings.Contains(err.Error(), "train step 1: gradient of ") {
					t.Fatalf("fused %v: step with overflowing gradients: %v", fused, err)
				}
				msgs = append(msgs, err.Error())
				if tr.Opt.StepCount() != 0 {
					t.Errorf("fused %v: optimizer counted %d steps", fused, tr.Opt.StepCount())
				}
				for n, w := range m.Weights() {
					near(t, n, w, before[n], tol{})
				}
			}
			if msgs[0] != msgs[1] {
				t.Errorf("host optimizer: %s\nfused: %s", msgs[0], msgs[1])
			}
		})
	}
}
