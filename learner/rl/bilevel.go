package rl

import "fmt"

// Bi-level MLMT (BiLevel SCoRe): one reward R on the refined answer ŷ of
// an episode x → z (solver) → g (feedback) → ŷ (solver), and a learned
// value V_L of the state the refine turn starts from. The solver's two
// turns train on
//
//	ℓ_L = −(R − V_L)·(log π_L(z) + log π_L(ŷ))          (BaselineAdvantages)
//
// the value on (V_L − R)² (SquaredValueLoss), and the feedback policy on R
// plus an optional shaping term, R + c·V_L (ShapedRewards).

// LastValues returns each sequence's value at its last loss token: the
// value of the state after the whole sequence but its last token (a value
// head reads V(s_t) at the token before t). A sequence without loss tokens
// has value 0 (and no value loss).
func LastValues(values, mask [][]float32) ([]float64, error) {
	if err := checkTokens(mask, tokenField{name: "values", data: values}); err != nil {
		return nil, fmt.Errorf("last values: %w", err)
	}
	out := make([]float64, len(mask))
	for i, m := range mask {
		if t := lastLoss(m); t >= 0 {
			out[i] = float64(values[i][t])
		}
	}
	return out, nil
}

func lastLoss(m []float32) int {
	for t := len(m) - 1; t >= 0; t-- {
		if m[t] != 0 {
			return t
		}
	}
	return -1
}

// BaselineAdvantages are R − V per sequence: REINFORCE's advantage against
// a learned baseline (values detached).
func BaselineAdvantages(rewards, values []float64) ([]float64, error) {
	if len(rewards) != len(values) {
		return nil, fmt.Errorf("baseline advantages: %d rewards, %d values", len(rewards), len(values))
	}
	if err := checkScalars("rewards", rewards); err != nil {
		return nil, fmt.Errorf("baseline advantages: %w", err)
	}
	if err := checkScalars("values", values); err != nil {
		return nil, fmt.Errorf("baseline advantages: %w", err)
	}
	out := make([]float64, len(rewards))
	for i := range rewards {
		out[i] = rewards[i] - values[i]
	}
	return out, nil
}

// ShapedRewards are R + coef·V per sequence: bi-level value shaping of the
// feedback policy's reward (values detached).
func ShapedRewards(rewards, values []float64, coef float64) ([]float64, error) {
	if !finite(coef) {
		return nil, fmt.Errorf("shaped rewards: coefficient %v", coef)
	}
	adv, err := BaselineAdvantages(rewards, values)
	if err != nil {
		return nil, fmt.Errorf("shaped rewards: %w", err)
	}
	for i := range adv {
		adv[i] = rewards[i] + coef*values[i]
	}
	return adv, nil
}

// SquaredValueLossResult is SquaredValueLoss of one micro-batch.
type SquaredValueLossResult struct {
	Loss float64
	// DValues is dLoss/dValues per token: non-zero only at each
	// sequence's last loss token.
	DValues [][]float32
}

// SquaredValueLoss is the value loss (V − R)² of sequence-level values:
// V_i is sequence i's value at its last loss token (LastValues), R_i its
// reward, and the loss is Σ_i (V_i − R_i)² / norm.Seqs over the sequences
// with loss tokens, so the micro-batches' losses add up to the mean over
// the batch's sequences (torch's mse_loss). No clipping.
func SquaredValueLoss(values [][]float32, rewards []float64, mask [][]float32, norm Norm) (SquaredValueLossResult, error) {
	v, err := LastValues(values, mask)
	if err != nil {
		return SquaredValueLossResult{}, fmt.Errorf("squared value loss: %w", err)
	}
	if len(rewards) != len(mask) {
		return SquaredValueLossResult{}, fmt.Errorf("squared value loss: %d rewards for %d sequences", len(rewards), len(mask))
	}
	if err := checkScalars("rewards", rewards); err != nil {
		return SquaredValueLossResult{}, fmt.Errorf("squared value loss: %w", err)
	}
	if local := CountNorm(mask).Seqs; !(norm.Seqs >= local && norm.Seqs > 0) || !finite(norm.Seqs) {
		return SquaredValueLossResult{}, fmt.Errorf("squared value loss: norm seqs %v for a micro-batch of %v sequences with loss tokens", norm.Seqs, local)
	}
	res := SquaredValueLossResult{DValues: zerosLike(mask)}
	for i, m := range mask {
		if lastLoss(m) < 0 {
			continue
		}
		e := v[i] - rewards[i]
		res.Loss += e * e / norm.Seqs
		res.DValues[i][lastLoss(m)] = float32(2 * e / norm.Seqs)
	}
	return res, nil
}
