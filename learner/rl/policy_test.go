package rl

import (
	"math"
	"testing"
)

// TestPolicyLossOneToken works single tokens by hand. Each case is one
// sequence of one loss token under token-mean with Norm.Tokens = 1, so the
// loss is ℓ and the gradient dℓ/dlogp. logp is 0 and old = −log r, so the
// ratio is exactly r.
func TestPolicyLossOneToken(t *testing.T) {
	dapo := DAPOConfig() // clip [0.8, 1.28], dual-clip 3
	ppo := PPOConfig()   // clip [0.8, 1.2]
	type stat struct{ low, high, dual float64 }
	cases := []struct {
		name     string
		cfg      PolicyLossConfig
		r, adv   float64
		loss     float64
		grad     float64
		clipped  stat
		sample   float64 // sample logprob for TIS (relative to old)
		withTIS  bool
		ref, ent float64
	}{
		// r = 1.1 inside the range: ℓ = −A·r = −1.1, dℓ/dlogp = −A·r = −1.1.
		{name: "inside range", cfg: dapo, r: 1.1, adv: 1, loss: -1.1, grad: -1.1},
		// A > 0, r = 1.5 > 1.28: ℓ = max(−1.5, −1.28) = −1.28, constant.
		{name: "clip high", cfg: dapo, r: 1.5, adv: 1, loss: -1.28, grad: 0, clipped: stat{high: 1}},
		// PPO's symmetric clip at 1.2: ℓ = −1.2.
		{name: "clip high ppo", cfg: ppo, r: 1.5, adv: 1, loss: -1.2, grad: 0, clipped: stat{high: 1}},
		// A < 0, r = 0.5 < 0.8: ℓ = max(0.5, 0.8) = 0.8, constant.
		{name: "clip low", cfg: dapo, r: 0.5, adv: -1, loss: 0.8, grad: 0, clipped: stat{low: 1}},
		// A < 0, r = 1.5 > 1.28: max(1.5, 1.28) = 1.5 (pessimistic, unclipped),
		// below the dual-clip cap 3: ℓ = 1.5, dℓ/dlogp = −A·r = 1.5.
		{name: "negative advantage above range", cfg: dapo, r: 1.5, adv: -1, loss: 1.5, grad: 1.5},
		// A < 0, r = 4: max(4, 1.28) = 4 > −A·c = 3, so ℓ = 3, constant.
		{name: "dual clip", cfg: dapo, r: 4, adv: -1, loss: 3, grad: 0, clipped: stat{dual: 1}},
		// Without dual-clip (PPO) the same token keeps ℓ = 4, gradient 4.
		{name: "no dual clip", cfg: ppo, r: 4, adv: -1, loss: 4, grad: 4},
		// A = 2 > 0, r = 0.5 < 0.8: max(−1, −1.6) = −1 unclipped, gradient −A·r = −1.
		{name: "positive advantage below range", cfg: dapo, r: 0.5, adv: 2, loss: -1, grad: -1},
		// TIS: old − sample = log 3, weight min(3, 2) = 2: ℓ = 2·(−1.1).
		{name: "tis truncated", cfg: withTIS(dapo, 2), r: 1.1, adv: 1, sample: -math.Log(3), withTIS: true, loss: -2.2, grad: -2.2},
		// Weight 0.5 below the cap is used as is.
		{name: "tis below cap", cfg: withTIS(dapo, 2), r: 1.1, adv: 1, sample: math.Log(2), withTIS: true, loss: -0.55, grad: -0.55},
		// KL k1 to ref = −0.5 (logp = 0): kl = 0.5, dkl = 1; coef 0.1 adds
		// 0.05 to ℓ and 0.1 to the gradient: ℓ = −1.1 + 0.05, g = −1.1 + 0.1.
		{name: "kl k1", cfg: withKL(dapo, K1, 0.1), r: 1.1, adv: 1, ref: -0.5, loss: -1.05, grad: -1.0},
		// k2: kl = 0.5²/2 = 0.125, dkl = 0.5: ℓ = −1.1 + 0.0125, g = −1.1 + 0.05.
		{name: "kl k2", cfg: withKL(dapo, K2, 0.1), r: 1.1, adv: 1, ref: -0.5, loss: -1.0875, grad: -1.05},
		// k3: x = ref − logp = −0.5, kl = e^−0.5 + 0.5 − 1 = 0.10653066,
		// dkl = 1 − e^−0.5 = 0.39346934.
		{name: "kl k3", cfg: withKL(dapo, K3, 0.1), r: 1.1, adv: 1, ref: -0.5, loss: -1.1 + 0.010653066, grad: -1.1 + 0.039346934},
		// k3 with ref 12 above logp: e^12 − 13 ≫ 10, clamped to 10 with no gradient.
		{name: "kl k3 clamped", cfg: withKL(dapo, K3, 0.1), r: 1.1, adv: 1, ref: 12, loss: -1.1 + 1, grad: -1.1},
		// Entropy bonus 0.01, H = 2: ℓ = −1.1 − 0.02; dℓ/dH = −0.01 (checked below).
		{name: "entropy", cfg: withEntropy(dapo, 0.01), r: 1.1, adv: 1, ent: 2, loss: -1.12, grad: -1.1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := -math.Log(tc.r)
			b := PolicyBatch{
				LogProbs:    [][]float32{{0}},
				OldLogProbs: [][]float32{{f32(old)}},
				Advantages:  [][]float32{{f32(tc.adv)}},
				Mask:        ones(1),
			}
			if tc.withTIS {
				b.SampleLogProbs = [][]float32{{f32(old + tc.sample)}}
			}
			if tc.cfg.KLCoef > 0 {
				b.RefLogProbs = [][]float32{{f32(tc.ref)}}
			}
			if tc.cfg.EntropyCoef > 0 {
				b.Entropy = [][]float32{{f32(tc.ent)}}
			}
			res, err := PolicyLoss(tc.cfg, b, Norm{Tokens: 1})
			if err != nil {
				t.Fatal(err)
			}
			if !near(res.Loss, tc.loss, 1e-6) {
				t.Errorf("loss %.9g, want %.9g", res.Loss, tc.loss)
			}
			if g := float64(res.DLogProbs[0][0]); !near(g, tc.grad, 1e-6) {
				t.Errorf("dloss/dlogp %.9g, want %.9g", g, tc.grad)
			}
			s := res.Stats
			if got := (stat{s.ClippedLow, s.ClippedHigh, s.DualClipped}); got != tc.clipped {
				t.Errorf("clipped (low, high, dual) = %v, want %v", got, tc.clipped)
			}
			if !near(s.MeanRatio(), tc.r, 1e-6) {
				t.Errorf("mean ratio %v, want %v", s.MeanRatio(), tc.r)
			}
			if tc.cfg.EntropyCoef > 0 {
				if !near(float64(res.DEntropy[0][0]), -tc.cfg.EntropyCoef, 1e-9) {
					t.Errorf("dloss/dH %v, want %v", res.DEntropy[0][0], -tc.cfg.EntropyCoef)
				}
			} else if res.DEntropy != nil {
				t.Errorf("DEntropy set without an entropy bonus")
			}
		})
	}
}

