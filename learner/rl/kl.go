package rl

import (
	"fmt"
	"math"
)

// KLEstimator is a per-token estimator of KL(π‖π_ref) from the log-ratio
// of a token sampled from π (Schulman, "Approximating KL divergence").
// With d = log π(y) − log π_ref(y):
//
//	k1 = d                 unbiased, high variance, can be negative
//	k2 = d²/2              biased, low variance ("mse" in verl)
//	k3 = e^(−d) + d − 1    unbiased, low variance, ≥ 0 ("low_var_kl");
//	                       −d is clamped to [−20, 20] before exp and k3 to
//	                       [−10, 10], as verl does, with zero gradient
//	                       where a clamp is active.
type KLEstimator string

const (
	K1 KLEstimator = "k1"
	K2 KLEstimator = "k2"
	K3 KLEstimator = "k3"
)

// ParseKLEstimator accepts k1, k2, k3 and verl's names kl, mse, low_var_kl.
func ParseKLEstimator(s string) (KLEstimator, error) {
	switch s {
	case "k1", "kl":
		return K1, nil
	case "k2", "mse":
		return K2, nil
	case "k3", "low_var_kl":
		return K3, nil
	}
	return "", fmt.Errorf("unknown KL estimator %q (want k1, k2 or k3)", s)
}

// K3 clamps (verl's kl_penalty "low_var_kl").
const (
	k3LogRatioClamp = 20
	k3Clamp         = 10
)

// kl returns the estimator's value for one token and its derivative with
// respect to logp (the reference is detached).
func (e KLEstimator) kl(logp, ref float64) (v, dv float64) {
	d := logp - ref
	switch e {
	case K1:
		return d, 1
	case K2:
		return 0.5 * d * d, d
	}
	// K3: x = ref − logp, k3 = e^x − x − 1, dk3/dlogp = −(e^x − 1).
	x, dx := -d, -1.0
	if x > k3LogRatioClamp || x < -k3LogRatioClamp {
		x, dx = math.Max(-k3LogRatioClamp, math.Min(k3LogRatioClamp, x)), 0
	}
	ex := math.Exp(x)
	v, dv = ex-x-1, (ex-1)*dx
	if v > k3Clamp || v < -k3Clamp {
		v, dv = math.Max(-k3Clamp, math.Min(k3Clamp, v)), 0
	}
	return v, dv
}

func (e KLEstimator) check() error {
	switch e {
	case K1, K2, K3:
		return nil
	}
	return fmt.Errorf("unknown KL estimator %q", string(e))
}

// KLPenalty returns the per-token KL estimate between the policy's and the
// reference's logprobs, for use as a reward penalty (no gradient flows
// through a reward). Tokens with mask 0 get 0.
func KLPenalty(est KLEstimator, logProbs, refLogProbs, mask [][]float32) ([][]float32, error) {
	if err := est.check(); err != nil {
		return nil, fmt.Errorf("kl penalty: %w", err)
	}
	if err := checkTokens(mask, tokenField{name: "logprobs", data: logProbs}, tokenField{name: "ref logprobs", data: refLogProbs}); err != nil {
		return nil, fmt.Errorf("kl penalty: %w", err)
	}
	out := zerosLike(mask)
	for i, m := range mask {
		for t, mt := range m {
			if mt != 0 {
				v, _ := est.kl(float64(logProbs[i][t]), float64(refLogProbs[i][t]))
				out[i][t] = float32(v)
			}
		}
	}
	return out, nil
}

// TokenRewards builds per-token rewards for token-level estimators (GAE,
// REINFORCE++): −beta·kl[t] at every loss token, plus the sequence's outcome
// score at its last loss token. kl may be nil (no penalty). A sequence with no
// loss token gets no reward.
func TokenRewards(scores []float64, kl, mask [][]float32, beta float64) ([][]float32, error) {
	if err := checkScalars("scores", scores); err != nil {
		return nil, fmt.Errorf("token rewards: %w", err)
	}
	if len(scores) != len(mask) {
		return nil, fmt.Errorf("token rewards: %d scores for %d sequences", len(scores), len(mask))
	}
	if !finite(beta) {
		return nil, fmt.Errorf("token rewards: kl coefficient %v", beta)
	}
	if err := checkTokens(mask, tokenField{name: "kl", data: kl, optional: true}); err != nil {
		return nil, fmt.Errorf("token rewards: %w", err)
	}
	out := zerosLike(mask)
	for i, m := range mask {
		last := -1
		for t, mt := range m {
			if mt == 0 {
				continue
			}
			last = t
			if kl != nil {
				out[i][t] = float32(-beta * float64(kl[i][t]))
			}
		}
		if last >= 0 {
			out[i][last] = float32(float64(out[i][last]) + scores[i])
		}
	}
	return out, nil
}
