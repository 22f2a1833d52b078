package rl

import (
	"testing"
)

// TestAggregation uses the SFT loss (weight 1, ℓ = −logp) on two sequences:
// seq 0 logp (−1), seq 1 logp (−2, −4, −8) with the last token masked.
//
//	token-mean:              (1 + 2 + 4)/3 = 7/3;  dℓ = −1/3 per token
//	seq-mean-token-mean:     (1/1 + 6/2)/2 = 2;    dℓ = −1/2 (seq 0), −1/4 (seq 1)
//	seq-mean-token-sum-norm: (1 + 6)/(4·2) = 7/8;  dℓ = −1/8 per token (Const 4)
func TestAggregation(t *testing.T) {
	logp := [][]float32{{-1}, {-2, -4, -8}}
	mask := [][]float32{{1}, {1, 1, 0}}
	norm := CountNorm(mask)
	norm.Const = 4
	if norm.Tokens != 3 || norm.Seqs != 2 {
		t.Fatalf("CountNorm = %+v", norm)
	}
	cases := []struct {
		agg  Aggregation
		loss float64
		grad [][]float32
	}{
		{TokenMean, 7.0 / 3, [][]float32{{-1. / 3}, {-1. / 3, -1. / 3, 0}}},
		{SeqMeanTokenMean, 2, [][]float32{{-0.5}, {-0.25, -0.25, 0}}},
		{SeqMeanTokenSumNorm, 7.0 / 8, [][]float32{{-0.125}, {-0.125, -0.125, 0}}},
	}
	for _, tc := range cases {
		t.Run(string(tc.agg), func(t *testing.T) {
			loss, grad, err := WeightedSFTLoss(logp, mask, []float64{1, 1}, tc.agg, norm)
			if err != nil {
				t.Fatal(err)
			}
			if !near(loss, tc.loss, 1e-12) {
				t.Errorf("loss %v, want %v", loss, tc.loss)
			}
			assertTokens(t, "grad", grad, tc.grad, 1e-7)
		})
	}
}

// TestMicroBatchesSumToBatch splits a batch into micro-batches, computes
// each with the batch's Norm, and requires losses, gradients and stats to
// add up to the whole batch's, for every aggregation.
func TestMicroBatchesSumToBatch(t *testing.T) {
	full := randomPolicyBatch(11, []int{5, 1, 7, 3, 6}, true)
	cfg := DAPOConfig()
	cfg.KL, cfg.KLCoef, cfg.EntropyCoef, cfg.TISCap = K3, 0.05, 0.01, 2
	norm := CountNorm(full.Mask)
	norm.Const = 8
	for _, agg := range []Aggregation{TokenMean, SeqMeanTokenMean, SeqMeanTokenSumNorm} {
		t.Run(string(agg), func(t *testing.T) {
			cfg.Aggregation = agg
			whole, err := PolicyLoss(cfg, full, norm)
			if err != nil {
				t.Fatal(err)
			}
			var loss float64
			var stats PolicyStats
			var grads, dents [][]float32
			for _, r := range [][2]int{{0, 2}, {2, 3}, {3, 5}} {
				mb, err := PolicyLoss(cfg, sliceBatch(full, r[0], r[1]), norm)
				if err != nil {
					t.Fatal(err)
				}
				loss += mb.Loss
				stats = stats.Add(mb.Stats)
				grads = append(grads, mb.DLogProbs...)
				dents = append(dents, mb.DEntropy...)
			}
			if !near(loss, whole.Loss, 1e-12) {
				t.Errorf("micro-batch losses sum to %v, batch loss %v", loss, whole.Loss)
			}
			assertTokens(t, "dlogp", grads, whole.DLogProbs, 0)
			assertTokens(t, "dentropy", dents, whole.DEntropy, 0)
			if !near(stats.PGLoss, whole.Stats.PGLoss, 1e-12) || stats.Tokens != whole.Stats.Tokens || stats.ClippedHigh != whole.Stats.ClippedHigh || !near(stats.ApproxKL(), whole.Stats.ApproxKL(), 1e-12) {
				t.Errorf("merged stats %+v, batch stats %+v", stats, whole.Stats)
			}
		})
	}
}

func sliceBatch(b PolicyBatch, lo, hi int) PolicyBatch {
	cut := func(x [][]float32) [][]float32 {
		if x == nil {
			return nil
		}
		return x[lo:hi]
	}
	return PolicyBatch{
		LogProbs: cut(b.LogProbs), OldLogProbs: cut(b.OldLogProbs), SampleLogProbs: cut(b.SampleLogProbs),
		RefLogProbs: cut(b.RefLogProbs), Entropy: cut(b.Entropy), Advantages: cut(b.Advantages), Mask: cut(b.Mask),
	}
}

func TestParseNames(t *testing.T) {
	for _, s := range []string{"token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"} {
		if a, err := ParseAggregation(s); err != nil || string(a) != s {
			t.Errorf("ParseAggregation(%q) = %q, %v", s, a, err)
		}
	}
	for in, want := range map[string]KLEstimator{"k1": K1, "kl": K1, "k2": K2, "mse": K2, "k3": K3, "low_var_kl": K3} {
		if e, err := ParseKLEstimator(in); err != nil || e != want {
			t.Errorf("ParseKLEstimator(%q) = %q, %v", in, e, err)
		}
	}
	_, err := ParseKLEstimator("abs")
	assertErr(t, err, `unknown KL estimator "abs"`)
}
