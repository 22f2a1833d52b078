package rl

import (
	"fmt"
	"math"
)

// WeightedSFTLoss is reward-weighted SFT: the negative log-likelihood of
// each sequence's loss tokens, weighted by that sequence's weight
// (RewardWeights, FilterWeights), ℓ_it = −weights[i]·logp_it, aggregated
// with agg over norm. It returns the loss and dLoss/dLogProbs.
func WeightedSFTLoss(logProbs, mask [][]float32, weights []float64, agg Aggregation, norm Norm) (float64, [][]float32, error) {
	if err := checkTokens(mask, tokenField{name: "logprobs", data: logProbs}); err != nil {
		return 0, nil, fmt.Errorf("weighted sft loss: %w", err)
	}
	if len(weights) != len(mask) {
		return 0, nil, fmt.Errorf("weighted sft loss: %d weights for %d sequences", len(weights), len(mask))
	}
	if err := checkScalars("weights", weights); err != nil {
		return 0, nil, fmt.Errorf("weighted sft loss: %w", err)
	}
	w, err := newWeigher(agg, norm, CountNorm(mask))
	if err != nil {
		return 0, nil, fmt.Errorf("weighted sft loss: %w", err)
	}
	grad := zerosLike(mask)
	var loss float64
	for i, m := range mask {
		n := maskCount(m)
		if n == 0 {
			continue
		}
		wi := w.seq(n) * weights[i]
		var sum float64
		for t, mt := range m {
			if mt == 0 {
				continue
			}
			sum += float64(logProbs[i][t])
			grad[i][t] = float32(-wi)
		}
		loss -= wi * sum
	}
	return loss, grad, nil
}

// RewardWeights are reward-weighted regression weights, normalized to mean
// 1 over the batch: w_i = N·exp(r_i/beta) / Σ_j exp(r_j/beta), computed
// stably (rewards shifted by their maximum). beta > 0 is the temperature:
// small beta approaches best-of-N, large beta plain SFT.
func RewardWeights(rewards []float64, beta float64) ([]float64, error) {
	if err := checkScalars("rewards", rewards); err != nil {
		return nil, fmt.Errorf("reward weights: %w", err)
	}
	if !(beta > 0) || math.IsInf(beta, 0) {
		return nil, fmt.Errorf("reward weights: temperature %v must be positive and finite", beta)
	}
	if len(rewards) == 0 {
		return nil, nil
	}
	top := rewards[0]
	for _, r := range rewards {
		top = math.Max(top, r)
	}
	w := make([]float64, len(rewards))
	var sum float64
	for i, r := range rewards {
		w[i] = math.Exp((r - top) / beta)
		sum += w[i]
	}
	scale := float64(len(w)) / sum
	for i := range w {
		w[i] *= scale
	}
	return w, nil
}

// FilterWeights are rejection-sampling (RAFT) weights: 1 for sequences
// whose reward is at least threshold, 0 for the rest.
func FilterWeights(rewards []float64, threshold float64) ([]float64, error) {
	if err := checkScalars("rewards", rewards); err != nil {
		return nil, fmt.Errorf("filter weights: %w", err)
	}
	w := make([]float64, len(rewards))
	for i, r := range rewards {
		if r >= threshold {
			w[i] = 1
		}
	}
	return w, nil
}
