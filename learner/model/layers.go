package model

import (
	"github.com/rlnode/rlnode/learner/backend"
)

// loraActs are what a LoRA adapter keeps from its forward pass.
type loraActs struct {
	mask backend.Tensor // rows×in dropout mask (scaled), nil without dropout
	xd   backend.Tensor // rows×in dropped input, nil without dropout
	xa   backend.Tensor // rows×rank: xd A^T
	dxa  backend.Tensor // rows×rank scratch for the backward pass
	tmp  backend.Tensor // rows×in scratch for the backward pass with dropout
}

// Forward sets y (rows×Out) = x W^T + b (+ LoRA's scaling * drop(x) A^T B^T).
func (l *Linear) Forward(b backend.Backend, y, x backend.Tensor, rows int, la *loraActs) {
	b.MatMul(false, true, rows, l.Out, l.In, 1, x, l.Weight.W, 0, y)
	if l.Bias != nil {
		b.AddRowVector(y, l.Bias.W, rows, l.Out)
	}
	if l.LoRA != nil {
		a := l.LoRA
		xd := x
		if la.mask != nil {
			b.Mul(la.xd, x, la.mask)
			xd = la.xd
		}
		b.MatMul(false, true, rows, a.Rank, l.In, 1, xd, a.A.W, 0, la.xa)
		b.MatMul(false, true, rows, l.Out, a.Rank, a.Scaling(), la.xa, a.B.W, 1, y)
	}
}

// Backward adds dW = dy^T x and db = sum(dy) to the gradients of unfrozen
// parameters and sets dx = dy W (adds to dx when accumulate). dx may be nil
// when the input gradient is not needed.
func (l *Linear) Backward(b backend.Backend, dx, dy, x backend.Tensor, rows int, accumulate bool, la *loraActs) {
	if l.Weight.G != nil {
		b.MatMul(true, false, l.Out, l.In, rows, 1, dy, x, 1, l.Weight.G)
	}
	if l.Bias != nil && l.Bias.G != nil {
		b.SumRows(l.Bias.G, dy, rows, l.Out)
	}
	if dx != nil {
		beta := float32(0)
		if accumulate {
			beta = 1
		}
		b.MatMul(false, false, rows, l.In, l.Out, 1, dy, l.Weight.W, beta, dx)
	}
	if l.LoRA != nil {
		a := l.LoRA
		s := a.Scaling()
		xd := x
		if la.mask != nil {
			xd = la.xd
		}
		b.MatMul(false, false, rows, a.Rank, l.Out, s, dy, a.B.W, 0, la.dxa)
		b.MatMul(true, false, l.Out, a.Rank, rows, s, dy, la.xa, 1, a.B.G)
		b.MatMul(true, false, a.Rank, l.In, rows, 1, la.dxa, xd, 1, a.A.G)
		if dx != nil {
			if la.mask == nil {
				b.MatMul(false, false, rows, l.In, a.Rank, 1, la.dxa, a.A.W, 1, dx)
			} else {
				b.MatMul(false, false, rows, l.In, a.Rank, 1, la.dxa, a.A.W, 0, la.tmp)
				b.Mul(la.tmp, la.tmp, la.mask)
				b.AddScaled(dx, 1, la.tmp)
			}
		}
	}
}

// layerActs are one decoder layer's saved activations.
type layerActs struct {
	ln1, rstd1    backend.Tensor // input norm output and 1/rms
	q, k, v       backend.Tensor // projections, q and k after RoPE
	att, lse      backend.Tensor // attention output (before o_proj) and its log-sum-exp
	resid2        backend.Tensor // residual stream after attention
	ln2, rstd2    backend.Tensor
	gate, up, act backend.Tensor // MLP: act = silu(gate) * up
	lora          map[*Linear]*loraActs
}

// large are the activations ActivationsBF16 keeps as bf16.
func (a *layerActs) large() [10]backend.Tensor {
	return [10]backend.Tensor{a.ln1, a.q, a.k, a.v, a.att, a.resid2, a.ln2, a.gate, a.up, a.act}
}

// grads are the backward pass's scratch buffers, shared by all layers.
type grads struct {
	dres, dln        backend.Tensor // N×hidden: residual stream, norm output
	dq, dk, dv, dat  backend.Tensor
	dgate, dup, dact backend.Tensor
}

