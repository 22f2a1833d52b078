package rl

import (
	"fmt"
	"math"
)

// GRPOEps is ε of GRPO's (r − mean)/(std + ε), as in verl, SkyRL and NeMo-RL.
const GRPOEps = 1e-6

// checkGroups validates outcome rewards laid out as consecutive groups of
// groupSize responses to the same prompt.
func checkGroups(what string, rewards []float64, groupSize, minSize int) error {
	if groupSize < minSize {
		return fmt.Errorf("%s: group size %d, need at least %d", what, groupSize, minSize)
	}
	if len(rewards)%groupSize != 0 {
		return fmt.Errorf("%s: group size %d does not divide the batch of %d rewards", what, groupSize, len(rewards))
	}
	if err := checkScalars("rewards", rewards); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// meanStd returns the mean and the unbiased (N−1) standard deviation, as
// torch.std; std is 0 for one value.
func meanStd(x []float64) (mean, std float64) {
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	if len(x) < 2 {
		return mean, 0
	}
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / float64(len(x)-1))
}

// GRPOAdvantages are GRPO's group-normalized advantages. rewards holds one
// outcome reward per response, in consecutive groups of groupSize responses
// to the same prompt:
//
//	A_i = (r_i − mean_g) / (std_g + GRPOEps)
//
// with std the unbiased (N−1) standard deviation, as torch.std and verl.
// A group of identical rewards gets advantage 0. As in verl, a group of one
// response gets mean 0 and std 1, so A = r/(1 + GRPOEps).
func GRPOAdvantages(rewards []float64, groupSize int) ([]float64, error) {
	return groupAdvantages("grpo advantages", rewards, groupSize, true)
}

// DrGRPOAdvantages are Dr.GRPO's advantages, A_i = r_i − mean_g, without
// the division by the group's std that biases towards easy and hard prompts.
func DrGRPOAdvantages(rewards []float64, groupSize int) ([]float64, error) {
	return groupAdvantages("dr.grpo advantages", rewards, groupSize, false)
}

func groupAdvantages(what string, rewards []float64, groupSize int, byStd bool) ([]float64, error) {
	if err := checkGroups(what, rewards, groupSize, 1); err != nil {
		return nil, err
	}
	adv := make([]float64, len(rewards))
	for g := 0; g < len(rewards); g += groupSize {
		group := rewards[g : g+groupSize]
		mean, std := meanStd(group)
		if groupSize == 1 {
			mean, std = 0, 1
		}
		for j, r := range group {
			if byStd {
				adv[g+j] = (r - mean) / (std + GRPOEps)
			} else {
				adv[g+j] = r - mean
			}
		}
	}
	return adv, nil
}

// RLOOAdvantages are REINFORCE leave-one-out advantages: each response's
// reward minus the mean of the other responses in its group,
//
//	A_i = r_i − (Σ_g r − r_i)/(G − 1) = G/(G−1) · (r_i − mean_g).
//
// Groups need at least two responses.
func RLOOAdvantages(rewards []float64, groupSize int) ([]float64, error) {
	if err := checkGroups("rloo advantages", rewards, groupSize, 2); err != nil {
		return nil, err
	}
	adv := make([]float64, len(rewards))
	for g := 0; g < len(rewards); g += groupSize {
		group := rewards[g : g+groupSize]
		var sum float64
		for _, r := range group {
			sum += r
		}
		for j, r := range group {
			adv[g+j] = r - (sum-r)/float64(groupSize-1)
		}
	}
	return adv, nil
}

// TokenAdvantages broadcasts one advantage per sequence to its loss tokens
// (0 elsewhere), the per-token form PolicyLoss takes.
func TokenAdvantages(seqAdv []float64, mask [][]float32) ([][]float32, error) {
	if len(seqAdv) != len(mask) {
		return nil, fmt.Errorf("token advantages: %d advantages for %d sequences", len(seqAdv), len(mask))
	}
	if err := checkScalars("advantages", seqAdv); err != nil {
		return nil, fmt.Errorf("token advantages: %w", err)
	}
	if err := checkTokens(mask); err != nil {
		return nil, fmt.Errorf("token advantages: %w", err)
	}
	out := zerosLike(mask)
	for i, m := range mask {
		a := float32(seqAdv[i])
		for t, mt := range m {
			if mt != 0 {
				out[i][t] = a
			}
		}
	}
	return out, nil
}

// whitenEps is the variance floor of MaskedWhiten, as verl's masked_whiten.
const whitenEps = 1e-8

