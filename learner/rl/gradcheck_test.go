package rl

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// randomPolicyBatch builds a batch with ratios spread over [e^−0.6, e^0.6]
// (so every clip branch occurs), advantages of both signs, and some masked
// tokens.
func randomPolicyBatch(seed uint64, lengths []int, masked bool) PolicyBatch {
	rng := rand.New(rand.NewPCG(seed, 1))
	mk := func() [][]float32 {
		x := make([][]float32, len(lengths))
		for i, n := range lengths {
			x[i] = make([]float32, n)
		}
		return x
	}
	b := PolicyBatch{LogProbs: mk(), OldLogProbs: mk(), SampleLogProbs: mk(), RefLogProbs: mk(), Entropy: mk(), Advantages: mk(), Mask: mk()}
	for i, n := range lengths {
		adv := rng.NormFloat64()
		for t := range n {
			lp := -0.05 - 3*rng.Float64()
			b.LogProbs[i][t] = f32(lp)
			b.OldLogProbs[i][t] = f32(lp + 1.2*(rng.Float64()-0.5))
			b.SampleLogProbs[i][t] = f32(float64(b.OldLogProbs[i][t]) + 1.5*(rng.Float64()-0.5))
			b.RefLogProbs[i][t] = f32(lp + 0.6*(rng.Float64()-0.5))
			b.Entropy[i][t] = f32(4 * rng.Float64())
			b.Advantages[i][t] = f32(adv + 0.3*rng.NormFloat64())
			b.Mask[i][t] = 1
			if masked && rng.Float64() < 0.2 {
				b.Mask[i][t] = 0
			}
		}
	}
	return b
}

// centralDiff perturbs x[i][t] by ±h (in float32, using the step actually
// taken) and returns the finite-difference derivative of loss.
func centralDiff(x [][]float32, i, t int, h float64, loss func() float64) float64 {
	orig := x[i][t]
	up, down := f32(float64(orig)+h), f32(float64(orig)-h)
	x[i][t] = up
	lu := loss()
	x[i][t] = down
	ld := loss()
	x[i][t] = orig
	return (lu - ld) / (float64(up) - float64(down))
}

// nearKink reports whether the ratio r = exp(logp − old) lies within the
// finite-difference step of a point where the loss is not differentiable.
func nearKink(cfg PolicyLossConfig, logRatio, h float64) bool {
	for _, k := range []float64{1 - cfg.ClipLow, 1 + cfg.ClipHigh, cfg.DualClip} {
		if k > 0 && math.Abs(logRatio-math.Log(k)) < 3*h {
			return true
		}
	}
	return false
}

// TestPolicyLossGradients checks DLogProbs and DEntropy against central
// differences of Loss for every combination of terms and aggregation.
func TestPolicyLossGradients(t *testing.T) {
	const h = 1e-3
	base := []struct {
		name string
		cfg  PolicyLossConfig
	}{
		{"ppo", PPOConfig()},
		{"dapo dual-clip", DAPOConfig()},
		{"dapo tis", withTIS(DAPOConfig(), 1.5)},
		{"k1 entropy", withEntropy(withKL(PPOConfig(), K1, 0.2), 0.05)},
		{"k2", withKL(DAPOConfig(), K2, 0.3)},
		{"k3 tis entropy", withEntropy(withTIS(withKL(DAPOConfig(), K3, 0.5), 2), 0.01)},
	}
	for _, bc := range base {
		for _, agg := range []Aggregation{TokenMean, SeqMeanTokenMean, SeqMeanTokenSumNorm} {
			cfg := bc.cfg
			cfg.Aggregation = agg
			t.Run(fmt.Sprintf("%s/%s", bc.name, agg), func(t *testing.T) {
				b := randomPolicyBatch(3, []int{6, 2, 9, 4}, true)
				norm := CountNorm(b.Mask)
				norm.Const = 10
				res, err := PolicyLoss(cfg, b, norm)
				if err != nil {
					t.Fatal(err)
				}
				loss := func() float64 {
					r, err := PolicyLoss(cfg, b, norm)
					if err != nil {
						t.Fatal(err)
					}
					return r.Loss
				}
				checked := 0
				for i, m := range b.Mask {
					for tk := range m {
						lr := float64(b.LogProbs[i][tk]) - float64(b.OldLogProbs[i][tk])
						if nearKink(cfg, lr, h) {
							continue
						}
						checkGrad(t, fmt.Sprintf("dlogp[%d][%d]", i, tk), float64(res.DLogProbs[i][tk]), centralDiff(b.LogProbs, i, tk, h, loss))
						if cfg.EntropyCoef > 0 {
							checkGrad(t, fmt.Sprintf("dentropy[%d][%d]", i, tk), float64(res.DEntropy[i][tk]), centralDiff(b.Entropy, i, tk, h, loss))
						}
						checked++
					}
				}
				if checked < 15 {
					t.Fatalf("only %d tokens away from kinks", checked)
				}
			})
		}
	}
}

