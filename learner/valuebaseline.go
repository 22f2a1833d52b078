package learner

import (
	"fmt"
	"math"
)

// ValueBaseline is bi-level MLMT's value V_L on the trained model's value
// head: V_i is sequence i's value at its last loss token, trained on
// LossCoef·(V_i − R_i)² beside the policy loss, and reported before the
// step in Stats.Values (the solver's baseline, R − V_L). With Shaping the
// policy's advantages are computed from R + Shaping·V (values of the
// pre-pass, detached) instead of R.
type ValueBaseline struct {
	// LossCoef weighs the value loss; > 0.
	LossCoef float64
	// Shaping is c of the shaped reward R + c·V; 0 is off.
	Shaping float64
	// StopTrunkGradient trains the head alone on the value loss: no value
	// gradient reaches the trunk the policy shares (stop_value_gradients).
	StopTrunkGradient bool
	// ValueOnly trains the value loss alone: the policy takes no
	// policy-gradient step (train_guidance_model false). AdamW restarts at
	// the RL phase's first step, so with StopTrunkGradient (and no weight
	// decay) the policy's weights stay as the warm-up left them.
	ValueOnly bool
}

func (v *ValueBaseline) validate() error {
	switch {
	case !(v.LossCoef > 0) || math.IsInf(v.LossCoef, 0):
		return fmt.Errorf("loss_coef %v: want a finite value > 0", v.LossCoef)
	case math.IsNaN(v.Shaping) || math.IsInf(v.Shaping, 0):
		return fmt.Errorf("shaping %v: want a finite value", v.Shaping)
	}
	return nil
}
