// Package backend defines the narrow set of tensor operations the policy
// model is written against, so that the model exists once and each device
// (the pure-Go CPU reference in learner/cpu, a CUDA backend later) adds
// kernels, not a second model.
//
// Tensors are opaque handles to float32 storage owned by the backend (host
// memory, device memory); the model tracks shapes itself and passes sizes
// explicitly. Integer side inputs (token ids, positions, segment starts,
// target ids) are small and travel as host []int32 slices on every call.
//
// Conventions every implementation follows:
//   - Matrices are row-major and contiguous unless a leading dimension is given.
//   - Forward ops overwrite their outputs.
//   - Backward ops document for each gradient whether they overwrite it or
//     add to it; gradients that can have several sources (the residual
//     stream, weights, embedding tables) are always added to.
//   - A Backend is used by one goroutine at a time; implementations may use
//     any number of goroutines inside a call but return only when done.
//   - A view (View) shares its parent's storage: writes through either are
//     seen by both, it is valid while the parent is, and it is never freed.
//   - Per-sequence KV caches (the incremental forward of learner/model's
//     Inference) are backend tensors of rows kvHeads*headDim wide, row t
//     holding token t's key (after RoPE) or value; ops over a batch of
//     sequences take one cache tensor per sequence and cut the rows of the
//     batch's other tensors with rows: sequence i owns rows
//     rows[i] ≤ r < rows[i+1] (len(rows) == sequences+1, rows[0] == 0).
//
// This package must not import any implementation.
package backend

import "fmt"

// Tensor is an opaque handle to a backend's float32 storage.
type Tensor interface {
	// Len is the number of float32 elements.
	Len() int
}

