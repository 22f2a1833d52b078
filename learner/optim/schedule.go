package optim

import (
	"fmt"
	"math"
)

// Schedule gives the learning rate for an optimizer step. step counts from
// 0: LR(0) is the rate of the first update (AdamW.StepCount() before Step).
type Schedule interface {
	LR(step int) float64
}

// Constant is a fixed learning rate.
type Constant float64

// LR returns c for every step.
func (c Constant) LR(int) float64 { return float64(c) }

// WarmupCosine rises linearly over Warmup steps to Base, then decays along
// half a cosine to Min at step Total, and stays at Min after it:
//
//	step < Warmup:          Base·(step+1)/Warmup
//	Warmup ≤ step < Total:  Min + (Base−Min)·(1 + cos(π·(step−Warmup)/(Total−Warmup)))/2
//	step ≥ Total:           Min
//
// Unlike Hugging Face's get_cosine_schedule_with_warmup, the first warmup
// step is Base/Warmup, not 0, so no step is spent with a zero rate.
type WarmupCosine struct {
	Base, Min     float64
	Warmup, Total int
}

// Validate reports fields that make no schedule.
func (s WarmupCosine) Validate() error {
	switch {
	case !(s.Base >= 0) || math.IsInf(s.Base, 0):
		return fmt.Errorf("warmup-cosine: base %v is not a finite non-negative rate", s.Base)
	case !(s.Min >= 0) || s.Min > s.Base:
		return fmt.Errorf("warmup-cosine: min %v not in [0, base %v]", s.Min, s.Base)
	case s.Warmup < 0:
		return fmt.Errorf("warmup-cosine: negative warmup %d", s.Warmup)
	case s.Total < s.Warmup:
		return fmt.Errorf("warmup-cosine: total %d is less than warmup %d", s.Total, s.Warmup)
	}
	return nil
}

// LR returns the rate for step (0-based). Negative steps get the rate of step 0.
func (s WarmupCosine) LR(step int) float64 {
	step = max(step, 0)
	switch {
	case step < s.Warmup:
		return s.Base * float64(step+1) / float64(s.Warmup)
	case step >= s.Total:
		return s.Min
	}
	progress := float64(step-s.Warmup) / float64(s.Total-s.Warmup)
	return s.Min + (s.Base-s.Min)*0.5*(1+math.Cos(math.Pi*progress))
}
