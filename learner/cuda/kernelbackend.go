package cuda

import (
	"fmt"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
)

// KernelBackend is backend.Backend with the transformer's own kernels
// (RMSNorm, RoPE, SwiGLU, softmax, attention, KV-cache attention,
// log-probabilities; forward and backward, fp32) run by a Launcher, and the
// rest (GEMMs, element-wise sums, gathers, KV-cache writes) by the CPU
// backend it embeds. Tensors are host memory. With the emulation it checks
// the kernels inside whole forward and backward passes of learner/model on
// any machine; with a Device, on a GPU, at the price of copies around every
// launch. It is a checking tool, not the device-resident training backend.
//
// Backend methods return no errors: the first failed launch is kept in Err
// and every kernel op after it does nothing, so a caller checks Err after
// the pass.
type KernelBackend struct {
	*cpu.Backend
	L     Launcher
	Block int // threads per block; 64 when 0
	// AttnKernels chooses the attention kernels, as DeviceBackend's.
	AttnKernels AttentionKernels
	Err         error
}

// NewKernelBackend returns a KernelBackend launching on l.
func NewKernelBackend(l Launcher) *KernelBackend {
	return &KernelBackend{Backend: cpu.New(), L: l}
}

var _ backend.Backend = (*KernelBackend)(nil)

func (*KernelBackend) Name() string { return "cuda-kernels" }

func host(t backend.Tensor) []float32 {
	if t == nil {
		return nil
	}
	c, ok := t.(cpu.Tensor)
	if !ok {
		panic(fmt.Sprintf("cuda kernel backend: foreign tensor %T", t))
	}
	return c
}

func (k *KernelBackend) block() Dim3 {
	if k.Block == 0 {
		return D1(64)
	}
	return D1(k.Block)
}

// warpGrid is the grid giving one warp to each of n items.
func (k *KernelBackend) warpGrid(n int) Dim3 { return blocks(n, k.block().X/32) }

func blocks(n, per int) Dim3 { return D1(max(1, (n+per-1)/per)) }

func (k *KernelBackend) launch(kernel string, grid Dim3, args ...any) {
	k.launchIn(kernel, grid, k.block(), args...)
}

// launchIn launches with a block of the kernel's own size.
func (k *KernelBackend) launchIn(kernel string, grid, block Dim3, args ...any) {
	if k.Err != nil || grid.X <= 0 { // an empty op: nothing to launch
		return
	}
	if err := k.L.Launch(kernel, grid, block, args...); err != nil {
		k.Err = err
	}
}

func (k *KernelBackend) RMSNorm(out, rstd, x, w backend.Tensor, rows, cols int, eps float32) {
	k.launch("rmsnorm_fwd_f32", D1(rows), host(out)[:rows*cols], host(rstd)[:rows], host(x)[:rows*cols], host(w)[:cols], int32(rows), int32(cols), eps)
}

func (k *KernelBackend) RMSNormBackward(dx, dw, dy, x, w, rstd backend.Tensor, rows, cols int) {
	n := rows * cols
	k.launch("rmsnorm_bwd_dx_f32", D1(rows), host(dx)[:n], host(dy)[:n], host(x)[:n], host(w)[:cols], host(rstd)[:rows], int32(rows), int32(cols))
	if dw != nil && rows > 0 {
		per, chunks, grid := colChunks(rows, cols, k.block().X)
		part := make([]float32, chunks*cols)
		k.launch("rmsnorm_bwd_dw_part_f32", grid, part, host(dy)[:n], host(x)[:n], host(rstd)[:rows], int32(rows), int32(cols), int32(per))
		k.launch("sum_rows_finish_f32", blocks(cols, k.block().X), host(dw)[:cols], part, int32(chunks), int32(cols))
	}
}

func (k *KernelBackend) rope(x backend.Tensor, pos []int32, rows, heads, headDim int, theta float64, sign float32) {
	n := rows * heads * headDim / 2
	k.launch("rope_f32", blocks(n, k.block().X), host(x)[:rows*heads*headDim], pos[:rows], int32(rows), int32(heads), int32(headDim), theta, sign)
}

func (k *KernelBackend) RoPE(x backend.Tensor, pos []int32, rows, heads, headDim int, theta float64) {
	k.rope(x, pos, rows, heads, headDim, theta, 1)
}

func (k *KernelBackend) RoPEBackward(dx backend.Tensor, pos []int32, rows, heads, headDim int, theta float64) {
	k.rope(dx, pos, rows, heads, headDim, theta, -1)
}

func (k *KernelBackend) SwiGLU(out, gate, up backend.Tensor, n int) {
	k.launch("swiglu_fwd_f32", blocks(n, k.block().X), host(out)[:n], host(gate)[:n], host(up)[:n], int64(n))
}

