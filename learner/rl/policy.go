package rl

import (
	"fmt"
	"math"
)

// PolicyLossConfig configures PolicyLoss. Zero values switch a term off.
type PolicyLossConfig struct {
	// ClipLow and ClipHigh bound the importance ratio π/π_old to
	// [1−ClipLow, 1+ClipHigh] in the clipped surrogate. PPO uses 0.2/0.2;
	// DAPO's clip-higher 0.2/0.28.
	ClipLow, ClipHigh float64
	// DualClip is c of dual-clip PPO (Ye et al. 2020): for negative
	// advantages the loss is at most −A·c. 0 disables it; otherwise it
	// must exceed 1 (3.0 is usual).
	DualClip float64
	// TISCap is C of truncated importance sampling between the inference
	// engine's sampling logprobs and the learner's old logprobs: the
	// surrogate of every token is multiplied by the detached weight
	// min(π_old/π_sample, C). 0 disables it (then SampleLogProbs is
	// ignored).
	TISCap float64
	// KLCoef weighs KL(π‖π_ref), estimated per token by KL, as a loss term
	// with gradient. 0 disables it (then RefLogProbs is ignored).
	KLCoef float64
	KL     KLEstimator
	// EntropyCoef weighs the entropy bonus: the loss gets −EntropyCoef·H per
	// token. 0 disables it (then Entropy is ignored).
	EntropyCoef float64
	// Aggregation turns the per-token losses into the scalar loss; all
	// three terms are aggregated the same way.
	Aggregation Aggregation
}

// PPOConfig is PPO's clipped surrogate: clip 0.2/0.2, token-mean, no
// dual-clip, KL or entropy.
func PPOConfig() PolicyLossConfig {
	return PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.2, Aggregation: TokenMean}
}

// DAPOConfig is DAPO's: clip-higher 0.2/0.28, dual-clip 3.0, token-mean.
func DAPOConfig() PolicyLossConfig {
	return PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, DualClip: 3, Aggregation: TokenMean}
}

// Validate reports fields that make no loss.
func (c PolicyLossConfig) Validate() error {
	nonneg := func(name string, v float64) error {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%s %v must be finite and non-negative", name, v)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"clip low", c.ClipLow}, {"clip high", c.ClipHigh}, {"dual clip", c.DualClip}, {"TIS cap", c.TISCap}, {"KL coef", c.KLCoef}, {"entropy coef", c.EntropyCoef}} {
		if err := nonneg(f.name, f.v); err != nil {
			return err
		}
	}
	if c.ClipLow >= 1 {
		return fmt.Errorf("clip low %v must be below 1", c.ClipLow)
	}
	if c.DualClip != 0 && c.DualClip <= 1 {
		return fmt.Errorf("dual clip %v must exceed 1 (or be 0 to disable it)", c.DualClip)
	}
	if c.KLCoef != 0 {
		if err := c.KL.check(); err != nil {
			return err
		}
	}
	_, err := ParseAggregation(string(c.Aggregation))
	return err
}

// PolicyBatch is one micro-batch of sequences for PolicyLoss; every field
// holds one value per response token, ragged per sequence, all shaped as
// Mask.
type PolicyBatch struct {
	// LogProbs are the learner's current logprobs of the sampled tokens,
	// the values the gradient is taken with respect to.
	LogProbs [][]float32
	// OldLogProbs are the learner's logprobs when the batch was made (π_old
	// of the ratio), detached. For a single on-policy update pass LogProbs.
	OldLogProbs [][]float32
	// SampleLogProbs are the inference engine's logprobs at sampling time;
	// needed when TISCap > 0.
	SampleLogProbs [][]float32
	// RefLogProbs are the frozen reference policy's; needed when KLCoef > 0.
	RefLogProbs [][]float32
	// Entropy is the policy's entropy at every token; needed when
	// EntropyCoef > 0.
	Entropy [][]float32
	// Advantages per token (broadcast sequence-level ones with
	// TokenAdvantages).
	Advantages [][]float32
	// Mask is 1 for loss tokens, 0 for the rest.
	Mask [][]float32
	// PGWeights and KLWeights, when set, weigh each sequence's surrogate
	// and KL term (one finite value ≥ 0 per sequence; nil: 1 each).
	// SCoRe's stage I holds the first attempt to the reference by the KL
	// alone (PG weight 0, a KL weight of its own).
	PGWeights, KLWeights []float64
}

