package ctxopt

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/optim"
)

// checkGrad compares the analytic gradient in params' Grad with central
// finite differences of f on a sample of entries.
func checkGrad(t *testing.T, params []*optim.Param, f func() float64) {
	t.Helper()
	const eps = 1e-2
	checked := 0
	for _, p := range params {
		for i := 0; i < len(p.Data); i += 1 + len(p.Data)/7 {
			orig := p.Data[i]
			p.Data[i] = orig + eps
			up := f()
			p.Data[i] = orig - eps
			down := f()
			p.Data[i] = orig
			num := (up - down) / (2 * eps)
			got := float64(p.Grad[i])
			if math.Abs(num-got) > 2e-3+2e-2*math.Abs(num) {
				t.Errorf("%s[%d]: analytic gradient %.6g, finite difference %.6g", p.Name, i, got, num)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no gradient entries checked")
	}
}

func TestPolicyGradientMatchesFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pol := NewPolicy("p", 5, []int{6}, []int{3, 4, 2}, rng)
	pol.Net.W[1].Data[3] = 0.8 // move the output layer away from uniform
	pol.Net.W[1].Data[7] = -0.6
	obs := []float32{0.3, -1, 0.5, 0.2, 0.9}
	act := Act{
		Mask:   [][]bool{nil, {true, false, true, true}, {true, true}},
		Active: []bool{true, true, false},
	}
	actions := []int{2, 3, 1}
	const wl, we = 0.7, -0.3
	f := func() float64 {
		lp, h, _, err := pol.Evaluate(obs, act, actions)
		if err != nil {
			t.Fatal(err)
		}
		return wl*lp + we*h
	}
	optim.ZeroGrad(pol.Net.Params())
	_, _, back, err := pol.Evaluate(obs, act, actions)
	if err != nil {
		t.Fatal(err)
	}
	back(wl, we)
	// The inactive head's logits get no gradient.
	if g := pol.Net.B[1].Grad[7]; g != 0 {
		t.Errorf("inactive head's bias gradient %v, want 0", g)
	}
	checkGrad(t, pol.Net.Params(), f)
}

func TestPolicyMasksAndInactiveHeads(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pol := NewPolicy("p", 2, []int{4}, []int{3, 2}, rng)
	act := Act{Mask: [][]bool{{false, true, false}, nil}, Active: []bool{true, false}}
	for range 200 {
		d, err := pol.Sample([]float32{1, 0}, act, rng, false)
		if err != nil {
			t.Fatal(err)
		}
		if d.Actions[0] != 1 {
			t.Fatalf("sampled masked action %d", d.Actions[0])
		}
		// One allowed action: logprob 0, entropy 0; the inactive head adds nothing.
		if d.LogProb != 0 || d.Entropy != 0 {
			t.Fatalf("logprob %v entropy %v, want 0 and 0", d.LogProb, d.Entropy)
		}
	}
	if _, _, _, err := pol.Evaluate([]float32{1, 0}, act, []int{0, 0}); err == nil {
		t.Error("evaluating a masked action: no error")
	}
	if _, err := pol.Sample([]float32{1, 0}, Act{Mask: [][]bool{{false, false, false}, nil}}, rng, false); err == nil {
		t.Error("a head with every action masked: no error")
	}
	if _, err := pol.Sample([]float32{1}, Act{}, rng, false); err == nil {
		t.Error("observation of the wrong size: no error")
	}
}

func TestPPOLossGradientMatchesFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cfg := PPOConfig{LR: 1e-3, EntropyCoef: 0.05, Clip: 0.2, Epochs: 1, MaxGradNorm: 0.5, ValueCoef: 0.5, Gamma: 0.95, Lambda: 1, Hidden: []int{5}}
	l, err := NewLearner("a", cfg, 3, []int{3, 2}, rng)
	if err != nil {
		t.Fatal(err)
	}
	l.Policy.Net.W[1].Data[2] = 0.9
	var eps [][]Step
	for e := range 4 {
		var ep []Step
		for s := range 1 + e%3 {
			obs := []float32{float32(e) / 3, float32(s) - 1, 0.5}
			act := Act{Active: []bool{true, s != 1}}
			st, err := l.Decide(obs, act, rng, false)
			if err != nil {
				t.Fatal(err)
			}
			// Old logprobs a little off the current ones, inside the clip range.
			st.LogProb += 0.05 * float64(s-1)
			st.Reward = float64(e%2) - 0.3*float64(s)
			ep = append(ep, st)
		}
		eps = append(eps, ep)
	}
	b, err := l.prepare(eps)
	if err != nil {
		t.Fatal(err)
	}
	params := l.Params()
	optim.ZeroGrad(params)
	if _, _, err := l.loss(b); err != nil {
		t.Fatal(err)
	}
	grads := make([][]float32, len(params))
	for i, p := range params {
		grads[i] = append([]float32(nil), p.Grad...)
	}
	f := func() float64 {
		_, v, err := l.loss(b)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	checkGrad(t, params, func() float64 {
		v := f()
		for i, p := range params { // loss accumulates into Grad: restore the analytic one
			copy(p.Grad, grads[i])
		}
		return v
	})
}

// A contextual bandit: context k ∈ {0, 1, 2} (one-hot) pays 1 for action k
// of the first head; the second head's action 3 is masked and the head
// pays 0.5 for action 0. PPO must find both from batches of 32.
func TestPPOLearnsContextualBandit(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	cfg := PPOConfig{LR: 1e-2, EntropyCoef: 0.01, Clip: 0.2, Epochs: 4, MaxGradNorm: 0.5, ValueCoef: 0.5, Gamma: 0, Lambda: 1, Hidden: []int{16}}
	l, err := NewLearner("bandit", cfg, 3, []int{3, 4}, rng)
	if err != nil {
		t.Fatal(err)
	}
	act := Act{Mask: [][]bool{nil, {true, true, true, false}}}
	obsOf := func(k int) []float32 {
		o := make([]float32, 3)
		o[k] = 1
		return o
	}
	for range 60 {
		var eps [][]Step
		for range 32 {
			k := rng.IntN(3)
			st, err := l.Decide(obsOf(k), act, rng, false)
			if err != nil {
				t.Fatal(err)
			}
			if st.Actions[1] == 3 {
				t.Fatal("sampled a masked action")
			}
			if st.Actions[0] == k {
				st.Reward++
			}
			if st.Actions[1] == 0 {
				st.Reward += 0.5
			}
			eps = append(eps, []Step{st})
		}
		if _, err := l.Update(eps); err != nil {
			t.Fatal(err)
		}
	}
	for k := range 3 {
		st, err := l.Decide(obsOf(k), act, rng, true)
		if err != nil {
			t.Fatal(err)
		}
		if st.Actions[0] != k || st.Actions[1] != 0 {
			t.Errorf("context %d: greedy actions %v, want [%d 0]", k, st.Actions, k)
		}
	}
}

func TestPPORefusesBadInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	good := PPOConfig{LR: 1e-3, Clip: 0.2, Epochs: 4, MaxGradNorm: 0.5, ValueCoef: 0.5, Lambda: 1, Hidden: []int{4}}
	for name, mod := range map[string]func(*PPOConfig){
		"lr":     func(c *PPOConfig) { c.LR = 0 },
		"clip":   func(c *PPOConfig) { c.Clip = 1 },
		"epochs": func(c *PPOConfig) { c.Epochs = 0 },
		"gamma":  func(c *PPOConfig) { c.Gamma = 2 },
		"hidden": func(c *PPOConfig) { c.Hidden = nil },
	} {
		c := good
		mod(&c)
		if _, err := NewLearner("x", c, 2, []int{2}, rng); err == nil {
			t.Errorf("%s: bad config accepted", name)
		}
	}
	l, err := NewLearner("x", good, 2, []int{2}, rng)
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Decide([]float32{1, 0}, Act{}, rng, false)
	if err != nil {
		t.Fatal(err)
	}
	st.Reward = math.NaN()
	if _, err := l.Update([][]Step{{st}}); err == nil {
		t.Error("NaN reward accepted")
	}
	if _, err := l.Update([][]Step{{}}); err == nil {
		t.Error("empty episode accepted")
	}
}
