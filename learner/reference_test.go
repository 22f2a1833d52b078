package learner

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
)

// writeModel writes a random checkpoint directory of cfg (seed) with the
// built-in tokenizer of tokVocab tokens.
func writeModel(t *testing.T, cfg model.Config, seed uint64, tokVocab int) string {
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
	tok, err := tokenizer.BuiltinSized(tokVocab)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.Save(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// refModels is a policy directory and a reference of another size and
// seed, both of 300 tokens.
func refModels(t *testing.T) (policy, ref string, cfg model.Config) {
	cfg = *tinyModel()
	cfg.VocabSize = 300
	policy = writeModel(t, cfg, 1, 300)
	big := cfg
	big.HiddenSize, big.HeadDim, big.NumLayers = 32, 16, 2
	return policy, writeModel(t, big, 2, 300), cfg
}

// handKL is the mean KL estimate over b's response tokens between the
// models in dirs policy and ref, from their log probabilities.
func handKL(t *testing.T, est rl.KLEstimator, policy, ref string, b Batch) float64 {
	t.Helper()
	logp := func(dir string) [][]float32 {
		m, err := model.Load(dir, cpu.New())
		if err != nil {
			t.Fatal(err)
		}
		seqs := make([]model.Sequence, len(b.Prompts))
		for i := range seqs {
			seqs[i] = model.Sequence{Prompt: b.Prompts[i], Response: b.Responses[i]}
		}
		bt, err := model.NewBatch(seqs, 0, true, m.Config.VocabSize)
		if err != nil {
			t.Fatal(err)
		}
		lp, _, err := m.Forward(bt)
		if err != nil {
			t.Fatal(err)
		}
		return bt.Split(lp)
	}
	p, r := logp(policy), logp(ref)
	var sum, n float64
	for i := range p {
		for k := range p[i] {
			d := float64(p[i][k]) - float64(r[i][k])
			switch est {
			case rl.K1:
				sum += d
			case rl.K2:
				sum += d * d / 2
			case rl.K3:
				sum += math.Exp(-d) + d - 1
			}
			n++
		}
	}
	return sum / n
}

// The KL term's reference is the given model: the first step's KL (zero
// against the initial policy) is the estimator's mean over that model's
// log probabilities, computed here by hand, for k1, k2, k3, with and
// without LoRA (whose default reference would be the base).
func TestReferenceModelKL(t *testing.T) {
	policy, ref, _ := refModels(t)
	b := groupBatch()
	for _, lora := range []bool{false, true} {
		for _, est := range []rl.KLEstimator{rl.K1, rl.K2, rl.K3} {
			c := tinyConfig(GRPO)
			c.Model, c.ModelDir, c.RefModelDir = nil, policy, ref
			c.Loss.KLCoef, c.Loss.KL = 0.1, est
			if lora {
				c.LoRA = &model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj"}, Seed: 5}
			}
			st, err := newLearner(t, c).Train(b)
			if err != nil {
				t.Fatal(err)
			}
			want := handKL(t, est, policy, ref, b)
			if math.Abs(st.RefKL-want) > 1e-5*math.Max(1, math.Abs(want)) || math.Abs(want) < 1e-3 {
				t.Errorf("lora %v %s: ref KL %v, by hand %v", lora, est, st.RefKL, want)
			}
			c.RefModelDir = ""
			st, err = newLearner(t, c).Train(b)
			if err != nil {
				t.Fatal(err)
			}
			if st.RefKL != 0 {
				t.Errorf("lora %v %s: the initial policy as reference: first KL %v, want 0", lora, est, st.RefKL)
			}
		}
	}
}

// A checkpoint names the given reference instead of copying it; a resumed
// learner loads it again and steps as the uninterrupted one, and one with
// another reference is refused.
func TestReferenceModelCheckpoint(t *testing.T) {
	policy, ref, _ := refModels(t)
	c := tinyConfig(GRPO)
	c.Model, c.ModelDir, c.RefModelDir = nil, policy, ref
	c.Loss.KLCoef, c.Loss.KL = 0.1, rl.K3
	a := newLearner(t, c)
	b := groupBatch()
	if _, err := a.Train(b); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ReferenceFile), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ReferenceFile)); !os.IsNotExist(err) {
		t.Errorf("%s beside a given reference: %v, want none", ReferenceFile, err)
	}
	js, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	var st checkpointState
	if err := json.Unmarshal(js, &st); err != nil || st.Reference != ref {
		t.Errorf("state reference_model %q (%v), want %q", st.Reference, err, ref)
	}
	r := loaded(t, c, dir)
	sa, err := a.Train(b)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := r.Train(b)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(a.PolicyWeights(), r.PolicyWeights()); d != 0 || sa.RefKL != sr.RefKL {
		t.Errorf("resumed: weights differ by %v, ref KL %v and %v", d, sa.RefKL, sr.RefKL)
	}
	other := c
	other.RefModelDir = ""
	if err := newLearner(t, other).Load(dir); err == nil || !strings.Contains(err.Error(), "reference_model") {
		t.Errorf("loading into a learner whose reference is the initial policy: %v, want an error naming reference_model", err)
	}
}

// A reference of another vocabulary or tokenizer is refused naming both
// directories; so is one without kl_coef.
func TestReferenceModelRefused(t *testing.T) {
	policy, _, cfg := refModels(t)
	otherTok := writeModel(t, cfg, 2, 290)
	wide := cfg
	wide.VocabSize = 310
	otherVocab := writeModel(t, wide, 2, 300)
	for _, tc := range []struct {
		ref  string
		kl   float64
		want []string
	}{
		{otherVocab, 0.1, []string{otherVocab, policy, "vocab_size 310", "300"}},
		{otherTok, 0.1, []string{otherTok, policy, "different tokenizers"}},
		{filepath.Join(policy, "missing"), 0.1, []string{filepath.Join(policy, "missing")}},
		{otherTok, 0, []string{"ref_model_dir", "kl_coef"}},
	} {
		c := tinyConfig(GRPO)
		c.Model, c.ModelDir, c.RefModelDir = nil, policy, tc.ref
		c.Loss.KLCoef, c.Loss.KL = tc.kl, rl.K3
		_, err := New(c)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("reference %s: error %v, want one naming %q", tc.ref, err, w)
			}
		}
	}
}

// After an SFT warm-up the default reference is the warmed-up policy (RL's
// initial policy), not the weights before the warm-up: the first RL
// step's KL is zero.
func TestReferenceIsPolicyAfterWarmup(t *testing.T) {
	c := tinyConfig(GRPO)
	c.Loss.KLCoef, c.Loss.KL = 0.1, rl.K3
	l := newLearner(t, c)
	if err := l.SetAlgorithm(SFT, 5e-2); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := l.Train(sftBatch()); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.SetAlgorithm(GRPO, 0); err != nil {
		t.Fatal(err)
	}
	st, err := l.Train(groupBatch())
	if err != nil {
		t.Fatal(err)
	}
	if st.RefKL != 0 {
		t.Errorf("first RL step's KL to the reference %v, want 0", st.RefKL)
	}
	if st, err = l.Train(groupBatch()); err != nil || !(st.RefKL > 0) {
		t.Errorf("second RL step's KL %v (%v), want > 0", st.RefKL, err)
	}
}