// Backend is the set of kernels the transformer needs for forward and
// backward passes.
type Backend interface {
	// Name identifies the backend ("cpu", "cuda").
	Name() string

	// Alloc returns a zeroed tensor of n elements.
	Alloc(n int) Tensor
	// Free releases t; t must not be used afterwards.
	Free(t Tensor)
	// Upload copies src into dst (len(src) == dst.Len()).
	Upload(dst Tensor, src []float32)
	// Download copies src into dst (len(dst) == src.Len()).
	Download(dst []float32, src Tensor)
	// Zero sets every element of t to 0.
	Zero(t Tensor)
	// Copy copies src into dst (same length).
	Copy(dst, src Tensor)
	// View returns a tensor of n elements sharing t's elements
	// [off, off+n): scratch buffers sized for the largest batch are used
	// for smaller ones through views of the exact length.
	View(t Tensor, off, n int) Tensor

	// MatMul computes c = alpha*op(a)*op(b) + beta*c where op(a) is m×k
	// and op(b) is k×n, both contiguous. beta == 0 does not read c.
	MatMul(transA, transB bool, m, n, k int, alpha float32, a, b Tensor, beta float32, c Tensor)
	// BatchedMatMul is batch independent MatMuls over strided views:
	// matrix i of a starts at element i*strideA and its rows are lda apart
	// (likewise b and c).
	BatchedMatMul(transA, transB bool, m, n, k int, alpha float32, a Tensor, lda, strideA int, b Tensor, ldb, strideB int, beta float32, c Tensor, ldc, strideC int, batch int)

	// Add sets dst = a + b elementwise (dst may alias a or b).
	Add(dst, a, b Tensor)
	// AddScaled sets dst += alpha*x.
	AddScaled(dst Tensor, alpha float32, x Tensor)
	// Scale sets t *= alpha.
	Scale(t Tensor, alpha float32)
	// Mul sets dst = a * b elementwise (dst may alias a or b).
	Mul(dst, a, b Tensor)
	// AddRowVector adds the cols-vector v to every row of the rows×cols x.
	AddRowVector(x, v Tensor, rows, cols int)
	// SumRows adds the column sums of the rows×cols x to dst (a bias
	// gradient).
	SumRows(dst, x Tensor, rows, cols int)

	// RMSNorm sets out = x / rms(x) * w per row and stores 1/rms in rstd
	// (rows elements) for the backward pass.
	RMSNorm(out, rstd, x, w Tensor, rows, cols int, eps float32)
	// RMSNormBackward adds the gradients with respect to x and w to dx
	// and dw; dw may be nil (a frozen weight).
	RMSNormBackward(dx, dw, dy, x, w, rstd Tensor, rows, cols int)

	// RoPE rotates, in place, each head of x (rows × heads*headDim) by the
	// angle pos[row]*theta^(-2i/headDim) on pairs (i, i+headDim/2), the
	// "rotate half" layout of Hugging Face Llama and Qwen2.
	RoPE(x Tensor, pos []int32, rows, heads, headDim int, theta float64)
	// RoPEBackward maps, in place, the gradient with respect to RoPE's
	// output to the gradient with respect to its input (the inverse
	// rotation).
	RoPEBackward(dx Tensor, pos []int32, rows, heads, headDim int, theta float64)

	// SwiGLU sets out = silu(gate) * up elementwise over n elements.
	SwiGLU(out, gate, up Tensor, n int)
	// SwiGLUBackward overwrites dGate and dUp with the gradients of out.
	SwiGLUBackward(dGate, dUp, dOut, gate, up Tensor, n int)

	// Softmax sets out = softmax(x) over each row of rows×cols.
	Softmax(out, x Tensor, rows, cols int)

	// Attention is causal scaled-dot-product attention with grouped-query
	// heads over batch rows of seqLen tokens. q and out are
	// (batch*seqLen) × (heads*headDim); k and v are
	// (batch*seqLen) × (kvHeads*headDim). Query t of a row attends to keys
	// starts[t] ≤ s ≤ t of the same row, where starts (batch*seqLen
	// entries, as positions inside the row) marks where t's sequence
	// begins: that is how packed sequences and padding are kept apart.
	// lse (batch*heads*seqLen) receives each query's log-sum-exp of scaled
	// scores for the backward pass.
	Attention(out, lse, q, k, v Tensor, starts []int32, batch, seqLen, heads, kvHeads, headDim int)
	// AttentionBackward overwrites dq, dk and dv with the gradients of out.
	AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse Tensor, starts []int32, batch, seqLen, heads, kvHeads, headDim int)

	// WriteKV copies, for each sequence i, its rows of src (cols wide)
	// into dst[i] from row at[i] on: appending a chunk's new keys or values
	// to its sequence's cache, or moving a cache into a larger tensor. src
	// holds exactly those rows: rows[len(dst)]×cols elements.
	WriteKV(dst []Tensor, at []int32, src Tensor, rows []int32, cols int)
	// CachedAttention is causal scaled-dot-product attention with
	// grouped-query heads of each sequence's newest tokens against its KV
	// cache. Sequence i's query rows of q (heads*headDim wide) are its last
	// rows[i+1]-rows[i] tokens; k[i] and v[i] hold its first lens[i] keys
	// and values, the new tokens' included, so query row r attends to keys
	// 0 ≤ s ≤ lens[i] - (rows[i+1] - r). out is laid out as q.
	CachedAttention(out, q Tensor, k, v []Tensor, rows, lens []int32, heads, kvHeads, headDim int)

	// GatherRows sets dst row i = src row idx[i] (cols wide): the
	// embedding lookup, and the selection of positions to score.
	GatherRows(dst, src Tensor, idx []int32, cols int)
	// ScatterAddRows adds src row i to dst row idx[i]; its backward.
	ScatterAddRows(dst, src Tensor, idx []int32, cols int)

	// LogProbs computes, per row of the rows×vocab logits, the log
	// probability of targets[row] (logp), the entropy of the softmax
	// (entropy) and the log-sum-exp (lse, kept for the backward pass).
	LogProbs(logp, entropy, lse, logits Tensor, targets []int32, rows, vocab int)
	// LogProbsBackward overwrites dLogits with the gradient of
	// sum(dLogp*logp + dEntropy*entropy); dEntropy may be nil.
	LogProbsBackward(dLogits, logits, lse, dLogp, dEntropy Tensor, targets []int32, rows, vocab int)
}

// HostMemory is implemented by backends whose tensors live in host memory:
// Host returns the tensor's storage itself, so optimizers and checkpoint code
// can work in place without a copy.
type HostMemory interface {
	Host(t Tensor) []float32
}

// Failer is implemented by backends that can fail (a device: out of
// memory, a failed launch). Their methods return nothing, so the first
// failure is kept: later ops do nothing and downloads read NaN.
type Failer interface {
	Err() error
}

// Err is the failure b kept (Failer), wrapped as a device backend's; nil
// for backends that cannot fail.
func Err(b Backend) error {
	if f, ok := b.(Failer); ok && f.Err() != nil {
		return fmt.Errorf("device backend: %w", f.Err())
	}
	return nil
}
