// Package nativetest makes small random models for tests of code that runs
// the native engine (rollout/native) or pushes weights to it: a model
// config, random weights from a seed, and a checkpoint directory
// native.Load reads. It does not import rollout/native, so that package's
// own tests use it too.
package nativetest

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
)

// Config is a small Qwen2 over the built-in tokenizer (256 positions).
func Config() model.Config {
	return model.Config{Architecture: model.Qwen2, HiddenSize: 32, IntermediateSize: 48, NumLayers: 2,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 8, VocabSize: tokenizer.BuiltinVocabSize, MaxPositions: 256,
		RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
}

// NewModel is a cpu model of cfg with weights drawn from N(0, 0.25²) by
// seed (norm weights 1): large enough that next-token distributions are
// far from uniform, so greedy choices are clear, sampling varies and
// different seeds give clearly different logprobs.
func NewModel(cfg model.Config, seed uint64) (*model.Model, error) {
	m, err := model.New(cfg, cpu.New())
	if err != nil {
		return nil, fmt.Errorf("nativetest: model: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, p := range m.Params() {
		v := make([]float32, p.Len())
		for i := range v {
			if len(p.Shape) == 1 && strings.HasSuffix(p.Name, "norm.weight") {
				v[i] = 1
			} else {
				v[i] = float32(rng.NormFloat64() * 0.25)
			}
		}
		m.B.Upload(p.W, v)
	}
	return m, nil
}

// Model is NewModel, failing tb on an error.
func Model(tb testing.TB, cfg model.Config, seed uint64) *model.Model {
	tb.Helper()
	m, err := NewModel(cfg, seed)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// Save writes m (float32) and the built-in tokenizer to a new directory
// under tb.TempDir(), a checkpoint native.Load reads, and returns it.
func Save(tb testing.TB, m *model.Model) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "model")
	if err := m.Save(dir, safetensors.F32); err != nil {
		tb.Fatal(err)
	}
	if err := tokenizer.Builtin().Save(filepath.Join(dir, "tokenizer.json")); err != nil {
		tb.Fatal(err)
	}
	return dir
}
