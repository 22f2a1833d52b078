package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
)

// tinyQwen2 is a small Qwen2 (attention bias, tied embeddings, GQA) with
// random weights from seed on backend b.
func tinyQwen2(t *testing.T, b backend.Backend, seed uint64) *model.Model {
	t.Helper()
	cfg := model.Config{Architecture: model.Qwen2, HiddenSize: 32, IntermediateSize: 48, NumLayers: 1, NumHeads: 4,
		NumKVHeads: 2, HeadDim: 8, VocabSize: 64, MaxPositions: 128, RMSNormEps: 1e-6,
		RopeTheta: 1e6, TorchDType: "float32", AttentionBias: true, TieWordEmbeddings: true}
	m, err := model.New(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, p := range m.Params() {
		v := randn(rng, p.Len(), 0.3)
		if p.Name == "model.norm.weight" || len(p.Name) > 10 && p.Name[len(p.Name)-11:] == "norm.weight" {
			for i := range v {
				v[i] += 1
			}
		}
		m.B.Upload(p.W, v)
	}
	return m
}

// stepBatch is the packed batch of three seeded random sequences the
// training-step tests run on.
func stepBatch(t *testing.T) *model.Batch {
	t.Helper()
	rng := rand.New(rand.NewPCG(21, 22))
	var seqs []model.Sequence
	for i := 0; i < 3; i++ {
		s := model.Sequence{Prompt: make([]int32, 2+rng.IntN(4)), Response: make([]int32, 2+rng.IntN(5))}
		for j := range s.Prompt {
			s.Prompt[j] = int32(rng.IntN(64))
		}
		for j := range s.Response {
			s.Response[j] = int32(rng.IntN(64))
		}
		seqs = append(seqs, s)
	}
	bt, err := model.NewBatch(seqs, 16, true, 64)
	if err != nil {
		t.Fatal(err)
	}
	return bt
}

// logpEntropyLoss is the training-step tests' objective: the mean
// log-probability with an entropy bonus, so that both backward inputs of
// the log-prob kernel are exercised.
func logpEntropyLoss(_ int, _ *model.Batch, logp, ent []float32) (float64, []float32, []float32, error) {
	n := float32(len(logp))
	var loss float64
	dl, de := make([]float32, len(logp)), make([]float32, len(logp))
	for i := range logp {
		loss -= float64(logp[i]/n + 0.01*ent[i]/n)
		dl[i], de[i] = -1/n, -0.01/n
	}
	return loss, dl, de, nil
}

// TestTrainingStepOnKernels runs an optimizer step of a small Qwen2 on
// the kernels (emulated; on a GPU too where there is one) and on the CPU
// backend, from the same weights and packed batch, with a loss that uses
// log-probabilities and entropies, and compares the log-probabilities, the
// gradients of every parameter and the weights after the steps.
func TestTrainingStepOnKernels(t *testing.T) {
	bt := stepBatch(t)
	obj := logpEntropyLoss
	const lr = 1e-3
	run := func(b backend.Backend) (logp []float32, grads, weights map[string][]float32) {
		m := tinyQwen2(t, b, 7)
		logp, _, err := m.Forward(bt)
		if err != nil {
			t.Fatal(err)
		}
		logp = clone(logp)
		tr := &model.Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0.01), MaxGradNorm: 1}
		if _, err := tr.Step([]*model.Batch{bt}, lr, obj); err != nil {
			t.Fatal(err)
		}
		return logp, m.Grads(), m.Weights()
	}
	wantLogp, wantGrads, wantWeights := run(cpu.New())
	for name, l := range launchers(t) {
		t.Run(name, func(t *testing.T) {
			kb := NewKernelBackend(l)
			kb.Block = 32 // one warp: the fewest threads to schedule in the emulation
			logp, grads, weights := run(kb)
			if kb.Err != nil {
				t.Fatal(kb.Err)
			}
			near(t, "logp", logp, wantLogp, tol{rel: 1e-5, abs: 1e-5})
			for pname, g := range wantGrads {
				near(t, "grad "+pname, grads[pname], g, tol{rel: 1e-3, abs: 1e-4})
			}
			// AdamW moves a weight by at most about lr whatever the
			// gradient's size, and a gradient that is rounding noise (the
			// key bias's: softmax ignores a shift shared by all keys) may
			// take either sign: weights agree within 2·lr.
			for pname, w := range wantWeights {
				near(t, "weight "+pname, weights[pname], w, tol{rel: 0, abs: 2 * lr / maxAbs(w)})
			}
		})
	}
}

func maxAbs(x []float32) float64 {
	m := 0.0
	for _, v := range x {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}
