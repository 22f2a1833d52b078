package rl

import "fmt"

// ArCHer (Zhou et al., 2024): an utterance-level off-policy critic, Q(s, a)
// and V(s) over whole turns with target copies Q', V' that follow the
// online critic by Polyak averaging, trains on transitions (s, a, r, s',
// done) replayed from a buffer:
//
//	y_Q = r + γ·(1 − done)·V'(s')        (TDTargets)
//	y_V = Q'(s, a)
//	ℓ_critic = mean (Q(s, a) − y_Q)² + mean (V(s) − y_V)²   (CriticLoss)
//
// and the token-level actor takes the utterance's advantage Q(s, a) − V(s)
// (UtteranceAdvantages) on every token of a: −mean_i A_i·Σ_t log π(a_it)
// (PolicyLoss on TokenAdvantages, seq-mean-token-sum-norm).

// TDTargets are the critic's Q targets r_i + γ·(1 − done_i)·V'(s'_i), with
// nextValues the target network's V' of each next state (ignored where
// done). γ is in [0, 1].
func TDTargets(rewards, nextValues []float64, done []bool, gamma float64) ([]float64, error) {
	if len(nextValues) != len(rewards) || len(done) != len(rewards) {
		return nil, fmt.Errorf("td targets: %d rewards, %d next values, %d done flags", len(rewards), len(nextValues), len(done))
	}
	if !(gamma >= 0 && gamma <= 1) {
		return nil, fmt.Errorf("td targets: gamma %v: want [0, 1]", gamma)
	}
	if err := checkScalars("rewards", rewards); err != nil {
		return nil, fmt.Errorf("td targets: %w", err)
	}
	out := make([]float64, len(rewards))
	for i, r := range rewards {
		out[i] = r
		if done[i] {
			continue
		}
		if !finite(nextValues[i]) {
			return nil, fmt.Errorf("td targets: next value %d is %v", i, nextValues[i])
		}
		out[i] += gamma * nextValues[i]
	}
	return out, nil
}

// CriticLossResult is CriticLoss of one batch of transitions.
type CriticLossResult struct {
	Loss, QLoss, VLoss float64
	// DQ and DV are dLoss/dQ_i and dLoss/dV_i.
	DQ, DV []float64
}

// CriticLoss is the utterance critic's loss mean (Q_i − y_Q,i)² + mean
// (V_i − y_V,i)² over n transitions (torch's mse_loss, the two heads' sum),
// with its gradients with respect to the online Q and V. Targets are
// detached.
func CriticLoss(q, v, qTargets, vTargets []float64) (CriticLossResult, error) {
	n := len(q)
	if n == 0 || len(v) != n || len(qTargets) != n || len(vTargets) != n {
		return CriticLossResult{}, fmt.Errorf("critic loss: %d q, %d v, %d q targets, %d v targets: want the same number > 0", n, len(v), len(qTargets), len(vTargets))
	}
	for _, f := range []struct {
		name string
		x    []float64
	}{{"q", q}, {"v", v}, {"q targets", qTargets}, {"v targets", vTargets}} {
		if err := checkScalars(f.name, f.x); err != nil {
			return CriticLossResult{}, fmt.Errorf("critic loss: %w", err)
		}
	}
	res := CriticLossResult{DQ: make([]float64, n), DV: make([]float64, n)}
	for i := range q {
		eq, ev := q[i]-qTargets[i], v[i]-vTargets[i]
		res.QLoss += eq * eq / float64(n)
		res.VLoss += ev * ev / float64(n)
		res.DQ[i], res.DV[i] = 2*eq/float64(n), 2*ev/float64(n)
	}
	res.Loss = res.QLoss + res.VLoss
	return res, nil
}

// UtteranceAdvantages are ArCHer's A_i = Q(s_i, a_i) − V(s_i) (both
// detached), one per utterance.
func UtteranceAdvantages(q, v []float64) ([]float64, error) {
	adv, err := BaselineAdvantages(q, v)
	if err != nil {
		return nil, fmt.Errorf("utterance advantages: %w", err)
	}
	return adv, nil
}

// Polyak moves target toward online: target ← (1 − τ)·target + τ·online,
// element-wise in float64, τ in [0, 1].
func Polyak(target, online []float32, tau float64) error {
	if len(target) != len(online) {
		return fmt.Errorf("polyak: %d target weights, %d online", len(target), len(online))
	}
	if !(tau >= 0 && tau <= 1) {
		return fmt.Errorf("polyak: tau %v: want [0, 1]", tau)
	}
	for i, w := range online {
		target[i] = float32((1-tau)*float64(target[i]) + tau*float64(w))
	}
	return nil
}
