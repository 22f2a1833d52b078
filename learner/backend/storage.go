package backend

// BF16Storage is implemented by backends that can keep tensors as
// bfloat16 values, half the memory of float32: a model that stores its
// activations so (learner/model's Model.ActivationsBF16) rounds each
// layer's largest activations into such tensors after the layer's
// forward pass and widens them back before its backward pass. A bf16
// tensor's Len counts its elements; only ToBF16, FromBF16 and Free take
// one.
type BF16Storage interface {
	// AllocBF16 returns a tensor of n bf16 zeros.
	AllocBF16(n int) Tensor
	// ToBF16 rounds src (float32) into dst (bf16) to nearest even, NaN
	// staying NaN; FromBF16 widens src (bf16) into dst (float32) exactly.
	ToBF16(dst, src Tensor)
	FromBF16(dst, src Tensor)
}
