package rl

import "fmt"

// The textual actor-critic's context reward (hierarchical in-context RL):
// a high-level policy writes a context c for problem x, the solver answers
// y ~ π_L(· | x, c), the verifier scores y. The context's reward is
//
//	R = success + ConfidenceCoef·(1/|y*|)·Σ_t log π_L(y*_t | x, c)
//	            + DependenceCoef·Σ_t [log π_L(y_t | x, c) − log π_L(y_t | x)]
//
// the solver's success, its confidence in the verified answer y* given c
// (mean per-token log-probability), and the dependence term: a
// one-sample estimate of KL(π_L(· | x, c) ‖ π_L(· | x)) from y, which
// rewards contexts the solver's answer actually depends on.

// ContextRewardConfig weighs the terms; zero switches one off.
type ContextRewardConfig struct {
	ConfidenceCoef, DependenceCoef float64
}

// ContextInputs are one batch of episodes, one entry each.
type ContextInputs struct {
	Success []float64
	// AnswerLogProbs are log π_L(y*_t | x, c) of the verified answer's
	// tokens; needed when ConfidenceCoef ≠ 0.
	AnswerLogProbs [][]float32
	// WithContext and WithoutContext are log π_L(y_t | x, c) and
	// log π_L(y_t | x) of the solver's sampled answer's tokens; needed
	// when DependenceCoef ≠ 0.
	WithContext, WithoutContext [][]float32
}

// ContextScores are the rewards and their parts, per episode.
type ContextScores struct {
	Rewards, Confidence, Dependence []float64
}

// ContextRewards computes R per episode. A term is computed and reported
// when its inputs are given (nil: not) and needs them when its
// coefficient is not 0.
func ContextRewards(cfg ContextRewardConfig, in ContextInputs) (ContextScores, error) {
	if !finite(cfg.ConfidenceCoef) || !finite(cfg.DependenceCoef) {
		return ContextScores{}, fmt.Errorf("context rewards: coefficients %v, %v", cfg.ConfidenceCoef, cfg.DependenceCoef)
	}
	n := len(in.Success)
	if err := checkScalars("success", in.Success); err != nil {
		return ContextScores{}, fmt.Errorf("context rewards: %w", err)
	}
	out := ContextScores{Rewards: append([]float64(nil), in.Success...)}
	seqs := func(name string, x [][]float32) error {
		if len(x) != n {
			return fmt.Errorf("context rewards: %s: %d sequences for %d episodes", name, len(x), n)
		}
		for i, s := range x {
			if len(s) == 0 {
				return fmt.Errorf("context rewards: %s[%d]: no tokens", name, i)
			}
			for t, v := range s {
				if !finite(float64(v)) || v > 0 {
					return fmt.Errorf("context rewards: %s[%d][%d] = %v, want a finite log-probability", name, i, t, v)
				}
			}
		}
		return nil
	}
	if cfg.ConfidenceCoef != 0 || in.AnswerLogProbs != nil {
		if err := seqs("answer logprobs", in.AnswerLogProbs); err != nil {
			return ContextScores{}, err
		}
		out.Confidence = make([]float64, n)
		for i, s := range in.AnswerLogProbs {
			var sum float64
			for _, v := range s {
				sum += float64(v)
			}
			out.Confidence[i] = sum / float64(len(s))
			out.Rewards[i] += cfg.ConfidenceCoef * out.Confidence[i]
		}
	}
	if cfg.DependenceCoef != 0 || in.WithContext != nil || in.WithoutContext != nil {
		if err := seqs("with-context logprobs", in.WithContext); err != nil {
			return ContextScores{}, err
		}
		if err := seqs("without-context logprobs", in.WithoutContext); err != nil {
			return ContextScores{}, err
		}
		out.Dependence = make([]float64, n)
		for i := range n {
			if len(in.WithContext[i]) != len(in.WithoutContext[i]) {
				return ContextScores{}, fmt.Errorf("context rewards: episode %d: %d tokens with the context, %d without", i, len(in.WithContext[i]), len(in.WithoutContext[i]))
			}
			var kl float64
			for t := range in.WithContext[i] {
				kl += float64(in.WithContext[i][t]) - float64(in.WithoutContext[i][t])
			}
			out.Dependence[i] = kl
			out.Rewards[i] += cfg.DependenceCoef * kl
		}
	}
	return out, nil
}
