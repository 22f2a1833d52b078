package model

import (
	"math/rand/v2"
	"testing"
)

// TestCheckpointActivations: with activation checkpointing a backward
// pass recomputes each layer from its input and gives the same bits as
// without (log-probabilities, entropies, every gradient), plain and under
// LoRA with dropout (the masks are drawn once, by the forward pass), while
// the pass holds fewer elements.
func TestCheckpointActivations(t *testing.T) {
	for _, lora := range []bool{false, true} {
		var runs [2]struct {
			logp, ent []float32
			grads     map[string][]float32
			elems     int
		}
		for k, ckpt := range []bool{false, true} {
			m := tinyModel(t, tinyConfig(Qwen2), 4)
			if lora {
				if err := m.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, Dropout: 0.2, TargetModules: moduleNames, Seed: 9}); err != nil {
					t.Fatal(err)
				}
				m.Training, m.DropoutSeed = true, 11
			}
			m.CheckpointActivations = ckpt
			rng := rand.New(rand.NewPCG(1, 2))
			bt, err := NewBatch(randomSequences(rng, 3, m.Config.VocabSize), 0, true, m.Config.VocabSize)
			if err != nil {
				t.Fatal(err)
			}
			r := &runs[k]
			m.ZeroGrad()
			r.logp, r.ent = twoPasses(t, m, bt)
			r.grads = m.Grads()
			if lora {
				for _, p := range m.TrainableParams() {
					g := make([]float32, p.Len())
					m.B.Download(g, p.G)
					r.grads[p.Name] = g
				}
			}
			for _, x := range m.pass.all {
				r.elems += x.Len()
			}
		}
		same := func(what string, a, b []float32) {
			t.Helper()
			if len(a) != len(b) {
				t.Fatalf("lora %v: %s: %d and %d values", lora, what, len(a), len(b))
			}
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("lora %v: %s[%d]: %v with checkpointing, %v without", lora, what, i, b[i], a[i])
				}
			}
		}
		same("logp", runs[0].logp, runs[1].logp)
		same("entropy", runs[0].ent, runs[1].ent)
		if len(runs[0].grads) == 0 || len(runs[0].grads) != len(runs[1].grads) {
			t.Fatalf("lora %v: %d and %d gradients", lora, len(runs[0].grads), len(runs[1].grads))
		}
		for name, g := range runs[0].grads {
			same("grad "+name, g, runs[1].grads[name])
		}
		if runs[1].elems >= runs[0].elems {
			t.Errorf("lora %v: the pass holds %d elements with checkpointing, %d without", lora, runs[1].elems, runs[0].elems)
		}
		t.Logf("lora %v: pass of %d elements with checkpointing, %d without", lora, runs[1].elems, runs[0].elems)
	}
}

// twoPasses runs forward and backward twice on bt (the second pass reuses
// the first's buffers), with fixed loss gradients (-1, 0, 1, ... per log
// prob, 0.1 per entropy), and returns the last pass's log probs and
// entropies; the gradients accumulate in m.
func twoPasses(t *testing.T, m *Model, bt *Batch) (logp, ent []float32) {
	t.Helper()
	for range 2 {
		var err error
		if logp, ent, err = m.Forward(bt); err != nil {
			t.Fatal(err)
		}
		dl, de := make([]float32, len(logp)), make([]float32, len(logp))
		for i := range dl {
			dl[i], de[i] = float32(i%3)-1, 0.1
		}
		if err := m.Backward(dl, de); err != nil {
			t.Fatal(err)
		}
	}
	return logp, ent
}
