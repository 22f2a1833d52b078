package optim

import (
	"fmt"
	"math"
)

// Param is one checkpoint tensor, flattened: its Hugging Face name, its
// weights and the gradient accumulated for them. Data and Grad have the same
// length.
type Param struct {
	Name string
	Data []float32
	Grad []float32
}

// CheckFinite returns an error naming the first tensor (in params order) and
// the first index in it whose gradient is NaN or ±Inf, or nil if all are
// finite.
func CheckFinite(params []*Param) error {
	for _, p := range params {
		if i := firstNonFinite(p.Grad); i >= 0 {
			return fmt.Errorf("gradient of %q: %v at index %d", p.Name, p.Grad[i], i)
		}
	}
	return nil
}

// firstNonFinite returns the index of the first NaN or ±Inf in x, or -1.
func firstNonFinite(x []float32) int {
	for i, v := range x {
		// v-v is NaN exactly when v is NaN or ±Inf.
		if v-v != 0 {
			return i
		}
	}
	return -1
}

// ZeroGrad sets every gradient to zero; call it before the first
// micro-batch of an optimizer step.
func ZeroGrad(params []*Param) {
	for _, p := range params {
		clear(p.Grad)
	}
}

// Scale multiplies every gradient by s. Under gradient accumulation the
// model adds each micro-batch's gradient into Grad; if the losses were
// normalized per micro-batch rather than by the full batch's token count,
// Scale(params, 1/numMicroBatches) turns the sum into the mean.
func Scale(params []*Param, s float64) {
	f := float32(s)
	for _, p := range params {
		for i := range p.Grad {
			p.Grad[i] *= f
		}
	}
}

// ClipGradNorm scales all gradients together so that their global L2 norm
// is at most maxNorm, as torch.nn.utils.clip_grad_norm_ does: the norm is
// taken over the per-tensor norms, and gradients are multiplied by
// min(1, maxNorm/(norm+1e-6)). It returns the norm before clipping.
//
// If the norm is NaN or Inf the gradients are left as they are and the
// non-finite norm is returned; the following Step refuses them.
func ClipGradNorm(params []*Param, maxNorm float64) (totalNorm float64) {
	var sq float64
	for _, p := range params {
		var s float64
		for _, g := range p.Grad {
			s += float64(g) * float64(g)
		}
		sq += s
	}
	totalNorm = math.Sqrt(sq)
	if math.IsNaN(totalNorm) || math.IsInf(totalNorm, 0) {
		return totalNorm
	}
	coef := maxNorm / (totalNorm + 1e-6)
	if coef < 1 {
		Scale(params, coef)
	}
	return totalNorm
}

// checkShapes refuses params whose Data and Grad differ in length, that
// have no name, or whose names repeat.
func checkShapes(params []*Param) error {
	seen := make(map[string]bool, len(params))
	for i, p := range params {
		if p == nil {
			return fmt.Errorf("param %d is nil", i)
		}
		if p.Name == "" {
			return fmt.Errorf("param %d has no name", i)
		}
		if seen[p.Name] {
			return fmt.Errorf("param %q appears twice", p.Name)
		}
		seen[p.Name] = true
		if len(p.Data) != len(p.Grad) {
			return fmt.Errorf("param %q: %d weights but %d gradients", p.Name, len(p.Data), len(p.Grad))
		}
	}
	return nil
}
