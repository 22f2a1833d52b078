package ctxopt

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/rlnode/rlnode/learner/optim"
	"github.com/rlnode/rlnode/learner/rl"
)

// PPOConfig holds one agent's PPO settings.
type PPOConfig struct {
	LR          float64 // AdamW learning rate
	EntropyCoef float64
	Clip        float64 // ratio clip; 0.2
	Epochs      int     // passes over each batch; 4
	MaxGradNorm float64 // global gradient-norm clip; 0.5
	ValueCoef   float64 // weight of the value loss; 0.5
	Gamma       float64 // discount between an episode's steps
	Lambda      float64 // GAE λ; 1 gives Monte Carlo returns
	Hidden      []int   // hidden layer sizes of both networks
}

// Bounds on a network's hidden layers: each network and its optimizer
// state hold several copies of their weights.
const (
	maxHiddenLayers  = 8
	maxHiddenWeights = 1 << 24
)

// Check reports settings PPO cannot run with.
func (c PPOConfig) Check() error {
	switch {
	case !(c.LR > 0 && c.LR < 1):
		return fmt.Errorf("ppo: learning rate %v not in (0, 1)", c.LR)
	case !(c.EntropyCoef >= 0 && c.EntropyCoef < 1):
		return fmt.Errorf("ppo: entropy coefficient %v not in [0, 1)", c.EntropyCoef)
	case !(c.Clip > 0 && c.Clip < 1):
		return fmt.Errorf("ppo: clip %v not in (0, 1)", c.Clip)
	case c.Epochs < 1 || c.Epochs > 64:
		return fmt.Errorf("ppo: epochs %d not in 1..64", c.Epochs)
	case !(c.MaxGradNorm > 0) || math.IsInf(c.MaxGradNorm, 0):
		return fmt.Errorf("ppo: gradient clip %v must be a positive number", c.MaxGradNorm)
	case !(c.ValueCoef >= 0) || math.IsInf(c.ValueCoef, 0):
		return fmt.Errorf("ppo: value coefficient %v must be a finite non-negative number", c.ValueCoef)
	case !(c.Gamma >= 0 && c.Gamma <= 1), !(c.Lambda >= 0 && c.Lambda <= 1):
		return fmt.Errorf("ppo: gamma %v and lambda %v must be in [0, 1]", c.Gamma, c.Lambda)
	case len(c.Hidden) == 0:
		return fmt.Errorf("ppo: no hidden layers")
	}
	if len(c.Hidden) > maxHiddenLayers {
		return fmt.Errorf("ppo: %d hidden layers, at most %d", len(c.Hidden), maxHiddenLayers)
	}
	weights := 0
	for i, h := range c.Hidden {
		if h < 1 || h > 4096 {
			return fmt.Errorf("ppo: hidden size %d not in 1..4096", h)
		}
		if i > 0 {
			weights += c.Hidden[i-1] * h
		}
	}
	if weights > maxHiddenWeights {
		return fmt.Errorf("ppo: hidden layers %v hold %d weights between them, more than %d", c.Hidden, weights, maxHiddenWeights)
	}
	return nil
}

// Step is one decision of an episode: what the policy saw and did, and
// the reward that followed it.
type Step struct {
	Obs     []float32
	Act     Act
	Actions []int
	LogProb float64 // at sampling time (π_old)
	Value   float64 // the value head's estimate at sampling time
	Reward  float64
}

// Learner is a policy, its value network and their optimizer.
type Learner struct {
	Cfg    PPOConfig
	Policy *Policy
	Value  *MLP
	opt    *optim.AdamW
}

// NewLearner builds a learner for observations of obs values and the heads.
func NewLearner(name string, cfg PPOConfig, obs int, heads []int, rng *rand.Rand) (*Learner, error) {
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &Learner{
		Cfg:    cfg,
		Policy: NewPolicy(name+".policy", obs, cfg.Hidden, heads, rng),
		Value:  NewMLP(name+".value", append(append([]int{obs}, cfg.Hidden...), 1), 1, rng),
		opt:    optim.NewAdamW(0.9, 0.999, 1e-8, 0),
	}, nil
}

