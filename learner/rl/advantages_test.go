package rl

import (
	"math"
	"testing"
)

func TestGroupAdvantages(t *testing.T) {
	cases := []struct {
		name      string
		fn        func([]float64, int) ([]float64, error)
		rewards   []float64
		groupSize int
		want      []float64
	}{
		// Group [1,0,0,0]: mean 0.25, deviations (0.75, −0.25×3),
		// Σd² = 0.5625 + 3·0.0625 = 0.75, unbiased var 0.75/3 = 0.25, std 0.5.
		// Group [2,2]: std 0, advantages 0.
		{"grpo", GRPOAdvantages, []float64{1, 0, 0, 0, 2, 2, 2, 2}, 4,
			[]float64{0.75 / (0.5 + 1e-6), -0.25 / (0.5 + 1e-6), -0.25 / (0.5 + 1e-6), -0.25 / (0.5 + 1e-6), 0, 0, 0, 0}},
		// Groups of one: mean 0, std 1 (verl), so A = r/(1 + ε).
		{"grpo singleton groups", GRPOAdvantages, []float64{5, -1}, 1, []float64{5 / (1 + 1e-6), -1 / (1 + 1e-6)}},
		// Group [3,1]: mean 2, std √2 (unbiased: ((1+1)/1)^½).
		{"grpo pair", GRPOAdvantages, []float64{3, 1}, 2, []float64{1 / (math.Sqrt2 + 1e-6), -1 / (math.Sqrt2 + 1e-6)}},
		{"dr.grpo", DrGRPOAdvantages, []float64{1, 0, 0, 0, 2, 2, 2, 2}, 4, []float64{0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0}},
		// RLOO [1,0,0,0]: 1 − (0+0+0)/3 = 1; 0 − (1+0+0)/3 = −1/3.
		// [3,1]: 3 − 1 = 2; 1 − 3 = −2.
		{"rloo", RLOOAdvantages, []float64{1, 0, 0, 0}, 4, []float64{1, -1. / 3, -1. / 3, -1. / 3}},
		{"rloo pair", RLOOAdvantages, []float64{3, 1}, 2, []float64{2, -2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fn(tc.rewards, tc.groupSize)
			if err != nil {
				t.Fatal(err)
			}
			assertFloats(t, "advantages", got, tc.want, 1e-12)
		})
	}
}

func TestGroupAdvantagesErrors(t *testing.T) {
	cases := []struct {
		name      string
		fn        func([]float64, int) ([]float64, error)
		rewards   []float64
		groupSize int
		wantSub   string
	}{
		{"size does not divide", GRPOAdvantages, []float64{1, 2, 3}, 2, "group size 2 does not divide the batch of 3 rewards"},
		{"zero size", DrGRPOAdvantages, []float64{1}, 0, "group size 0, need at least 1"},
		{"nan reward", GRPOAdvantages, []float64{1, math.NaN()}, 2, "rewards[1] = NaN"},
		{"inf reward", RLOOAdvantages, []float64{math.Inf(1), 0}, 2, "rewards[0] = +Inf"},
		{"rloo singleton", RLOOAdvantages, []float64{1, 2}, 1, "rloo advantages: group size 1, need at least 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.fn(tc.rewards, tc.groupSize)
			assertErr(t, err, tc.wantSub)
		})
	}
}

