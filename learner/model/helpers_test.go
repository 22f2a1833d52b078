package model

import (
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
)

func tinyConfig(arch string) Config {
	c := Config{Architecture: arch, HiddenSize: 16, IntermediateSize: 24, NumLayers: 2, NumHeads: 4,
		NumKVHeads: 2, HeadDim: 4, VocabSize: 32, MaxPositions: 64, RMSNormEps: 1e-6,
		RopeTheta: 10000, TorchDType: "float32"}
	if arch == Qwen2 {
		c.AttentionBias, c.TieWordEmbeddings = true, true
	}
	return c
}

// tinyModel is a random model whose weights are larger than HF's init so
// the logits, and thus the gradients, are far from uniform.
func tinyModel(t *testing.T, cfg Config, seed uint64) *Model {
	t.Helper()
	m, err := New(cfg, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, p := range m.Params() {
		v := make([]float32, p.Len())
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.3)
			if isNorm(p.Name) {
				v[i] += 1
			}
		}
		m.B.Upload(p.W, v)
	}
	return m
}

func randomSequences(rng *rand.Rand, n, vocab int) []Sequence {
	var out []Sequence
	for i := 0; i < n; i++ {
		s := Sequence{Prompt: make([]int32, 1+rng.IntN(5)), Response: make([]int32, 1+rng.IntN(5))}
		for j := range s.Prompt {
			s.Prompt[j] = int32(rng.IntN(vocab))
		}
		for j := range s.Response {
			s.Response[j] = int32(rng.IntN(vocab))
		}
		out = append(out, s)
	}
	return out
}

func randomWeights(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}
