package learner

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
	"github.com/rlnode/rlnode/learner/rl"
)

func tinyModel() *model.Config {
	return &model.Config{Architecture: model.Qwen2, HiddenSize: 16, IntermediateSize: 32, NumLayers: 1, NumHeads: 2,
		NumKVHeads: 1, HeadDim: 8, VocabSize: 12, MaxPositions: 32, RMSNormEps: 1e-6, RopeTheta: 10000,
		TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
}

func tinyConfig(alg string) Config {
	c := DefaultConfig()
	c.Model, c.Seed, c.Algorithm = tinyModel(), 3, alg
	c.LR = 1e-2
	c.MicroBatchSeqs = 3 // several micro-batches per step
	c.MaxResponseLen = 4
	return c
}

// groupBatch is two groups of four samples: responses of 2-4 tokens,
// rewards 1 for responses starting with token 5.
func groupBatch() Batch {
	b := Batch{PolicyID: "solver"}
	resp := [][]int32{{5, 6, 7}, {8, 6}, {5, 9, 9, 1}, {2, 3}, {5, 1}, {4, 4, 4}, {8, 8}, {5, 5, 5}}
	for i, r := range resp {
		b.Prompts = append(b.Prompts, []int32{1, int32(2 + i/4), 3})
		b.Responses = append(b.Responses, r)
		lp := make([]float32, len(r))
		for t := range lp {
			lp[t] = -2.4
		}
		b.SampleLogProbs = append(b.SampleLogProbs, lp)
		var rew float64
		if r[0] == 5 {
			rew = 1
		}
		b.Rewards = append(b.Rewards, rew)
		b.GroupIDs = append(b.GroupIDs, int64(i/4))
	}
	return b
}

func newLearner(t *testing.T, c Config) *Learner {
	t.Helper()
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// savedTo saves l into a fresh temporary directory and returns it.
func savedTo(t *testing.T, l *Learner) string {
	t.Helper()
	dir := t.TempDir()
	if err := l.Save(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loaded is a new learner of c restored from the checkpoint in dir.
func loaded(t *testing.T, c Config, dir string) *Learner {
	t.Helper()
	l := newLearner(t, c)
	if err := l.Load(dir); err != nil {
		t.Fatal(err)
	}
	return l
}

func maxDiff(a, b map[string][]float32) float64 {
	var d float64
	for name, x := range a {
		for i := range x {
			d = math.Max(d, math.Abs(float64(x[i]-b[name][i])))
		}
	}
	return d
}

// rewardedLogProb is the mean log probability of the rewarded responses'
// tokens minus that of the unrewarded ones.
func rewardedLogProb(t *testing.T, l *Learner, b Batch) float64 {
	t.Helper()
	seqs := make([]model.Sequence, len(b.Prompts))
	for i := range seqs {
		seqs[i] = model.Sequence{Prompt: b.Prompts[i], Response: b.Responses[i]}
	}
	bt, err := model.NewBatch(seqs, 0, true, l.model.Config.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	logp, _, err := l.model.Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	var good, bad, ng, nb float64
	for i, per := range bt.Split(logp) {
		for _, v := range per {
			if b.Rewards[i] > 0 {
				good, ng = good+float64(v), ng+1
			} else {
				bad, nb = bad+float64(v), nb+1
			}
		}
	}
	return good/ng - bad/nb
}

// Every algorithm takes steps that change the weights, report finite
// statistics, and (all but plain SFT, which ignores rewards) move
// probability toward the rewarded responses.
func TestTrainAlgorithms(t *testing.T) {
	for _, tc := range []struct {
		alg  string
		edit func(*Config)
	}{
		{GRPO, nil},
		{GRPO, func(c *Config) { c.Loss.KLCoef, c.Loss.KL = 0.1, rl.K3; c.MiniBatches = 2; c.Loss.TISCap = 2 }},
		{GRPO, func(c *Config) { c.Loss.EntropyCoef = 0.01 }},
		{DrGRPO, nil},
		{RLOO, nil},
		{ReinforcePP, nil},
		{PPO, nil},
		{RWSFT, func(c *Config) { c.RWBeta = 0.2 }},
		{RWSFT, func(c *Config) { c.RWFilter, c.RWThreshold = true, 0.5 }},
		{SFT, nil},
		// Dr.GRPO's summed aggregation asked for by name: its constant is
		// max_tokens whatever the algorithm.
		{GRPO, func(c *Config) { c.Loss.Aggregation = rl.SeqMeanTokenSumNorm }},
		{SFT, func(c *Config) { c.Loss.Aggregation = rl.SeqMeanTokenSumNorm }},
		{RWSFT, func(c *Config) { c.RWBeta = 0.2; c.Loss.Aggregation = rl.SeqMeanTokenSumNorm }},
	} {
		c := tinyConfig(tc.alg)
		name := tc.alg
		if tc.edit != nil {
			tc.edit(&c)
			name += "+options"
		}
		t.Run(name, func(t *testing.T) {
			l := newLearner(t, c)
			b := groupBatch()
			before := l.PolicyWeights()
			gap0 := rewardedLogProb(t, l, b)
			var st Stats
			var err error
			for range 3 {
				if st, err = l.Train(b); err != nil {
					t.Fatal(err)
				}
			}
			if want := 3 * c.MiniBatches; st.Step != want || l.Step() != want {
				t.Errorf("step %d (learner %d), want %d", st.Step, l.Step(), want)
			}
			if d := maxDiff(before, l.PolicyWeights()); d == 0 {
				t.Error("weights did not change")
			}
			if st.Tokens != 21 || st.Seqs != 8 {
				t.Errorf("tokens %d seqs %d, want 21 and 8", st.Tokens, st.Seqs)
			}
			for what, v := range map[string]float64{"loss": st.Loss, "grad norm": st.GradNorm, "entropy": st.Entropy, "kl": st.ApproxKL, "ref kl": st.RefKL, "value loss": st.ValueLoss} {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("%s is %v", what, v)
				}
			}
			if !(st.Entropy > 0) || !(st.GradNorm > 0) {
				t.Errorf("entropy %v, grad norm %v: want > 0", st.Entropy, st.GradNorm)
			}
			if tc.alg == PPO {
				if !(st.ValueLoss > 0) {
					t.Errorf("PPO value loss %v, want > 0", st.ValueLoss)
				}
				if _, ok := l.PolicyWeights()[model.ValueHeadWeight]; ok {
					t.Error("PolicyWeights carries the value head, which engines do not have")
				}
			}
			if c.Loss.KLCoef > 0 && !(st.RefKL > 0) {
				t.Errorf("ref KL %v after 3 steps away from the reference, want > 0", st.RefKL)
			}
			if c.MiniBatches > 1 && !(st.ApproxKL > 0) {
				t.Errorf("approx KL %v on the second mini-batch, want > 0", st.ApproxKL)
			}
			if tc.alg != SFT {
				if gap := rewardedLogProb(t, l, b); !(gap > gap0) {
					t.Errorf("log prob of rewarded minus unrewarded responses %.4f → %.4f: want a rise", gap0, gap)
				}
			}
		})
	}
}

// Bad batches are refused with an error naming the field, and the
// weights stay as they were.
func TestTrainRefusesBadBatch(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		edit       func(*Batch)
	}{
		{"empty", "no sequences", func(b *Batch) { *b = Batch{} }},
		{"responses", "responses for", func(b *Batch) { b.Responses = b.Responses[1:] }},
		{"mask length", "masks[2]", func(b *Batch) {
			b.Masks = make([][]float32, len(b.Responses))
			for i, r := range b.Responses {
				b.Masks[i] = ones(len(r))
			}
			b.Masks[2] = ones(1)
		}},
		{"reward NaN", "rewards[3]", func(b *Batch) { b.Rewards[3] = math.NaN() }},
		{"rewards missing", "rewards", func(b *Batch) { b.Rewards = nil }},
		{"token range", "out of range", func(b *Batch) { b.Responses[4] = []int32{5, 99} }},
		{"groups uneven", "group_ids[3]", func(b *Batch) { b.GroupIDs[3] = 1 }},
		{"group split", "appears again", func(b *Batch) { b.GroupIDs = []int64{0, 0, 1, 1, 0, 0, 1, 1} }},
		{"sample logprobs", "sample_logprobs[1]", func(b *Batch) { b.SampleLogProbs[1] = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig(GRPO)
			c.Loss.TISCap = 2
			l := newLearner(t, c)
			b := groupBatch()
			tc.edit(&b)
			before := l.PolicyWeights()
			_, err := l.Train(b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if d := maxDiff(before, l.PolicyWeights()); d != 0 || l.Step() != 0 {
				t.Errorf("a refused batch changed the weights by %v / step to %d", d, l.Step())
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		want string
		edit func(*Config)
	}{
		{"algorithm", func(c *Config) { c.Algorithm = "dpo" }},
		{"neither model_dir nor model", func(c *Config) { c.Model = nil }},
		{"lr", func(c *Config) { c.LR = 0 }},
		{"micro_batch_seqs", func(c *Config) { c.MicroBatchSeqs = 0 }},
		{"clip_low and clip_high", func(c *Config) { c.Loss.ClipLow, c.Loss.ClipHigh = 0, 0 }},
		{"loss: ", func(c *Config) { c.Loss.Aggregation = "mean" }},
		{"rw_beta", func(c *Config) { c.Algorithm, c.RWBeta = RWSFT, 0 }},
		{"rw_threshold", func(c *Config) { c.Algorithm, c.RWFilter, c.RWThreshold = RWSFT, true, math.Inf(1) }},
		{"shards -1", func(c *Config) { c.Shards = -1 }},
		{"zero_stage 3: want 0", func(c *Config) { c.ZeROStage = 3 }},
	} {
		c := tinyConfig(GRPO)
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
	if err := tinyConfig(GRPO).Validate(); err != nil {
		t.Errorf("the test config is refused: %v", err)
	}
}

// A checkpoint restores weights, optimizer moments, reference and step:
// one more step from the restored learner equals one more step from the
// original.
func TestCheckpointResumesExactly(t *testing.T) {
	c := tinyConfig(GRPO)
	c.Loss.KLCoef, c.Loss.KL = 0.05, rl.K3
	a := newLearner(t, c)
	b := groupBatch()
	for range 2 {
		if _, err := a.Train(b); err != nil {
			t.Fatal(err)
		}
	}
	dir := savedTo(t, a)
	r := loaded(t, c, dir)
	if r.Step() != 2 {
		t.Errorf("restored step %d, want 2", r.Step())
	}
	if d := maxDiff(a.PolicyWeights(), r.PolicyWeights()); d != 0 {
		t.Errorf("restored weights differ by %v", d)
	}
	sa, err := a.Train(b)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := r.Train(b)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(a.PolicyWeights(), r.PolicyWeights()); d != 0 {
		t.Errorf("after one more step the weights differ by %v", d)
	}
	if sa.RefKL != sr.RefKL || sa.Loss != sr.Loss {
		t.Errorf("step stats differ: loss %v/%v ref KL %v/%v", sa.Loss, sr.Loss, sa.RefKL, sr.RefKL)
	}

	other := tinyConfig(GRPO)
	m := *other.Model
	m.HiddenSize, m.HeadDim = 32, 16
	other.Model = &m
	if err := newLearner(t, other).Load(dir); err == nil || !strings.Contains(err.Error(), "hidden_size") {
		t.Errorf("loading into another architecture: error %v, want one naming hidden_size", err)
	}
}

func TestSharding(t *testing.T) {
	l := newLearner(t, tinyConfig(GRPO))
	ok := Sharding{Rank: 0, Ranks: 2, Update: func(int, []*optim.Param, float64) (float64, error) { return 0, nil },
		SumStats: func([]float64) error { return nil }, Abort: func(int, error) {}}
	for _, tc := range []struct {
		want string
		edit func(*Sharding)
	}{
		{"rank 2 of 2", func(s *Sharding) { s.Rank = 2 }},
		{"rank -1 of 2", func(s *Sharding) { s.Rank = -1 }},
		{"lacks Update", func(s *Sharding) { s.Update = nil }},
		{"lacks Update, SumStats or Abort", func(s *Sharding) { s.Abort = nil }},
	} {
		s := ok
		tc.edit(&s)
		if err := l.SetSharding(&s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
	// Eight sequences in two mini-batches cannot feed five ranks each.
	c := tinyConfig(GRPO)
	c.MiniBatches = 2
	l = newLearner(t, c)
	s := ok
	s.Ranks = 5
	if err := l.SetSharding(&s); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Train(groupBatch()); err == nil || !strings.Contains(err.Error(), "mini-batch 0 has 4 sequences for 5 shards") {
		t.Errorf("train: %v; want the mini-batch refused for too few sequences", err)
	}
}

// SFT's sequence weights: all ones train as no weights do, all zeros
// leave the policy as it was, bad ones are refused.
func TestSFTWeights(t *testing.T) {
	train := func(w []float64) (map[string][]float32, error) {
		l := newLearner(t, tinyConfig(SFT))
		b := groupBatch()
		b.Weights = w
		_, err := l.Train(b)
		return l.PolicyWeights(), err
	}
	n := len(groupBatch().Prompts)
	plain, err := train(nil)
	if err != nil {
		t.Fatal(err)
	}
	ones := make([]float64, n)
	for i := range ones {
		ones[i] = 1
	}
	if got, err := train(ones); err != nil || maxDiff(got, plain) != 0 {
		t.Fatalf("weights of 1: %v, differ from none by %v", err, maxDiff(got, plain))
	}
	before := newLearner(t, tinyConfig(SFT)).PolicyWeights()
	if got, err := train(make([]float64, n)); err != nil || maxDiff(got, before) != 0 {
		t.Fatalf("weights of 0: %v, moved the policy by %v", err, maxDiff(got, before))
	}
	for _, w := range [][]float64{ones[1:], append(ones[1:], math.NaN()), append(ones[1:], -1), append(ones[1:], math.Inf(1))} {
		if _, err := train(w); err == nil || !strings.Contains(err.Error(), "batch: weights") {
			t.Errorf("weights %v: %v", w, err)
		}
	}
	l := newLearner(t, tinyConfig(GRPO))
	b := groupBatch()
	b.Weights = ones
	if _, err := l.Train(b); err == nil || !strings.Contains(err.Error(), "only SFT and RWSFT take them") {
		t.Errorf("weights with grpo: %v", err)
	}
}

// RWSFT with the caller's weights trains as with the weights it computes
// itself: the filter's 0/1 weights of the batch's rewards given as
// Weights end at the same policy as the filter; other weights end
// elsewhere, and bad ones are refused.
func TestRWSFTCallerWeights(t *testing.T) {
	cfg := tinyConfig(RWSFT)
	cfg.RWFilter, cfg.RWThreshold = true, 1
	train := func(w []float64) (map[string][]float32, error) {
		l := newLearner(t, cfg)
		b := groupBatch()
		b.Weights = w
		_, err := l.Train(b)
		return l.PolicyWeights(), err
	}
	filtered, err := train(nil)
	if err != nil {
		t.Fatal(err)
	}
	var w []float64
	for _, r := range groupBatch().Rewards {
		if r >= 1 {
			w = append(w, 1)
		} else {
			w = append(w, 0)
		}
	}
	if got, err := train(w); err != nil || maxDiff(got, filtered) != 0 {
		t.Fatalf("the filter's weights given: %v, differ from the filter's own by %v", err, maxDiff(got, filtered))
	}
	w[0] *= 4
	if got, err := train(w); err != nil || maxDiff(got, filtered) == 0 {
		t.Fatalf("weights %v: %v, trained as the filter's (difference %v)", w, err, maxDiff(got, filtered))
	}
	if _, err := train(append(w[1:], math.NaN())); err == nil || !strings.Contains(err.Error(), "batch: weights[7] is NaN") {
		t.Errorf("a NaN weight: %v", err)
	}
}

// NewContext gives up on a done context, its error wrapping the
// context's; with a live one it builds New's learner.
func TestNewContextGivesUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewContext(ctx, tinyConfig(GRPO)); !errors.Is(err, context.Canceled) {
		t.Fatalf("NewContext with a cancelled context: %v, want context.Canceled", err)
	}
	a, err := NewContext(context.Background(), tinyConfig(GRPO))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(tinyConfig(GRPO))
	if err != nil {
		t.Fatal(err)
	}
	wa, wb := a.PolicyWeights(), b.PolicyWeights()
	for name, w := range wb {
		if !slices.Equal(wa[name], w) {
			t.Fatalf("%s differs between NewContext and New", name)
		}
	}
}

// A batch whose bad value sits in a later mini-batch is refused before
// the first optimizer step, not when the loss reaches that mini-batch:
// mask values other than 0 or 1, and a policy whose pre-pass gives
// non-finite old log probabilities (a diverged model).
func TestTrainRefusesBadBatchBeforeAnyStep(t *testing.T) {
	masked := func(b *Batch, v float32) {
		b.Masks = make([][]float32, len(b.Responses))
		for i, r := range b.Responses {
			b.Masks[i] = ones(len(r))
		}
		b.Masks[6][1] = v // in the second mini-batch
	}
	for _, tc := range []struct {
		name, alg, want string
		edit            func(*Batch)
		poison          bool
	}{
		{"sft mask 2", SFT, "masks[6][1] is 2, want 0 or 1", func(b *Batch) { masked(b, 2) }, false},
		{"sft mask -1", SFT, "masks[6][1] is -1, want 0 or 1", func(b *Batch) { masked(b, -1) }, false},
		{"grpo mask 0.5", GRPO, "masks[6][1] is 0.5, want 0 or 1", func(b *Batch) { masked(b, 0.5) }, false},
		{"given advantages mask 2", GRPO, "masks[6][1] is 2, want 0 or 1", func(b *Batch) {
			masked(b, 2)
			b.Advantages = make([][]float32, len(b.Responses))
			for i, r := range b.Responses {
				b.Advantages[i] = ones(len(r))
			}
		}, false},
		{"mask NaN", GRPO, "masks[6][1] is NaN", func(b *Batch) { masked(b, float32(math.NaN())) }, false},
		{"diverged policy", GRPO, "old log probs[0][0] is NaN", func(*Batch) {}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig(tc.alg)
			c.MiniBatches = 2
			l := newLearner(t, c)
			if tc.poison {
				m := l.Model()
				nan := make([]float32, m.Norm.Len())
				for i := range nan {
					nan[i] = float32(math.NaN())
				}
				m.B.Upload(m.Norm.W, nan)
			}
			b := groupBatch()
			tc.edit(&b)
			before := l.PolicyWeights()
			_, err := l.Train(b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if l.Step() != 0 {
				t.Errorf("a refused batch took %d optimizer steps", l.Step())
			}
			if !tc.poison {
				if d := maxDiff(before, l.PolicyWeights()); d != 0 {
					t.Errorf("a refused batch changed the weights by %v", d)
				}
			}
		})
	}
}
