package rl

import (
	"fmt"
	"math"
)

// ValueBatch is one micro-batch for ValueLoss, shaped as Mask.
type ValueBatch struct {
	Values    [][]float32 // the value head's current predictions (with gradient)
	OldValues [][]float32 // predictions when the batch was made, detached
	Returns   [][]float32 // targets, e.g. from GAE
	Mask      [][]float32
}

// ValueLossResult is the value loss of one micro-batch and its gradient.
type ValueLossResult struct {
	Loss    float64
	DValues [][]float32 // dLoss/dValues per token
	// Clipped counts loss tokens where the clipped error was the larger
	// (verl's vf_clipfrac = Clipped/Tokens); sums over micro-batches.
	Clipped, Tokens float64
}

// ClipFrac is the fraction of tokens whose clipped error was used.
func (r ValueLossResult) ClipFrac() float64 {
	if r.Tokens == 0 {
		return 0
	}
	return r.Clipped / r.Tokens
}

// ValueLoss is PPO's clipped value loss: per loss token, with
// v' = clip(v, old−clip, old+clip),
//
//	ℓ = ½·max((v − R)², (v' − R)²)
//
// aggregated with agg over norm. clip ≤ 0 is refused; pass a large clip to
// turn clipping off.
func ValueLoss(b ValueBatch, clip float64, agg Aggregation, norm Norm) (ValueLossResult, error) {
	if !(clip > 0) || math.IsInf(clip, 0) {
		return ValueLossResult{}, fmt.Errorf("value loss: clip %v must be positive and finite", clip)
	}
	if err := checkTokens(b.Mask,
		tokenField{name: "values", data: b.Values},
		tokenField{name: "old values", data: b.OldValues},
		tokenField{name: "returns", data: b.Returns}); err != nil {
		return ValueLossResult{}, fmt.Errorf("value loss: %w", err)
	}
	w, err := newWeigher(agg, norm, CountNorm(b.Mask))
	if err != nil {
		return ValueLossResult{}, fmt.Errorf("value loss: %w", err)
	}
	res := ValueLossResult{DValues: zerosLike(b.Mask)}
	for i, m := range b.Mask {
		n := maskCount(m)
		if n == 0 {
			continue
		}
		wi := w.seq(n)
		var sum float64
		for t, mt := range m {
			if mt == 0 {
				continue
			}
			v, old, ret := float64(b.Values[i][t]), float64(b.OldValues[i][t]), float64(b.Returns[i][t])
			vc, dvc := v, 1.0
			if v < old-clip || v > old+clip {
				vc, dvc = math.Max(old-clip, math.Min(old+clip, v)), 0
			}
			e1, e2 := v-ret, vc-ret
			l1, l2 := 0.5*e1*e1, 0.5*e2*e2
			var l, dl float64
			switch {
			case l1 > l2:
				l, dl = l1, e1
			case l2 > l1:
				l, dl = l2, e2*dvc
				res.Clipped++
			default: // tie: torch.maximum splits the gradient
				l, dl = l1, 0.5*(e1+e2*dvc)
			}
			sum += l
			res.DValues[i][t] = float32(wi * dl)
			res.Tokens++
		}
		res.Loss += wi * sum
	}
	return res, nil
}
