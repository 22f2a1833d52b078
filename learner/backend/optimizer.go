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

// PinnedHost is implemented by backends without host memory that can
// give host buffers the device copies to and from directly (page-locked
// memory on a GPU), for what crosses every step: a data-parallel rank's
// gradients and weights. HostBuffer returns n zeroed float32s of it, or
// nil where it cannot (ordinary memory serves then); FreeHostBuffer frees
// one and ignores any other slice. The buffers are invalid once the
// backend is closed. PinHostBuffer page-locks memory the caller owns (a
// buffer shared with other processes), reporting whether it could;
// UnpinHostBuffer undoes it and must come before that memory goes away.
type PinnedHost interface {
	HostBuffer(n int) []float32
	FreeHostBuffer(x []float32)
	PinHostBuffer(x []float32) bool
	UnpinHostBuffer(x []float32)
}
