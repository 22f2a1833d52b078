package rl

import (
	"fmt"
)

// Aggregation is how per-token losses become one scalar.
type Aggregation string

const (
	// TokenMean averages over all loss tokens of the (global) batch:
	// Σ_i Σ_t ℓ_it / Norm.Tokens. verl's default; long sequences weigh more.
	TokenMean Aggregation = "token-mean"
	// SeqMeanTokenMean averages each sequence over its own loss tokens,
	// then averages sequences: Σ_i (Σ_t ℓ_it / n_i) / Norm.Seqs (GRPO paper).
	SeqMeanTokenMean Aggregation = "seq-mean-token-mean"
	// SeqMeanTokenSumNorm sums each sequence's token losses, divides by a
	// constant, and averages sequences: Σ_i Σ_t ℓ_it / (Norm.Const · Norm.Seqs).
	// This is Dr.GRPO's unbiased form; Norm.Const is a fixed number such as
	// the maximum response length and must not change during training.
	SeqMeanTokenSumNorm Aggregation = "seq-mean-token-sum-norm"
)

// ParseAggregation accepts the names above.
func ParseAggregation(s string) (Aggregation, error) {
	switch a := Aggregation(s); a {
	case TokenMean, SeqMeanTokenMean, SeqMeanTokenSumNorm:
		return a, nil
	}
	return "", fmt.Errorf("unknown loss aggregation %q (want %q, %q or %q)", s, TokenMean, SeqMeanTokenMean, SeqMeanTokenSumNorm)
}

// Norm holds the denominators of an aggregation, counted over the whole
// optimizer batch (all micro-batches, all data-parallel shards), so that the
// losses and gradients of the micro-batches add up to the full batch's.
//
// Tokens is the number of loss tokens (mask 1), Seqs the number of
// sequences with at least one loss token, Const the constant normalizer of
// SeqMeanTokenSumNorm. Only the fields an aggregation uses must be set.
type Norm struct {
	Tokens float64
	Seqs   float64
	Const  float64
}

// CountNorm counts the loss tokens and sequences of one micro-batch's
// masks. Add the micro-batches' counts (Norm.Add), and the shards' under data
// parallelism, to get the batch's Norm; set Const yourself.
func CountNorm(mask [][]float32) Norm {
	var n Norm
	for _, m := range mask {
		var c float64
		for _, v := range m {
			c += float64(v)
		}
		n.Tokens += c
		if c > 0 {
			n.Seqs++
		}
	}
	return n
}

// Add returns n + o, field by field; Const is kept from n unless it is 0.
func (n Norm) Add(o Norm) Norm {
	c := n.Const
	if c == 0 {
		c = o.Const
	}
	return Norm{Tokens: n.Tokens + o.Tokens, Seqs: n.Seqs + o.Seqs, Const: c}
}

// weigher gives, for each sequence, the factor w such that the aggregated
// loss is Σ_i Σ_t w_i·mask_it·ℓ_it. Every aggregation is linear in ℓ, which
// is what lets one loop compute both the loss and dLoss/dℓ_it = w_i·mask_it.
type weigher struct {
	agg  Aggregation
	norm Norm
}

// newWeigher checks that the norm has what agg needs and that the
// micro-batch's own counts fit inside it (catching a micro-batch count passed
// where the global count belongs).
func newWeigher(agg Aggregation, norm Norm, local Norm) (weigher, error) {
	if _, err := ParseAggregation(string(agg)); err != nil {
		return weigher{}, err
	}
	bad := func(v float64) bool { return !(v > 0) || v > 1e300 }
	switch agg {
	case TokenMean:
		if bad(norm.Tokens) {
			return weigher{}, fmt.Errorf("%s: norm tokens %v must be positive", agg, norm.Tokens)
		}
		if local.Tokens > norm.Tokens {
			return weigher{}, fmt.Errorf("%s: micro-batch has %v loss tokens, more than the batch norm's %v", agg, local.Tokens, norm.Tokens)
		}
	case SeqMeanTokenMean, SeqMeanTokenSumNorm:
		if bad(norm.Seqs) {
			return weigher{}, fmt.Errorf("%s: norm seqs %v must be positive", agg, norm.Seqs)
		}
		if local.Seqs > norm.Seqs {
			return weigher{}, fmt.Errorf("%s: micro-batch has %v sequences with loss tokens, more than the batch norm's %v", agg, local.Seqs, norm.Seqs)
		}
		if agg == SeqMeanTokenSumNorm && bad(norm.Const) {
			return weigher{}, fmt.Errorf("%s: norm const %v must be positive", agg, norm.Const)
		}
	}
	return weigher{agg: agg, norm: norm}, nil
}

// seq returns the weight of every loss token of a sequence with n loss tokens.
func (w weigher) seq(n float64) float64 {
	if n == 0 {
		return 0
	}
	switch w.agg {
	case TokenMean:
		return 1 / w.norm.Tokens
	case SeqMeanTokenMean:
		return 1 / (n * w.norm.Seqs)
	default: // SeqMeanTokenSumNorm
		return 1 / (w.norm.Const * w.norm.Seqs)
	}
}
