package backend

// FusedAdamW is implemented by backends without host memory that run
// the optimizer step on their own tensors (learner/cuda's device
// backend), so a training step copies neither weights nor gradients to
// the host.
type FusedAdamW interface {
	// SumSquares sets out[i] to the sum of the squares of ts[i]'s
	// elements, accumulated in float64 (NaN or ±Inf where ts[i] holds
	// one). len(out) == len(ts).
	SumSquares(out []float64, ts []Tensor) error
	// AdamW applies one AdamW update to each set, element-wise in
	// float32 as learner/optim's AdamW.Step: with g = G·GradScale,
	//
	//	w ← W·Decay;  M ← Beta1·M + OneMinusB1·g;  V ← Beta2·V + OneMinusB2·g²
	//	W ← w − StepSize·M/(√V/BC2Sqrt + Eps)
	//
	// W, G, M and V of a set have the same length; G is not changed.
	AdamW(sets []AdamWTensors, c AdamWCoef) error
}

// AdamWTensors are one parameter's weights, gradient and moments.
type AdamWTensors struct{ W, G, M, V Tensor }

// AdamWCoef are one AdamW step's scalars (learner/optim's Coefficients)
// and the gradients' scale (global-norm clipping's coefficient, 1 when
// not clipping).
type AdamWCoef struct {
	GradScale                                                           float32
	Decay, Beta1, Beta2, OneMinusB1, OneMinusB2, BC2Sqrt, Eps, StepSize float32
}