// MaskedWhiten normalizes x over all loss tokens of the batch:
// (x − mean)/√(var + 1e-8), with var the unbiased (N−1) variance, as verl's
// masked_whiten. Tokens with mask 0 get 0. Fewer than two loss tokens is an
// error (no variance).
func MaskedWhiten(x, mask [][]float32) ([][]float32, error) {
	if err := checkTokens(mask, tokenField{name: "values", data: x}); err != nil {
		return nil, fmt.Errorf("masked whiten: %w", err)
	}
	var n, sum float64
	for i, m := range mask {
		for t, mt := range m {
			if mt != 0 {
				n++
				sum += float64(x[i][t])
			}
		}
	}
	if n < 2 {
		return nil, fmt.Errorf("masked whiten: %v loss tokens, need at least 2", n)
	}
	mean := sum / n
	var ss float64
	for i, m := range mask {
		for t, mt := range m {
			if mt != 0 {
				d := float64(x[i][t]) - mean
				ss += d * d
			}
		}
	}
	inv := 1 / math.Sqrt(ss/(n-1)+whitenEps)
	out := zerosLike(mask)
	for i, m := range mask {
		for t, mt := range m {
			if mt != 0 {
				out[i][t] = float32((float64(x[i][t]) - mean) * inv)
			}
		}
	}
	return out, nil
}

// ReinforcePPAdvantages are REINFORCE++ advantages: per-token discounted
// returns of the token rewards (TokenRewards puts the outcome score at the
// last loss token and the KL penalty −β·kl on every one),
//
//	G_t = r_t + gamma·G_{t+1},
//
// then whitened over all loss tokens of the batch (MaskedWhiten). It returns
// the advantages and the returns. Discounting steps over loss tokens only:
// tokens with mask 0 (tool output between turns) are skipped, not counted as
// time steps, so credit reaches earlier turns undiminished by them.
func ReinforcePPAdvantages(tokenRewards, mask [][]float32, gamma float64) (adv, returns [][]float32, err error) {
	if !(gamma >= 0 && gamma <= 1) {
		return nil, nil, fmt.Errorf("reinforce++ advantages: gamma %v not in [0, 1]", gamma)
	}
	if err := checkTokens(mask, tokenField{name: "token rewards", data: tokenRewards}); err != nil {
		return nil, nil, fmt.Errorf("reinforce++ advantages: %w", err)
	}
	returns = zerosLike(mask)
	for i, m := range mask {
		var g float64
		for t := len(m) - 1; t >= 0; t-- {
			if m[t] == 0 {
				continue
			}
			g = float64(tokenRewards[i][t]) + gamma*g
			returns[i][t] = float32(g)
		}
	}
	adv, err = MaskedWhiten(returns, mask)
	if err != nil {
		return nil, nil, fmt.Errorf("reinforce++ advantages: %w", err)
	}
	return adv, returns, nil
}

// GAE computes generalized advantage estimates from token rewards and the
// value head's values (Schulman et al. 2016):
//
//	δ_t = r_t + gamma·V_{t+1} − V_t,   A_t = δ_t + gamma·lambda·A_{t+1}
//
// with V and A after the last loss token 0 (the episode ends), and returns
// R_t = A_t + V_t, the value loss's targets. As in ReinforcePPAdvantages,
// time steps are loss tokens only. The advantages are not whitened; verl
// whitens them (MaskedWhiten) before the policy loss.
func GAE(tokenRewards, values, mask [][]float32, gamma, lambda float64) (adv, returns [][]float32, err error) {
	if !(gamma >= 0 && gamma <= 1) {
		return nil, nil, fmt.Errorf("gae: gamma %v not in [0, 1]", gamma)
	}
	if !(lambda >= 0 && lambda <= 1) {
		return nil, nil, fmt.Errorf("gae: lambda %v not in [0, 1]", lambda)
	}
	if err := checkTokens(mask,
		tokenField{name: "token rewards", data: tokenRewards},
		tokenField{name: "values", data: values}); err != nil {
		return nil, nil, fmt.Errorf("gae: %w", err)
	}
	adv, returns = zerosLike(mask), zerosLike(mask)
	for i, m := range mask {
		var nextV, nextA float64
		for t := len(m) - 1; t >= 0; t-- {
			if m[t] == 0 {
				continue
			}
			v := float64(values[i][t])
			delta := float64(tokenRewards[i][t]) + gamma*nextV - v
			a := delta + gamma*lambda*nextA
			adv[i][t] = float32(a)
			returns[i][t] = float32(a + v)
			nextV, nextA = v, a
		}
	}
	return adv, returns, nil
}
