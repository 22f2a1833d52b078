package rl

import (
	"math"
	"testing"
)

// TestValueLoss: one token each, Norm.Tokens = 1, clip 0.25 (values chosen
// exact in binary so the tie is a real tie), ℓ = ½·max(e1², e2²).
func TestValueLoss(t *testing.T) {
	cases := []struct {
		name        string
		v, old, ret float64
		loss, grad  float64
		clipped     float64
	}{
		// v inside [old−0.25, old+0.25]: v' = v, ℓ = ½(1−2)² = 0.5, dℓ/dv = v − R = −1.
		{"inside", 1, 0.875, 2, 0.5, -1, 0},
		// v = 2 beyond old+0.25 = 1.25, R = 0: e1 = 2, e2 = 1.25; ℓ = ½·4 = 2 (unclipped), dℓ/dv = 2.
		{"outside, unclipped larger", 2, 1, 0, 2, 2, 0},
		// v = 2, old = 1, R = 3: e1 = −1, e2 = −1.75; ℓ = ½·3.0625 = 1.53125 from
		// the clipped branch, whose v' = 1.25 is constant in v: dℓ/dv = 0.
		{"outside, clipped larger", 2, 1, 3, 1.53125, 0, 1},
		// Tie: v = 2, v' = 1.25, R = 1.625: e1 = 0.375, e2 = −0.375, both ℓ = 0.0703125;
		// torch.maximum splits the gradient: ½·(0.375 + 0) = 0.1875.
		{"tie", 2, 1, 1.625, 0.0703125, 0.1875, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := ValueBatch{Values: [][]float32{{f32(tc.v)}}, OldValues: [][]float32{{f32(tc.old)}}, Returns: [][]float32{{f32(tc.ret)}}, Mask: ones(1)}
			res, err := ValueLoss(b, 0.25, TokenMean, Norm{Tokens: 1})
			if err != nil {
				t.Fatal(err)
			}
			if !near(res.Loss, tc.loss, 1e-12) || !near(float64(res.DValues[0][0]), tc.grad, 1e-7) || res.Clipped != tc.clipped {
				t.Errorf("loss %v grad %v clipped %v, want %v %v %v", res.Loss, res.DValues[0][0], res.Clipped, tc.loss, tc.grad, tc.clipped)
			}
		})
	}
}

func TestValueLossErrors(t *testing.T) {
	b := ValueBatch{Values: [][]float32{{1}}, OldValues: [][]float32{{1}}, Returns: [][]float32{{f32(math.Inf(1))}}, Mask: ones(1)}
	_, err := ValueLoss(b, 0.2, TokenMean, Norm{Tokens: 1})
	assertErr(t, err, "value loss: returns[0][0] = +Inf")
	b.Returns = [][]float32{{1}}
	_, err = ValueLoss(b, 0, TokenMean, Norm{Tokens: 1})
	assertErr(t, err, "clip 0 must be positive")
}

// TestRewardWeights: rewards (0, log 3) at β = 1 give exp weights (1, 3),
// normalized to mean 1: (0.5, 1.5).
func TestRewardWeights(t *testing.T) {
	w, err := RewardWeights([]float64{0, math.Log(3)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "weights", w, []float64{0.5, 1.5}, 1e-12)
	// Large rewards do not overflow: shifted by the maximum.
	w, err = RewardWeights([]float64{1000, 1000}, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "weights", w, []float64{1, 1}, 1e-12)
	f, err := FilterWeights([]float64{0.2, 1, 0.9}, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "filter", f, []float64{0, 1, 1}, 0)
	_, err = RewardWeights([]float64{1}, 0)
	assertErr(t, err, "temperature 0 must be positive")
	_, err = FilterWeights([]float64{math.NaN()}, 0)
	assertErr(t, err, "rewards[0] = NaN")
}

// TestWeightedSFT: weights scale each sequence's NLL: seq 0 weight 2,
// logp (−1), seq 1 weight 0.5, logp (−2, −4); token-mean over 3:
// (2·1 + 0.5·6)/3 = 5/3; gradients −2/3 and −1/6.
func TestWeightedSFT(t *testing.T) {
	loss, grad, err := WeightedSFTLoss([][]float32{{-1}, {-2, -4}}, ones(1, 2), []float64{2, 0.5}, TokenMean, Norm{Tokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !near(loss, 5.0/3, 1e-12) {
		t.Errorf("loss %v, want 5/3", loss)
	}
	assertTokens(t, "grad", grad, [][]float32{{-2. / 3}, {-1. / 6, -1. / 6}}, 1e-7)
	_, _, err = WeightedSFTLoss([][]float32{{-1}}, ones(1), []float64{1, 2}, TokenMean, Norm{Tokens: 1})
	assertErr(t, err, "2 weights for 1 sequences")
}