func withTIS(c PolicyLossConfig, cap float64) PolicyLossConfig {
	c.TISCap = cap
	return c
}

func withKL(c PolicyLossConfig, e KLEstimator, coef float64) PolicyLossConfig {
	c.KL, c.KLCoef = e, coef
	return c
}

func withEntropy(c PolicyLossConfig, coef float64) PolicyLossConfig {
	c.EntropyCoef = coef
	return c
}

// TestPolicyStats: four tokens with ratios (1, 1.5, 0.5, 4) and advantages
// (1, 1, −1, −1) under DAPO: token 2 clipped high, token 3 clipped low,
// token 4 dual-clipped. Mean ratio (1+1.5+0.5+4)/4 = 1.75. Approx KL is the
// mean of r − 1 − log r: (0 + 0.5 − log 1.5 + (−0.5) − log 0.5 + 3 − log 4)/4.
// Entropy (1, 2, 3, 4) gives mean 2.5.
func TestPolicyStats(t *testing.T) {
	ratios := []float64{1, 1.5, 0.5, 4}
	b := PolicyBatch{
		LogProbs:    [][]float32{{0, 0}, {0, 0, 0}},
		OldLogProbs: [][]float32{{0, f32(-math.Log(1.5))}, {f32(-math.Log(0.5)), 7, f32(-math.Log(4))}},
		Advantages:  [][]float32{{1, 1}, {-1, 9, -1}},
		Entropy:     [][]float32{{1, 2}, {3, 99, 4}},
		Mask:        [][]float32{{1, 1}, {1, 0, 1}},
	}
	res, err := PolicyLoss(DAPOConfig(), b, Norm{Tokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Stats
	var kl float64
	for _, r := range ratios {
		kl += r - 1 - math.Log(r)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"tokens", s.Tokens, 4},
		{"clip frac low", s.ClipFracLow(), 0.25},
		{"clip frac high", s.ClipFracHigh(), 0.25},
		{"clip frac", s.ClipFrac(), 0.5},
		{"dual clip frac", s.DualClipFrac(), 0.25},
		{"mean ratio", s.MeanRatio(), 1.75},
		{"approx kl", s.ApproxKL(), kl / 4},
		{"entropy mean", s.EntropyMean(), 2.5},
		// ℓ = (−1, −1.28, 0.8, 3), token-mean over 4: 1.52/4 = 0.38.
		{"pg loss", s.PGLoss, 0.38},
	} {
		if !near(c.got, c.want, 1e-6) {
			t.Errorf("%s = %.9g, want %.9g", c.name, c.got, c.want)
		}
	}
	if res.DLogProbs[1][1] != 0 {
		t.Errorf("masked token got gradient %v", res.DLogProbs[1][1])
	}
}

func TestPolicyLossErrors(t *testing.T) {
	good := func() PolicyBatch {
		return PolicyBatch{
			LogProbs:    [][]float32{{-1, -2}, {-1}},
			OldLogProbs: [][]float32{{-1, -2}, {-1}},
			Advantages:  [][]float32{{1, 1}, {-1}},
			Mask:        ones(2, 1),
		}
	}
	norm := Norm{Tokens: 3, Seqs: 2, Const: 4}
	cases := []struct {
		name    string
		cfg     PolicyLossConfig
		edit    func(*PolicyBatch)
		norm    Norm
		wantSub string
	}{
		{"ragged mismatch", PPOConfig(), func(b *PolicyBatch) { b.OldLogProbs[1] = []float32{-1, -1} }, norm, "policy loss: old logprobs[1] has 2 tokens, mask[1] has 1"},
		{"sequence count", PPOConfig(), func(b *PolicyBatch) { b.Advantages = b.Advantages[:1] }, norm, "advantages has 1 sequences, mask has 2"},
		{"nan logprob", PPOConfig(), func(b *PolicyBatch) { b.LogProbs[0][1] = f32(math.NaN()) }, norm, "logprobs[0][1] = NaN"},
		{"missing ref", withKL(PPOConfig(), K3, 0.1), func(*PolicyBatch) {}, norm, "ref logprobs is nil"},
		{"missing sample", withTIS(PPOConfig(), 2), func(*PolicyBatch) {}, norm, "sample logprobs is nil"},
		{"missing entropy", withEntropy(PPOConfig(), 0.1), func(*PolicyBatch) {}, norm, "entropy is nil"},
		{"bad dual clip", PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.2, DualClip: 0.5, Aggregation: TokenMean}, func(*PolicyBatch) {}, norm, "dual clip 0.5 must exceed 1"},
		{"bad clip low", PolicyLossConfig{ClipLow: 1, Aggregation: TokenMean}, func(*PolicyBatch) {}, norm, "clip low 1 must be below 1"},
		{"unknown estimator", withKL(PPOConfig(), "k4", 0.1), func(*PolicyBatch) {}, norm, `unknown KL estimator "k4"`},
		{"unknown aggregation", PolicyLossConfig{Aggregation: "mean"}, func(*PolicyBatch) {}, norm, `unknown loss aggregation "mean"`},
		{"zero norm", PPOConfig(), func(*PolicyBatch) {}, Norm{}, "token-mean: norm tokens 0 must be positive"},
		{"local norm passed as global", PPOConfig(), func(*PolicyBatch) {}, Norm{Tokens: 2}, "micro-batch has 3 loss tokens, more than the batch norm's 2"},
		{"sum-norm without const", PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.2, Aggregation: SeqMeanTokenSumNorm}, func(*PolicyBatch) {}, Norm{Seqs: 2}, "norm const 0 must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := good()
			tc.edit(&b)
			_, err := PolicyLoss(tc.cfg, b, tc.norm)
			assertErr(t, err, tc.wantSub)
		})
	}
}