// checkGrad compares an analytic and a finite-difference derivative with a
// tolerance for float32 inputs: 1e-6 absolute + 1e-3 relative.
func checkGrad(t *testing.T, what string, analytic, numeric float64) {
	t.Helper()
	if math.Abs(analytic-numeric) > 1e-6+1e-3*math.Abs(numeric) {
		t.Errorf("%s: analytic %.8g, finite difference %.8g", what, analytic, numeric)
	}
}

// TestValueLossGradients checks DValues by central differences.
func TestValueLossGradients(t *testing.T) {
	const h, clip = 1e-3, 0.2
	rng := rand.New(rand.NewPCG(5, 5))
	lengths := []int{7, 3, 8}
	b := ValueBatch{}
	for _, n := range lengths {
		v, o, r, m := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for t := range n {
			o[t] = f32(rng.NormFloat64())
			v[t] = f32(float64(o[t]) + 0.8*(rng.Float64()-0.5))
			r[t] = f32(float64(o[t]) + rng.NormFloat64())
			if rng.Float64() < 0.85 {
				m[t] = 1
			}
		}
		b.Values, b.OldValues, b.Returns, b.Mask = append(b.Values, v), append(b.OldValues, o), append(b.Returns, r), append(b.Mask, m)
	}
	for _, agg := range []Aggregation{TokenMean, SeqMeanTokenMean, SeqMeanTokenSumNorm} {
		t.Run(string(agg), func(t *testing.T) {
			norm := CountNorm(b.Mask)
			norm.Const = 10
			res, err := ValueLoss(b, clip, agg, norm)
			if err != nil {
				t.Fatal(err)
			}
			loss := func() float64 {
				r, err := ValueLoss(b, clip, agg, norm)
				if err != nil {
					t.Fatal(err)
				}
				return r.Loss
			}
			for i, m := range b.Mask {
				for tk := range m {
					v, o, r := float64(b.Values[i][tk]), float64(b.OldValues[i][tk]), float64(b.Returns[i][tk])
					vc := math.Max(o-clip, math.Min(o+clip, v))
					// Skip the kinks: the clip edges and |v−R| = |v'−R|.
					if math.Abs(math.Abs(v-o)-clip) < 3*h || math.Abs(math.Abs(v-r)-math.Abs(vc-r)) < 3*h {
						continue
					}
					checkGrad(t, fmt.Sprintf("dvalues[%d][%d]", i, tk), float64(res.DValues[i][tk]), centralDiff(b.Values, i, tk, h, loss))
				}
			}
		})
	}
}

// TestSFTGradients checks WeightedSFTLoss's gradient by central differences.
func TestSFTGradients(t *testing.T) {
	b := randomPolicyBatch(9, []int{4, 6, 1}, true)
	w := []float64{0.3, 1.7, 1}
	for _, agg := range []Aggregation{TokenMean, SeqMeanTokenMean, SeqMeanTokenSumNorm} {
		norm := CountNorm(b.Mask)
		norm.Const = 6
		_, grad, err := WeightedSFTLoss(b.LogProbs, b.Mask, w, agg, norm)
		if err != nil {
			t.Fatal(err)
		}
		loss := func() float64 {
			l, _, err := WeightedSFTLoss(b.LogProbs, b.Mask, w, agg, norm)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		for i, m := range b.Mask {
			for tk := range m {
				checkGrad(t, fmt.Sprintf("%s dlogp[%d][%d]", agg, i, tk), float64(grad[i][tk]), centralDiff(b.LogProbs, i, tk, 1e-3, loss))
			}
		}
	}
}

// TestKLGradients checks each estimator's derivative, including where
// the k3 clamps hold it at 0.
func TestKLGradients(t *testing.T) {
	for _, e := range []KLEstimator{K1, K2, K3} {
		for _, d := range []float64{-3, -0.7, -0.1, 0.2, 1.5, 25} {
			ref := -1.0
			logp := ref + d
			_, dv := e.kl(logp, ref)
			const h = 1e-6
			up, _ := e.kl(logp+h, ref)
			down, _ := e.kl(logp-h, ref)
			if fd := (up - down) / (2 * h); math.Abs(fd-dv) > 1e-6*(1+math.Abs(fd)) {
				t.Errorf("%s at logp−ref = %v: derivative %v, finite difference %v", e, d, dv, fd)
			}
		}
	}
}