func (k *KernelBackend) SwiGLUBackward(dGate, dUp, dOut, gate, up backend.Tensor, n int) {
	k.launch("swiglu_bwd_f32", blocks(n, k.block().X), host(dGate)[:n], host(dUp)[:n], host(dOut)[:n], host(gate)[:n], host(up)[:n], int64(n))
}

func (k *KernelBackend) Softmax(out, x backend.Tensor, rows, cols int) {
	k.launch("softmax_f32", D1(rows), host(out)[:rows*cols], host(x)[:rows*cols], int32(rows), int32(cols))
}

func (k *KernelBackend) Attention(out, lse, q, kk, v backend.Tensor, starts []int32, batch, seqLen, heads, kvHeads, headDim int) {
	nq, nk, nl := batch*seqLen*heads*headDim, batch*seqLen*kvHeads*headDim, batch*heads*seqLen
	if nl == 0 {
		return
	}
	st := starts[:batch*seqLen]
	pl := planAttention(k.AttnKernels, "f32", false, st, batch, seqLen, heads, kvHeads, headDim, int(k.block().X))
	k.launchIn(pl.fwd, pl.fwdGrid, pl.block, host(out)[:nq], host(lse)[:nl], host(q)[:nq], host(kk)[:nk], host(v)[:nk], st,
		int32(batch), int32(seqLen), int32(heads), int32(kvHeads), int32(headDim))
}

func (k *KernelBackend) AttentionBackward(dq, dk, dv, dOut, q, kk, v, out, lse backend.Tensor, starts []int32, batch, seqLen, heads, kvHeads, headDim int) {
	nq, nk, nl := batch*seqLen*heads*headDim, batch*seqLen*kvHeads*headDim, batch*heads*seqLen
	if nl == 0 {
		return
	}
	delta := make([]float32, nl)
	shape := []any{int32(batch), int32(seqLen), int32(heads), int32(kvHeads), int32(headDim)}
	st := starts[:batch*seqLen]
	pl := planAttention(k.AttnKernels, "f32", false, st, batch, seqLen, heads, kvHeads, headDim, int(k.block().X))
	k.launchIn(pl.delta, pl.deltaGrid, pl.deltaBlock, delta, host(dOut)[:nq], host(out)[:nq], int32(batch), int32(seqLen), int32(heads), int32(headDim))
	k.launchIn(pl.dq, pl.dqGrid, pl.block, append([]any{host(dq)[:nq], host(dOut)[:nq], host(q)[:nq], host(kk)[:nk], host(v)[:nk], host(lse)[:nl], delta, st}, shape...)...)
	k.launchIn(pl.dkdv, pl.dkdvGrid, pl.block, append([]any{host(dk)[:nk], host(dv)[:nk], host(dOut)[:nq], host(q)[:nq], host(kk)[:nk], host(v)[:nk], host(lse)[:nl], delta, st}, shape...)...)
}

// CachedAttention gathers the caches into one pool per k and v, as the
// decode kernel takes them.
func (k *KernelBackend) CachedAttention(out, q backend.Tensor, ks, vs []backend.Tensor, rows, lens []int32, heads, kvHeads, headDim int) {
	kd := kvHeads * headDim
	var kpool, vpool []float32
	offs := make([]int64, len(ks))
	for i := range ks {
		n := int(lens[i]) * kd
		offs[i] = int64(len(kpool))
		kpool, vpool = append(kpool, host(ks[i])[:n]...), append(vpool, host(vs[i])[:n]...)
	}
	nrows := int(rows[len(ks)])
	nq := nrows * heads * headDim
	if nrows == 0 {
		return
	}
	k.launch("attn_decode_f32", k.warpGrid(nrows*heads), host(out)[:nq], host(q)[:nq], kpool, vpool, offs, rows, lens, int32(len(ks)), int32(heads), int32(kvHeads), int32(headDim))
}

func (k *KernelBackend) LogProbs(logp, entropy, lse, logits backend.Tensor, targets []int32, rows, vocab int) {
	k.launch("logprobs_fwd_f32", D1(rows), host(logp)[:rows], host(entropy)[:rows], host(lse)[:rows], host(logits)[:rows*vocab], targets[:rows], int32(rows), int32(vocab))
}

func (k *KernelBackend) LogProbsBackward(dLogits, logits, lse, dLogp, dEntropy backend.Tensor, targets []int32, rows, vocab int) {
	var dEnt any = Null{}
	if dEntropy != nil {
		dEnt = host(dEntropy)[:rows]
	}
	k.launch("logprobs_bwd_f32", D1(rows), host(dLogits)[:rows*vocab], host(logits)[:rows*vocab], host(lse)[:rows], host(dLogp)[:rows], dEnt, targets[:rows], int32(rows), int32(vocab))
}
