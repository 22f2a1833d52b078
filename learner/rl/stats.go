package rl

// PolicyStats are the numbers trainers log for a policy update, kept as
// sums over loss tokens so that micro-batches and shards merge exactly with
// Add; the methods turn them into the usual means.
type PolicyStats struct {
	Tokens      float64 // loss tokens seen
	ClippedLow  float64 // A < 0 and ratio < 1−ClipLow: clipped, no gradient
	ClippedHigh float64 // A > 0 and ratio > 1+ClipHigh: clipped, no gradient
	DualClipped float64 // A < 0 and loss capped at −A·DualClip
	RatioSum    float64 // Σ π/π_old
	ApproxKLSum float64 // Σ (r − 1 − log r), the k3 estimate of KL(π_old‖π)
	RefKLSum    float64 // Σ KL estimate to the reference (when KLCoef > 0)
	EntropySum  float64 // Σ H (when Entropy is given)
	// TIS weights (when TISCap > 0).
	TISWeightSum float64
	TISTruncated float64
	// The aggregated loss terms, before their coefficients: the batch's
	// Loss is PGLoss + KLCoef·KLLoss − EntropyCoef·EntropyLoss. With a
	// batch-wide Norm these sum over micro-batches.
	PGLoss, KLLoss, EntropyLoss float64
}

// Add returns the merged statistics of two micro-batches.
func (s PolicyStats) Add(o PolicyStats) PolicyStats {
	return PolicyStats{
		Tokens:       s.Tokens + o.Tokens,
		ClippedLow:   s.ClippedLow + o.ClippedLow,
		ClippedHigh:  s.ClippedHigh + o.ClippedHigh,
		DualClipped:  s.DualClipped + o.DualClipped,
		RatioSum:     s.RatioSum + o.RatioSum,
		ApproxKLSum:  s.ApproxKLSum + o.ApproxKLSum,
		RefKLSum:     s.RefKLSum + o.RefKLSum,
		EntropySum:   s.EntropySum + o.EntropySum,
		TISWeightSum: s.TISWeightSum + o.TISWeightSum,
		TISTruncated: s.TISTruncated + o.TISTruncated,
		PGLoss:       s.PGLoss + o.PGLoss,
		KLLoss:       s.KLLoss + o.KLLoss,
		EntropyLoss:  s.EntropyLoss + o.EntropyLoss,
	}
}

func (s PolicyStats) mean(sum float64) float64 {
	if s.Tokens == 0 {
		return 0
	}
	return sum / s.Tokens
}

// ClipFracLow is the fraction of loss tokens clipped at 1−ClipLow.
func (s PolicyStats) ClipFracLow() float64 { return s.mean(s.ClippedLow) }

// ClipFracHigh is the fraction of loss tokens clipped at 1+ClipHigh.
func (s PolicyStats) ClipFracHigh() float64 { return s.mean(s.ClippedHigh) }

// ClipFrac is the fraction clipped at either bound (verl's pg_clipfrac).
func (s PolicyStats) ClipFrac() float64 { return s.mean(s.ClippedLow + s.ClippedHigh) }

// DualClipFrac is the fraction capped by dual-clip (verl's pg_clipfrac_lower).
func (s PolicyStats) DualClipFrac() float64 { return s.mean(s.DualClipped) }

// MeanRatio is the mean importance ratio π/π_old.
func (s PolicyStats) MeanRatio() float64 { return s.mean(s.RatioSum) }

// ApproxKL is the mean k3 estimate of KL(π_old‖π).
func (s PolicyStats) ApproxKL() float64 { return s.mean(s.ApproxKLSum) }

// RefKL is the mean KL estimate to the reference policy.
func (s PolicyStats) RefKL() float64 { return s.mean(s.RefKLSum) }

// EntropyMean is the mean per-token entropy.
func (s PolicyStats) EntropyMean() float64 { return s.mean(s.EntropySum) }

// TISMeanWeight is the mean truncated importance weight.
func (s PolicyStats) TISMeanWeight() float64 { return s.mean(s.TISWeightSum) }

// TISTruncatedFrac is the fraction of tokens whose weight hit TISCap.
func (s PolicyStats) TISTruncatedFrac() float64 { return s.mean(s.TISTruncated) }