func TestTokenAdvantages(t *testing.T) {
	got, err := TokenAdvantages([]float64{0.5, -2}, [][]float32{{1, 1, 0}, {0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	assertTokens(t, "token advantages", got, [][]float32{{0.5, 0.5, 0}, {0, -2}}, 0)
	_, err = TokenAdvantages([]float64{1}, [][]float32{{1}, {1}})
	assertErr(t, err, "1 advantages for 2 sequences")
}

// TestGAE: rewards (0, 0, 1), values (0.5, 0.6, 0.7), γ = 1, λ = 0.5.
//
//	t=2: δ = 1 + 0 − 0.7 = 0.3,   A = 0.3,               R = 1.0
//	t=1: δ = 0 + 0.7 − 0.6 = 0.1, A = 0.1 + 0.5·0.3 = 0.25,  R = 0.85
//	t=0: δ = 0 + 0.6 − 0.5 = 0.1, A = 0.1 + 0.5·0.25 = 0.225, R = 0.725
//
// Second sequence: the middle token is masked (tool output), so it is
// skipped: t=2 as above; t=0: δ = 0 + 0.7 − 0.5 = 0.2, A = 0.2 + 0.5·0.3 = 0.35.
// With γ = 0.5, λ = 1 on the first: A2 = 0.3; A1 = (0 + 0.35 − 0.6) + 0.5·0.3 = −0.1;
// A0 = (0 + 0.3 − 0.5) + 0.5·(−0.1) = −0.25.
func TestGAE(t *testing.T) {
	cases := []struct {
		name          string
		rewards, vals [][]float32
		mask          [][]float32
		gamma, lambda float64
		wantA, wantR  [][]float32
	}{
		{"gamma 1 lambda 0.5", [][]float32{{0, 0, 1}}, [][]float32{{0.5, 0.6, 0.7}}, ones(3), 1, 0.5,
			[][]float32{{0.225, 0.25, 0.3}}, [][]float32{{0.725, 0.85, 1}}},
		{"masked middle token", [][]float32{{0, 0, 1}}, [][]float32{{0.5, 9, 0.7}}, [][]float32{{1, 0, 1}}, 1, 0.5,
			[][]float32{{0.35, 0, 0.3}}, [][]float32{{0.85, 0, 1}}},
		{"gamma 0.5 lambda 1", [][]float32{{0, 0, 1}}, [][]float32{{0.5, 0.6, 0.7}}, ones(3), 0.5, 1,
			[][]float32{{-0.25, -0.1, 0.3}}, [][]float32{{0.25, 0.5, 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, r, err := GAE(tc.rewards, tc.vals, tc.mask, tc.gamma, tc.lambda)
			if err != nil {
				t.Fatal(err)
			}
			assertTokens(t, "advantages", a, tc.wantA, 1e-6)
			assertTokens(t, "returns", r, tc.wantR, 1e-6)
		})
	}
}

// TestReinforcePP: score 1, per-token kl (0.1, 0.2, 0.3), β = 0.5:
// token rewards (−0.05, −0.1, −0.15 + 1) = (−0.05, −0.1, 0.85);
// γ = 1 returns (0.7, 0.75, 0.85); mean 23/30, deviations (−1/15, −1/60, 1/12),
// Σd² = 1/225 + 1/3600 + 1/144 = 42/3600, unbiased var 7/1200,
// advantages d/√(7/1200 + 1e-8).
func TestReinforcePP(t *testing.T) {
	mask := ones(3)
	rew, err := TokenRewards([]float64{1}, [][]float32{{0.1, 0.2, 0.3}}, mask, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	assertTokens(t, "token rewards", rew, [][]float32{{-0.05, -0.1, 0.85}}, 1e-7)
	adv, ret, err := ReinforcePPAdvantages(rew, mask, 1)
	if err != nil {
		t.Fatal(err)
	}
	assertTokens(t, "returns", ret, [][]float32{{0.7, 0.75, 0.85}}, 1e-6)
	s := math.Sqrt(7.0/1200 + 1e-8)
	assertTokens(t, "advantages", adv, [][]float32{{f32(-1.0 / 15 / s), f32(-1.0 / 60 / s), f32(1.0 / 12 / s)}}, 1e-5)
}

func TestTokenRewardsPlacesScoreAtLastLossToken(t *testing.T) {
	rew, err := TokenRewards([]float64{2, 3}, nil, [][]float32{{1, 1, 0, 0}, {0, 0}}, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	assertTokens(t, "token rewards", rew, [][]float32{{0, 2, 0, 0}, {0, 0}}, 0)
	_, err = TokenRewards([]float64{math.NaN()}, nil, ones(1), 0)
	assertErr(t, err, "scores[0] = NaN")
}

func TestMaskedWhiten(t *testing.T) {
	// Loss tokens 1, 3 (the 100 is masked): mean 2, unbiased var 2,
	// so ±1/√(2 + 1e-8).
	got, err := MaskedWhiten([][]float32{{1, 100}, {3}}, [][]float32{{1, 0}, {1}})
	if err != nil {
		t.Fatal(err)
	}
	s := math.Sqrt(2 + 1e-8)
	assertTokens(t, "whitened", got, [][]float32{{f32(-1 / s), 0}, {f32(1 / s)}}, 1e-7)
	_, err = MaskedWhiten([][]float32{{1}}, ones(1))
	assertErr(t, err, "1 loss tokens, need at least 2")
}

func TestAdvantageShapeErrors(t *testing.T) {
	_, _, err := GAE([][]float32{{0, 1}}, [][]float32{{0}}, ones(2), 1, 1)
	assertErr(t, err, "gae: values[0] has 1 tokens, mask[0] has 2")
	_, _, err = GAE([][]float32{{0, f32(math.NaN())}}, [][]float32{{0, 0}}, ones(2), 1, 1)
	assertErr(t, err, "gae: token rewards[0][1] = NaN")
	_, _, err = GAE(nil, nil, ones(1), 1.5, 1)
	assertErr(t, err, "gamma 1.5 not in [0, 1]")
	_, _, err = ReinforcePPAdvantages([][]float32{{1}}, [][]float32{{2}}, 1)
	assertErr(t, err, "mask[0][0] = 2, want 0 or 1")
	_, err = KLPenalty(K3, [][]float32{{1}}, [][]float32{{1}, {2}}, ones(1))
	assertErr(t, err, "ref logprobs has 2 sequences, mask has 1")
}