// Params lists the policy's and the value network's weights.
func (a *Learner) Params() []*optim.Param { return append(a.Policy.Net.Params(), a.Value.Params()...) }

// Decide samples an action for obs and records it as a step (reward 0).
func (a *Learner) Decide(obs []float32, act Act, rng *rand.Rand, greedy bool) (Step, error) {
	d, err := a.Policy.Sample(obs, act, rng, greedy)
	if err != nil {
		return Step{}, err
	}
	v, _, err := a.Value.Forward(obs)
	if err != nil {
		return Step{}, err
	}
	return Step{Obs: obs, Act: act, Actions: d.Actions, LogProb: d.LogProb, Value: v[0]}, nil
}

// UpdateStats are one update's averages over its epochs.
type UpdateStats struct {
	PolicyLoss, ValueLoss, Entropy, ApproxKL, ClipFrac, GradNorm float64
}

// valueClip is large: the value loss is plain squared error.
const valueClip = 1e6

// Update runs PPO on a batch of episodes: GAE advantages (whitened over the
// batch) and returns from the sampled values, then Epochs full-batch
// passes of the clipped policy loss, the value loss and the entropy bonus
// (learner/rl), a global gradient-norm clip and an AdamW step. An
// episode's steps are a sequence's tokens to learner/rl.
func (a *Learner) Update(episodes [][]Step) (UpdateStats, error) {
	b, err := a.prepare(episodes)
	if err != nil {
		return UpdateStats{}, err
	}
	params := a.Params()
	var st UpdateStats
	for range a.Cfg.Epochs {
		es, err := a.epoch(b, params)
		if err != nil {
			return UpdateStats{}, err
		}
		st.PolicyLoss += es.PolicyLoss
		st.ValueLoss += es.ValueLoss
		st.Entropy += es.Entropy
		st.ApproxKL += es.ApproxKL
		st.ClipFrac += es.ClipFrac
		st.GradNorm += es.GradNorm
	}
	n := float64(a.Cfg.Epochs)
	st.PolicyLoss, st.ValueLoss, st.Entropy, st.ApproxKL, st.ClipFrac, st.GradNorm = st.PolicyLoss/n, st.ValueLoss/n, st.Entropy/n, st.ApproxKL/n, st.ClipFrac/n, st.GradNorm/n
	return st, nil
}

// batch is a set of episodes ready for the loss: per step (a token to
// learner/rl), the old logprobs and values, advantages and returns.
type batch struct {
	episodes                           [][]Step
	old, adv, returns, oldValues, mask [][]float32
}

// prepare computes GAE advantages (whitened over the batch) and returns
// from the rewards and the values recorded at sampling time.
func (a *Learner) prepare(episodes [][]Step) (batch, error) {
	var rewards, values, mask [][]float32
	for i, ep := range episodes {
		if len(ep) == 0 {
			return batch{}, fmt.Errorf("ppo update: episode %d has no steps", i)
		}
		r, v, m := make([]float32, len(ep)), make([]float32, len(ep)), make([]float32, len(ep))
		for t, s := range ep {
			if math.IsNaN(s.Reward) || math.IsInf(s.Reward, 0) {
				return batch{}, fmt.Errorf("ppo update: episode %d step %d: reward %v", i, t, s.Reward)
			}
			r[t], v[t], m[t] = float32(s.Reward), float32(s.Value), 1
		}
		rewards, values, mask = append(rewards, r), append(values, v), append(mask, m)
	}
	adv, returns, err := rl.GAE(rewards, values, mask, a.Cfg.Gamma, a.Cfg.Lambda)
	if err != nil {
		return batch{}, fmt.Errorf("ppo update: %w", err)
	}
	if norm := rl.CountNorm(mask); norm.Tokens > 1 {
		if adv, err = rl.MaskedWhiten(adv, mask); err != nil {
			return batch{}, fmt.Errorf("ppo update: %w", err)
		}
	}
	old := make([][]float32, len(episodes))
	for i, ep := range episodes {
		old[i] = make([]float32, len(ep))
		for t, s := range ep {
			old[i][t] = float32(s.LogProb)
		}
	}
	return batch{episodes: episodes, old: old, adv: adv, returns: returns, oldValues: values, mask: mask}, nil
}

