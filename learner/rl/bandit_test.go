package rl

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/optim"
)

// TestGRPOBanditLearns trains a softmax policy over four actions, of which
// only action 2 is rewarded, with GRPO advantages, the DAPO loss with an
// entropy bonus, and AdamW: the gradients returned for logprobs and
// entropies are backpropagated to the logits by hand
// (∂log p_a/∂θ_j = 1[j=a] − p_j, ∂H/∂θ_j = −p_j·(log p_j + H)).
// The probability of the rewarded action must rise from 1/4 to above 0.9.
func TestGRPOBanditLearns(t *testing.T) {
	const actions, group, steps, best = 4, 8, 60, 2
	rng := rand.New(rand.NewPCG(42, 0))
	theta := &optim.Param{Name: "logits", Data: make([]float32, actions), Grad: make([]float32, actions)}
	params := []*optim.Param{theta}
	opt := optim.NewAdamW(0.9, 0.999, 1e-8, 0)
	cfg := withEntropy(DAPOConfig(), 1e-3)
	probs := func() (p []float64, h float64) {
		p = make([]float64, actions)
		var z float64
		for j, v := range theta.Data {
			p[j] = math.Exp(float64(v))
			z += p[j]
		}
		for j := range p {
			p[j] /= z
			h -= p[j] * math.Log(p[j])
		}
		return p, h
	}
	for range steps {
		p, h := probs()
		// Sample one group of single-token responses.
		acts := make([]int, group)
		rewards := make([]float64, group)
		b := PolicyBatch{Mask: make([][]float32, group)}
		for i := range acts {
			u, c := rng.Float64(), 0.0
			for acts[i] = 0; acts[i] < actions-1; acts[i]++ {
				if c += p[acts[i]]; u < c {
					break
				}
			}
			if acts[i] == best {
				rewards[i] = 1
			}
			lp := f32(math.Log(p[acts[i]]))
			b.LogProbs = append(b.LogProbs, []float32{lp})
			b.OldLogProbs = append(b.OldLogProbs, []float32{lp})
			b.Entropy = append(b.Entropy, []float32{f32(h)})
			b.Mask[i] = []float32{1}
		}
		adv, err := GRPOAdvantages(rewards, group)
		if err != nil {
			t.Fatal(err)
		}
		if b.Advantages, err = TokenAdvantages(adv, b.Mask); err != nil {
			t.Fatal(err)
		}
		res, err := PolicyLoss(cfg, b, CountNorm(b.Mask))
		if err != nil {
			t.Fatal(err)
		}
		optim.ZeroGrad(params)
		for i, a := range acts {
			dl, dh := float64(res.DLogProbs[i][0]), float64(res.DEntropy[i][0])
			for j := range theta.Grad {
				ind := 0.0
				if j == a {
					ind = 1
				}
				theta.Grad[j] += f32(dl*(ind-p[j]) + dh*(-p[j]*(math.Log(p[j])+h)))
			}
		}
		optim.ClipGradNorm(params, 1)
		if err := opt.Step(params, 0.1); err != nil {
			t.Fatal(err)
		}
	}
	if p, _ := probs(); p[best] < 0.9 {
		t.Fatalf("after %d steps p(best) = %.3f, want > 0.9 (probs %v)", steps, p[best], p)
	}
}
