package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/optim"
	"github.com/rlnode/rlnode/learner/rl"
)

func TestPolicyLossTokens(t *testing.T) {
	// Three sequences of 40 tokens, some masked, with ratios spread so that
	// every branch is taken: clipping both ways, dual-clip, TIS truncation,
	// the log-ratio clamp.
	const seqs, T = 3, 40
	rng := rand.New(rand.NewPCG(17, 18))
	b := rl.PolicyBatch{}
	for i := 0; i < seqs; i++ {
		mk := func() []float32 { return make([]float32, T) }
		lp, old, sample, ref, ent, adv, mask := mk(), mk(), mk(), mk(), mk(), mk(), mk()
		a := float32(rng.NormFloat64())
		for t := range lp {
			lp[t] = float32(-rng.ExpFloat64())
			old[t] = lp[t] + float32(rng.NormFloat64()*0.4)
			sample[t] = old[t] + float32(rng.NormFloat64()*0.8)
			ref[t] = lp[t] + float32(rng.NormFloat64()*0.5)
			ent[t] = float32(rng.Float64() * 3)
			adv[t] = a
			if rng.IntN(5) > 0 {
				mask[t] = 1
			}
		}
		b.LogProbs, b.OldLogProbs, b.SampleLogProbs = append(b.LogProbs, lp), append(b.OldLogProbs, old), append(b.SampleLogProbs, sample)
		b.RefLogProbs, b.Entropy, b.Advantages, b.Mask = append(b.RefLogProbs, ref), append(b.Entropy, ent), append(b.Advantages, adv), append(b.Mask, mask)
	}
	b.OldLogProbs[0][3] = b.LogProbs[0][3] - 30 // past the log-ratio clamp
	b.Advantages[1] = make([]float32, T)
	for t := range b.Advantages[1] {
		b.Advantages[1][t] = -2 // negative: dual-clip applies
	}
	for _, t := range []int{5, 6, 7} { // ratios e^1.5 > 3: dual-clipped
		b.OldLogProbs[1][t] = b.LogProbs[1][t] - 1.5
		b.Mask[1][t] = 1
	}
	cfgs := map[string]rl.PolicyLossConfig{
		"ppo":      rl.PPOConfig(),
		"dapo+all": {ClipLow: 0.2, ClipHigh: 0.28, DualClip: 3, TISCap: 2, KLCoef: 0.05, KL: rl.K3, EntropyCoef: 0.01, Aggregation: rl.TokenMean},
		"k1":       {ClipLow: 0.2, ClipHigh: 0.2, KLCoef: 0.1, KL: rl.K1, Aggregation: rl.TokenMean},
		"k2+tis":   {ClipLow: 0.2, ClipHigh: 0.2, KLCoef: 0.1, KL: rl.K2, TISCap: 1.5, Aggregation: rl.TokenMean},
	}
	klKind := map[rl.KLEstimator]int32{rl.K1: 1, rl.K2: 2, rl.K3: 3}
	flat := func(x [][]float32) []float32 {
		var out []float32
		for _, r := range x {
			out = append(out, r...)
		}
		return out
	}
	norm := rl.CountNorm(b.Mask)
	weight := flat(b.Mask)
	for i := range weight {
		weight[i] /= float32(norm.Tokens) // token-mean
	}
	n := seqs * T
	for name, l := range launchers(t) {
		for cname, cfg := range cfgs {
			t.Run(name+"/"+cname, func(t *testing.T) {
				want, err := rl.PolicyLoss(cfg, b, norm)
				if err != nil {
					t.Fatal(err)
				}
				loss, dlogp, dent, flags := make([]float32, n), make([]float32, n), make([]float32, n), make([]int32, n)
				must(t, l.Launch("policy_loss_tokens", D1(2), D1(block), loss, dlogp, dent, flags,
					flat(b.LogProbs), flat(b.OldLogProbs), flat(b.Advantages), flat(b.SampleLogProbs), flat(b.RefLogProbs), flat(b.Entropy), weight,
					int32(n), float32(cfg.ClipLow), float32(cfg.ClipHigh), float32(cfg.DualClip), float32(cfg.TISCap), float32(cfg.KLCoef), klKind[cfg.KL], float32(cfg.EntropyCoef)))
				var sum float64
				var clipped, dual, tis float64
				for i := range loss {
					sum += float64(loss[i])
					clipped += float64(flags[i] & 1)
					dual += float64(flags[i] >> 1 & 1)
					tis += float64(flags[i] >> 2 & 1)
				}
				if d := math.Abs(sum - want.Loss); d > 1e-5*math.Max(1, math.Abs(want.Loss)) {
					t.Errorf("loss %g, want %g", sum, want.Loss)
				}
				near(t, "dlogp", dlogp, flat(want.DLogProbs), tol{rel: 1e-5, abs: 1e-6})
				if cfg.EntropyCoef > 0 {
					near(t, "dentropy", dent, flat(want.DEntropy), tolF32)
				}
				st := want.Stats
				if cname == "dapo+all" && (clipped == 0 || dual == 0 || tis == 0) {
					t.Errorf("inputs leave a branch untaken: %v clipped, %v dual-clipped, %v TIS-truncated", clipped, dual, tis)
				}
				if clipped != st.ClippedHigh+st.ClippedLow || dual != st.DualClipped || tis != st.TISTruncated {
					t.Errorf("flags count %v clipped, %v dual-clipped, %v TIS-truncated; want %v, %v, %v", clipped, dual, tis, st.ClippedHigh+st.ClippedLow, st.DualClipped, st.TISTruncated)
				}
			})
		}
	}
}

func TestAdamW(t *testing.T) {
	const n = 300
	for name, l := range launchers(t) {
		for _, bf := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/bf16-copy=%v", name, bf), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(19, 20))
				w := randn(rng, n, 1)
				ref := optim.NewAdamW(0.9, 0.95, 1e-8, 0.01)
				p := &optim.Param{Name: "w", Data: clone(w)}
				m, v := make([]float32, n), make([]float32, n)
				wb := make([]uint16, n)
				for step := 1; step <= 3; step++ {
					g := randn(rng, n, 0.1)
					p.Grad = clone(g)
					const lr = 1e-3
					must(t, ref.Step([]*optim.Param{p}, lr))
					// The step's coefficients as torch (and optim.AdamW) round them.
					tt := float64(step)
					coef := []any{float32(1), float32(1 - lr*ref.WeightDecay), float32(ref.Beta1), float32(ref.Beta2), float32(1 - ref.Beta1), float32(1 - ref.Beta2),
						float32(math.Sqrt(1 - math.Pow(ref.Beta2, tt))), float32(ref.Eps), float32(lr / (1 - math.Pow(ref.Beta1, tt)))}
					if bf {
						must(t, l.Launch("adamw_bf16", D1(2), D1(block), append([]any{w, wb, g, m, v, int64(n)}, coef...)...))
					} else {
						must(t, l.Launch("adamw_f32", D1(2), D1(block), append([]any{w, g, m, v, int64(n)}, coef...)...))
					}
				}
				// Same formula, same float32 operations: equal up to the
				// compiler's contraction of a·b+c into one rounding.
				near(t, "weights", w, p.Data, tol{rel: 1e-6, abs: 0})
				if bf {
					near(t, "bf16 copy", fromBF16(wb), roundBF16(clone(p.Data)), tol{rel: 0, abs: 0})
				}
			})
		}
	}
}
