package shard

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
)

func writeModel(t *testing.T, cfg model.Config, seed uint64) string {
	t.Helper()
	dir := t.TempDir()
	m, err := model.New(cfg, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	m.InitRandom(seed)
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.BuiltinSized(cfg.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.Save(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Every rank loads the given KL reference: the ranks report the one
// learner's KL to it and reach its weights.
func TestReferenceModelEqualsOneLearner(t *testing.T) {
	mc := *tinyModel()
	mc.VocabSize = 300
	c := tinyConfig(learner.GRPO, 2, 1)
	c.Model, c.ModelDir, c.RefModelDir = nil, writeModel(t, mc, 1), writeModel(t, mc, 2)
	c.Loss.KLCoef, c.Loss.KL, c.MiniBatches = 0.1, rl.K3, 2
	single := c
	single.Shards = 0
	ref := newLearner(t, single)
	ranks := memGroup(t, c, Options{BucketElems: 333, Timeout: 20 * time.Second})
	for k := range 3 {
		b := groupBatch(k)
		want, err := ref.Train(b)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 && !(want.RefKL > 1e-3) {
			t.Fatalf("first step's KL to the reference %v: the reference is not the given model", want.RefKL)
		}
		got, errs := trainAll(ranks, b)
		for r := range ranks {
			if errs[r] != nil {
				t.Fatalf("step %d rank %d: %v", k, r, errs[r])
			}
			if math.Abs(got[r].RefKL-want.RefKL) > 1e-6 {
				t.Errorf("step %d rank %d: ref KL %v, one learner's %v", k, r, got[r].RefKL, want.RefKL)
			}
		}
	}
	for r, rk := range ranks {
		if d, at := maxDiff(rk.Learner().Model().Weights(), ref.Model().Weights()); d > equivTol {
			t.Errorf("rank %d: weights differ by %g at %s", r, d, at)
		}
	}
}

// PPO with the KL in the reward: every rank computes the penalty over the
// whole batch, as one learner does, and reaches its weights.
func TestKLInRewardEqualsOneLearner(t *testing.T) {
	mc := *tinyModel()
	mc.VocabSize = 300
	c := tinyConfig(learner.PPO, 2, 1)
	c.Model, c.ModelDir, c.RefModelDir = nil, writeModel(t, mc, 1), writeModel(t, mc, 2)
	c.Loss.KLCoef, c.Loss.KL, c.KLInReward, c.MiniBatches = 0.1, rl.K3, true, 2
	single := c
	single.Shards = 0
	ref := newLearner(t, single)
	ranks := memGroup(t, c, Options{BucketElems: 333, Timeout: 20 * time.Second})
	for k := range 3 {
		b := groupBatch(k)
		want, err := ref.Train(b)
		if err != nil {
			t.Fatal(err)
		}
		if !(want.KLPenalty > 1e-4) {
			t.Fatalf("step %d: penalty %v: the test would not see a wrong one", k, want.KLPenalty)
		}
		got, errs := trainAll(ranks, b)
		for r := range ranks {
			if errs[r] != nil {
				t.Fatalf("step %d rank %d: %v", k, r, errs[r])
			}
			if math.Abs(got[r].KLPenalty-want.KLPenalty) > 1e-6 || math.Abs(got[r].Loss-want.Loss) > 1e-5 {
				t.Errorf("step %d rank %d: penalty %v loss %v, one learner's %v %v", k, r, got[r].KLPenalty, got[r].Loss, want.KLPenalty, want.Loss)
			}
		}
	}
	for r, rk := range ranks {
		if d, at := maxDiff(rk.Learner().Model().Weights(), ref.Model().Weights()); d > equivTol {
			t.Errorf("rank %d: weights differ by %g at %s", r, d, at)
		}
	}
}