// PolicyLossResult is the loss, its gradients and the statistics of one
// micro-batch.
type PolicyLossResult struct {
	// Loss = PG + KLCoef·KL − EntropyCoef·Entropy, aggregated.
	Loss float64
	// DLogProbs is dLoss/dLogProbs, per token (0 where the mask is 0).
	DLogProbs [][]float32
	// DEntropy is dLoss/dEntropy per token; nil when EntropyCoef is 0.
	DEntropy [][]float32
	Stats    PolicyStats
}

// logRatioClamp bounds log(π/π_old) before exp, as verl does, so a
// diverged token cannot overflow the ratio; the gradient is 0 beyond it.
const logRatioClamp = 20

// PolicyLoss computes the PPO clipped-surrogate loss of one micro-batch
// and its gradient. Per loss token, with r = exp(logp − old) and A the
// advantage:
//
//	pg = max(−A·r, −A·clip(r, 1−ClipLow, 1+ClipHigh))
//	pg = min(pg, −A·DualClip)          if A < 0 and DualClip > 0
//	pg = pg · min(exp(old − sample), TISCap)   if TISCap > 0 (weight detached)
//	ℓ  = w_pg·pg + KLCoef·w_kl·KL(logp, ref) − EntropyCoef·H
//
// with w_pg and w_kl the sequence's PGWeights and KLWeights (1 when nil),
// and the loss aggregates ℓ with norm, which counts the whole optimizer
// batch so that micro-batch losses and gradients sum to the batch's.
// Derivatives at ties between the branches of max/min are split evenly, as
// torch's maximum/minimum do.
func PolicyLoss(cfg PolicyLossConfig, b PolicyBatch, norm Norm) (PolicyLossResult, error) {
	if err := cfg.Validate(); err != nil {
		return PolicyLossResult{}, fmt.Errorf("policy loss: config: %w", err)
	}
	useTIS, useKL, useEnt := cfg.TISCap > 0, cfg.KLCoef > 0, cfg.EntropyCoef > 0
	fields := []tokenField{
		{name: "logprobs", data: b.LogProbs},
		{name: "old logprobs", data: b.OldLogProbs},
		{name: "advantages", data: b.Advantages},
	}
	if useTIS {
		fields = append(fields, tokenField{name: "sample logprobs", data: b.SampleLogProbs})
	}
	if useKL {
		fields = append(fields, tokenField{name: "ref logprobs", data: b.RefLogProbs})
	}
	// Entropy is checked whenever given: it is logged even without a bonus.
	fields = append(fields, tokenField{name: "entropy", data: b.Entropy, optional: !useEnt})
	if err := checkTokens(b.Mask, fields...); err != nil {
		return PolicyLossResult{}, fmt.Errorf("policy loss: %w", err)
	}
	pgW, err := seqWeights("pg weights", b.PGWeights, len(b.Mask))
	if err != nil {
		return PolicyLossResult{}, fmt.Errorf("policy loss: %w", err)
	}
	klW, err := seqWeights("kl weights", b.KLWeights, len(b.Mask))
	if err != nil {
		return PolicyLossResult{}, fmt.Errorf("policy loss: %w", err)
	}
	w, err := newWeigher(cfg.Aggregation, norm, CountNorm(b.Mask))
	if err != nil {
		return PolicyLossResult{}, fmt.Errorf("policy loss: %w", err)
	}

	res := PolicyLossResult{DLogProbs: zerosLike(b.Mask)}
	if useEnt {
		res.DEntropy = zerosLike(b.Mask)
	}
	st := &res.Stats
	lo, hi := 1-cfg.ClipLow, 1+cfg.ClipHigh
	for i, m := range b.Mask {
		n := maskCount(m)
		if n == 0 {
			continue
		}
		wi := w.seq(n)
		var pgSum, klSum, entSum float64
		for t, mt := range m {
			if mt == 0 {
				continue
			}
			logp := float64(b.LogProbs[i][t])
			old := float64(b.OldLogProbs[i][t])
			adv := float64(b.Advantages[i][t])

			logRatio, dLogRatio := logp-old, 1.0
			if logRatio > logRatioClamp || logRatio < -logRatioClamp {
				logRatio, dLogRatio = math.Max(-logRatioClamp, math.Min(logRatioClamp, logRatio)), 0
			}
			ratio := math.Exp(logRatio)
			dRatio := ratio * dLogRatio // dr/dlogp

			// Clipped surrogate: the clipped branch has zero gradient
			// outside [lo, hi] and equals the unclipped one inside it.
			unclipped := -adv * ratio
			clipped := -adv * math.Max(lo, math.Min(hi, ratio))
			pg, dpg := unclipped, -adv*dRatio
			if clipped > unclipped {
				pg, dpg = clipped, 0
				if adv > 0 {
					st.ClippedHigh++
				} else {
					st.ClippedLow++
				}
			}
			if cfg.DualClip > 0 && adv < 0 {
				lower := -adv * cfg.DualClip
				switch {
				case lower < pg:
					pg, dpg = lower, 0
					st.DualClipped++
				case lower == pg:
					dpg /= 2
				}
			}
			if useTIS {
				lw := old - float64(b.SampleLogProbs[i][t])
				lw = math.Max(-logRatioClamp, math.Min(logRatioClamp, lw))
				tis := math.Exp(lw)
				if tis > cfg.TISCap {
					tis = cfg.TISCap
					st.TISTruncated++
				}
				st.TISWeightSum += tis
				pg, dpg = pg*tis, dpg*tis
			}
			if pgW != nil {
				pg, dpg = pgW[i]*pg, pgW[i]*dpg
			}
			grad := dpg
			pgSum += pg

			if useKL {
				kl, dkl := cfg.KL.kl(logp, float64(b.RefLogProbs[i][t]))
				st.RefKLSum += kl // unweighted: the policy's KL to the reference
				if klW != nil {
					kl, dkl = klW[i]*kl, klW[i]*dkl
				}
				klSum += kl
				grad += cfg.KLCoef * dkl
			}
			if useEnt {
				h := float64(b.Entropy[i][t])
				entSum += h
				res.DEntropy[i][t] = float32(-cfg.EntropyCoef * wi)
			}
			res.DLogProbs[i][t] = float32(wi * grad)

			st.Tokens++
			st.RatioSum += ratio
			// k3 estimate of KL(π_old‖π) from r = π/π_old.
			st.ApproxKLSum += ratio - 1 - logRatio
			if b.Entropy != nil {
				st.EntropySum += float64(b.Entropy[i][t])
			}
		}
		st.PGLoss += wi * pgSum
		st.KLLoss += wi * klSum
		st.EntropyLoss += wi * entSum
	}
	res.Loss = st.PGLoss + cfg.KLCoef*st.KLLoss - cfg.EntropyCoef*st.EntropyLoss
	return res, nil
}

// seqWeights checks per-sequence weights: nil, or n finite values ≥ 0.
func seqWeights(name string, w []float64, n int) ([]float64, error) {
	if w == nil {
		return nil, nil
	}
	if len(w) != n {
		return nil, fmt.Errorf("%s: %d for %d sequences", name, len(w), n)
	}
	for i, v := range w {
		if !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%s[%d] = %v, want finite and ≥ 0", name, i, v)
		}
	}
	return w, nil
}