// loss computes the PPO loss of the current weights on a prepared batch
// and accumulates its gradient into the params' Grad (callers zero them).
func (a *Learner) loss(b batch) (UpdateStats, float64, error) {
	episodes, old, adv, returns, oldValues, mask := b.episodes, b.old, b.adv, b.returns, b.oldValues, b.mask
	logp, ent, vals := make([][]float32, len(episodes)), make([][]float32, len(episodes)), make([][]float32, len(episodes))
	backs := make([][]func(float64, float64), len(episodes))
	traces := make([][]*mlpTrace, len(episodes))
	for i, ep := range episodes {
		logp[i], ent[i], vals[i] = make([]float32, len(ep)), make([]float32, len(ep)), make([]float32, len(ep))
		backs[i], traces[i] = make([]func(float64, float64), len(ep)), make([]*mlpTrace, len(ep))
		for t, s := range ep {
			lp, h, back, err := a.Policy.Evaluate(s.Obs, s.Act, s.Actions)
			if err != nil {
				return UpdateStats{}, 0, fmt.Errorf("ppo update: episode %d step %d: %w", i, t, err)
			}
			v, tr, err := a.Value.Forward(s.Obs)
			if err != nil {
				return UpdateStats{}, 0, fmt.Errorf("ppo update: episode %d step %d: %w", i, t, err)
			}
			logp[i][t], ent[i][t], vals[i][t] = float32(lp), float32(h), float32(v[0])
			backs[i][t], traces[i][t] = back, tr
		}
	}
	norm := rl.CountNorm(mask)
	cfg := rl.PolicyLossConfig{ClipLow: a.Cfg.Clip, ClipHigh: a.Cfg.Clip, EntropyCoef: a.Cfg.EntropyCoef, Aggregation: rl.TokenMean}
	pl, err := rl.PolicyLoss(cfg, rl.PolicyBatch{LogProbs: logp, OldLogProbs: old, Entropy: ent, Advantages: adv, Mask: mask}, norm)
	if err != nil {
		return UpdateStats{}, 0, fmt.Errorf("ppo update: %w", err)
	}
	vl, err := rl.ValueLoss(rl.ValueBatch{Values: vals, OldValues: oldValues, Returns: returns, Mask: mask}, valueClip, rl.TokenMean, norm)
	if err != nil {
		return UpdateStats{}, 0, fmt.Errorf("ppo update: %w", err)
	}
	for i := range episodes {
		for t := range episodes[i] {
			var dEnt float64
			if pl.DEntropy != nil {
				dEnt = float64(pl.DEntropy[i][t])
			}
			backs[i][t](float64(pl.DLogProbs[i][t]), dEnt)
			a.Value.Backward(traces[i][t], []float64{a.Cfg.ValueCoef * float64(vl.DValues[i][t])})
		}
	}
	st := UpdateStats{
		PolicyLoss: pl.Stats.PGLoss,
		ValueLoss:  vl.Loss,
		Entropy:    pl.Stats.EntropyMean(),
		ApproxKL:   pl.Stats.ApproxKL(),
		ClipFrac:   pl.Stats.ClipFrac(),
	}
	return st, pl.Loss + a.Cfg.ValueCoef*vl.Loss, nil
}

func (a *Learner) epoch(b batch, params []*optim.Param) (UpdateStats, error) {
	optim.ZeroGrad(params)
	st, _, err := a.loss(b)
	if err != nil {
		return UpdateStats{}, err
	}
	if err := optim.CheckFinite(params); err != nil {
		return UpdateStats{}, fmt.Errorf("ppo update: %w", err)
	}
	st.GradNorm = optim.ClipGradNorm(params, a.Cfg.MaxGradNorm)
	if err := a.opt.Step(params, a.Cfg.LR); err != nil {
		return UpdateStats{}, fmt.Errorf("ppo update: %w", err)
	}
	return st, nil
}