// Forward runs the layer on the residual stream x (N×hidden), writing the
// new stream to out (may not alias x) and saving activations in a.
func (l *Layer) Forward(m *Model, out, x backend.Tensor, a *layerActs, bt *Batch, tmp backend.Tensor) {
	b, c := m.B, &m.Config
	N := bt.Rows * bt.SeqLen
	b.RMSNorm(a.ln1, a.rstd1, x, l.InputNorm.W, N, c.HiddenSize, float32(c.RMSNormEps))
	l.Attn.Q.Forward(b, a.q, a.ln1, N, a.lora[l.Attn.Q])
	l.Attn.K.Forward(b, a.k, a.ln1, N, a.lora[l.Attn.K])
	l.Attn.V.Forward(b, a.v, a.ln1, N, a.lora[l.Attn.V])
	b.RoPE(a.q, bt.Positions, N, c.NumHeads, c.HeadDim, c.RopeTheta)
	b.RoPE(a.k, bt.Positions, N, c.NumKVHeads, c.HeadDim, c.RopeTheta)
	b.Attention(a.att, a.lse, a.q, a.k, a.v, bt.Starts, bt.Rows, bt.SeqLen, c.NumHeads, c.NumKVHeads, c.HeadDim)
	l.Attn.O.Forward(b, tmp, a.att, N, a.lora[l.Attn.O])
	b.Add(a.resid2, x, tmp)
	b.RMSNorm(a.ln2, a.rstd2, a.resid2, l.PostNorm.W, N, c.HiddenSize, float32(c.RMSNormEps))
	l.MLP.Gate.Forward(b, a.gate, a.ln2, N, a.lora[l.MLP.Gate])
	l.MLP.Up.Forward(b, a.up, a.ln2, N, a.lora[l.MLP.Up])
	b.SwiGLU(a.act, a.gate, a.up, N*c.IntermediateSize)
	l.MLP.Down.Forward(b, tmp, a.act, N, a.lora[l.MLP.Down])
	b.Add(out, a.resid2, tmp)
}

// Backward takes g.dres = dLoss/d(layer output) and leaves
// dLoss/d(layer input) in it, adding weight gradients on the way. x is the
// layer's input.
func (l *Layer) Backward(m *Model, x backend.Tensor, a *layerActs, bt *Batch, g *grads) {
	b, c := m.B, &m.Config
	N := bt.Rows * bt.SeqLen
	// MLP: the residual passes dres through; the branch adds to it.
	l.MLP.Down.Backward(b, g.dact, g.dres, a.act, N, false, a.lora[l.MLP.Down])
	b.SwiGLUBackward(g.dgate, g.dup, g.dact, a.gate, a.up, N*c.IntermediateSize)
	l.MLP.Gate.Backward(b, g.dln, g.dgate, a.ln2, N, false, a.lora[l.MLP.Gate])
	l.MLP.Up.Backward(b, g.dln, g.dup, a.ln2, N, true, a.lora[l.MLP.Up])
	b.RMSNormBackward(g.dres, l.PostNorm.G, g.dln, a.resid2, l.PostNorm.W, a.rstd2, N, c.HiddenSize)
	// Attention.
	l.Attn.O.Backward(b, g.dat, g.dres, a.att, N, false, a.lora[l.Attn.O])
	b.AttentionBackward(g.dq, g.dk, g.dv, g.dat, a.q, a.k, a.v, a.att, a.lse, bt.Starts, bt.Rows, bt.SeqLen, c.NumHeads, c.NumKVHeads, c.HeadDim)
	b.RoPEBackward(g.dq, bt.Positions, N, c.NumHeads, c.HeadDim, c.RopeTheta)
	b.RoPEBackward(g.dk, bt.Positions, N, c.NumKVHeads, c.HeadDim, c.RopeTheta)
	l.Attn.Q.Backward(b, g.dln, g.dq, a.ln1, N, false, a.lora[l.Attn.Q])
	l.Attn.K.Backward(b, g.dln, g.dk, a.ln1, N, true, a.lora[l.Attn.K])
	l.Attn.V.Backward(b, g.dln, g.dv, a.ln1, N, true, a.lora[l.Attn.V])
	b.RMSNormBackward(g.dres, l.InputNorm.G, g.dln, x, l.InputNorm.W, a.rstd1, N, c.HiddenSize)
}
