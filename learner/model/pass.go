package model

import (
	"fmt"

	"github.com/rlnode/rlnode/learner/backend"
)

// pass holds the activations of one forward pass, kept for the backward
// pass, and the backward scratch buffers. It is reused while batch shapes
// repeat.
type pass struct {
	N, M int  // tokens, scored outputs
	ckpt bool // one set of layer activations, recomputed by backward
	// bf16: one set of layer activations (1/rms and log-sum-exp apart),
	// each layer's large ones kept in stash as bf16 (the last layer's
	// stay where they are).
	bf16   bool
	stash  [][10]backend.Tensor
	batch  *Batch
	resid  []backend.Tensor // NumLayers+1 residual streams, N×hidden
	layers []layerActs
	tmp    backend.Tensor // N×hidden
	recomp backend.Tensor // N×hidden: a recomputed layer's output, unused
	lnf    backend.Tensor // final norm output, N×hidden
	rstdf  backend.Tensor
	hsel   backend.Tensor // lnf rows at Outputs, M×hidden
	logits backend.Tensor // M×vocab
	logp   backend.Tensor // M
	ent    backend.Tensor // M
	lse    backend.Tensor // M
	values backend.Tensor // M, the value head's; nil without one
	g      grads
	dlnf   backend.Tensor // N×hidden
	dhsel  backend.Tensor // M×hidden
	dlog   backend.Tensor // M×vocab
	dlogp  backend.Tensor // M
	dent   backend.Tensor // M
	dval   backend.Tensor // M, nil without a value head
	all    []backend.Tensor
	// gradsFinal, when set (by Trainer, on a step's last micro-batch), is
	// called as backward finishes the gradients of GradGroups' group k.
	gradsFinal func(k int)
}

func (m *Model) newPass(N, M int) *pass {
	c := &m.Config
	b := m.B
	p := &pass{N: N, M: M}
	alloc := func(n int) backend.Tensor {
		t := b.Alloc(n)
		p.all = append(p.all, t)
		return t
	}
	h, qd, kd, I := c.HiddenSize, c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim, c.IntermediateSize
	for i := 0; i <= c.NumLayers; i++ {
		p.resid = append(p.resid, alloc(N*h))
	}
	p.layers = make([]layerActs, c.NumLayers)
	p.ckpt = m.CheckpointActivations
	p.bf16 = m.storesBF16()
	for i, l := range m.Layers {
		a := &p.layers[i]
		if (p.ckpt || p.bf16) && i > 0 {
			// Every layer shares layer 0's tensors (its LoRA ones apart).
			*a = p.layers[0]
			if p.bf16 {
				a.rstd1, a.lse, a.rstd2 = alloc(N), alloc(N*c.NumHeads), alloc(N)
			}
		} else {
			a.ln1, a.rstd1 = alloc(N*h), alloc(N)
			a.q, a.k, a.v = alloc(N*qd), alloc(N*kd), alloc(N*kd)
			a.att, a.lse = alloc(N*qd), alloc(N*c.NumHeads)
			a.resid2, a.ln2, a.rstd2 = alloc(N*h), alloc(N*h), alloc(N)
			a.gate, a.up, a.act = alloc(N*I), alloc(N*I), alloc(N*I)
		}
		a.lora = map[*Linear]*loraActs{}
		for _, lin := range l.linears() {
			if lin.LoRA == nil {
				continue
			}
			la := &loraActs{xa: alloc(N * lin.LoRA.Rank), dxa: alloc(N * lin.LoRA.Rank)}
			if lin.LoRA.Dropout > 0 {
				la.mask, la.xd, la.tmp = alloc(N*lin.In), alloc(N*lin.In), alloc(N*lin.In)
			}
			a.lora[lin] = la
		}
	}
	p.tmp, p.lnf, p.rstdf = alloc(N*h), alloc(N*h), alloc(N)
	if p.ckpt {
		p.recomp = alloc(N * h)
	}
	if p.bf16 {
		st := b.(backend.BF16Storage)
		p.stash = make([][10]backend.Tensor, c.NumLayers-1)
		for i := range p.stash {
			for k, t := range p.layers[0].large() {
				x := st.AllocBF16(t.Len())
				p.all = append(p.all, x)
				p.stash[i][k] = x
			}
		}
	}
	p.hsel, p.logits = alloc(M*h), alloc(M*c.VocabSize)
	p.logp, p.ent, p.lse = alloc(M), alloc(M), alloc(M)
	if m.Value != nil {
		p.values = alloc(M)
	}
	return p
}

// grads allocates the backward buffers on first use, so forward-only
// models (the reference policy, inference) never hold them.
func (p *pass) allocGrads(m *Model) {
	if p.g.dres != nil {
		return
	}
	c := &m.Config
	alloc := func(n int) backend.Tensor {
		t := m.B.Alloc(n)
		p.all = append(p.all, t)
		return t
	}
	N, M := p.N, p.M
	h, qd, kd, I := c.HiddenSize, c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim, c.IntermediateSize
	p.g = grads{
		dres: alloc(N * h), dln: alloc(N * h),
		dq: alloc(N * qd), dk: alloc(N * kd), dv: alloc(N * kd), dat: alloc(N * qd),
		dgate: alloc(N * I), dup: alloc(N * I), dact: alloc(N * I),
	}
	p.dlnf, p.dhsel, p.dlog = alloc(N*h), alloc(M*h), alloc(M*c.VocabSize)
	p.dlogp, p.dent = alloc(M), alloc(M)
	if m.Value != nil {
		p.dval = alloc(M)
	}
}

// storesBF16 says whether a pass keeps layer activations as bf16.
func (m *Model) storesBF16() bool {
	_, ok := m.B.(backend.BF16Storage)
	return m.ActivationsBF16 && !m.CheckpointActivations && ok && len(m.Layers) > 1
}

func (p *pass) free(b backend.Backend) {
	for _, t := range p.all {
		b.Free(t)
	}
}

// Forward runs the model over the batch and returns the log probability
// and the entropy of the next-token distribution at each of the batch's
// scored outputs (laid out as bt.Outputs; bt.Split cuts them per sequence).
// Activations are kept for Backward.
func (m *Model) Forward(bt *Batch) (logp, entropy []float32, err error) {
	c := &m.Config
	if err := m.checkBatch(bt); err != nil {
		return nil, nil, err
	}
	N, M := bt.Rows*bt.SeqLen, len(bt.Outputs)
	if _, ok := m.B.(backend.BF16Storage); m.ActivationsBF16 && !ok {
		return nil, nil, fmt.Errorf("forward: bf16 activations: the %s backend cannot store bf16 tensors", m.B.Name())
	}
	if p := m.pass; p == nil || p.N != N || p.M != M || p.ckpt != m.CheckpointActivations || p.bf16 != m.storesBF16() {
		if p != nil {
			p.free(m.B)
		}
		m.pass = m.newPass(N, M)
	}
	p := m.pass
	p.batch = bt
	b := m.B
	h := c.HiddenSize
	m.drawDropout(p, N)
	b.GatherRows(p.resid[0], m.Embed.W, bt.Tokens, h)
	for i, l := range m.Layers {
		l.Forward(m, p.resid[i+1], p.resid[i], &p.layers[i], bt, p.tmp)
		if p.bf16 && i < len(p.stash) {
			st := b.(backend.BF16Storage)
			for k, t := range p.layers[i].large() {
				st.ToBF16(p.stash[i][k], t)
			}
		}
	}
	b.RMSNorm(p.lnf, p.rstdf, p.resid[c.NumLayers], m.Norm.W, N, h, float32(c.RMSNormEps))
	if M == 0 {
		if err := backend.Err(b); err != nil {
			return nil, nil, fmt.Errorf("forward: %w", err)
		}
		return nil, nil, nil
	}
	b.GatherRows(p.hsel, p.lnf, bt.Outputs, h)
	b.MatMul(false, true, M, c.VocabSize, h, 1, p.hsel, m.LMHead.W, 0, p.logits)
	b.LogProbs(p.logp, p.ent, p.lse, p.logits, bt.Targets, M, c.VocabSize)
	if v := m.Value; v != nil {
		b.MatMul(false, true, M, 1, h, 1, p.hsel, v.Weight.W, 0, p.values)
		b.AddRowVector(p.values, v.Bias.W, M, 1)
	}
	logp, entropy = make([]float32, M), make([]float32, M)
	b.Download(logp, p.logp)
	b.Download(entropy, p.ent)
	// A device that failed (out of memory, a failed launch) did nothing
	// since and downloaded NaN: its error says why.
	if err := backend.Err(b); err != nil {
		return nil, nil, fmt.Errorf("forward: %w", err)
	}
	return logp, entropy, nil
}

// Logits returns the last Forward's logits at the scored outputs
// (outputs×vocab).
func (m *Model) Logits() []float32 {
	if m.pass == nil {
		return nil
	}
	return m.download(m.pass.logits)
}

func (m *Model) checkBatch(bt *Batch) error {
	N := bt.Rows * bt.SeqLen
	switch {
	case N == 0:
		return fmt.Errorf("forward: empty batch")
	case len(bt.Tokens) != N || len(bt.Positions) != N || len(bt.Starts) != N:
		return fmt.Errorf("forward: batch of %d×%d has %d tokens, %d positions, %d starts", bt.Rows, bt.SeqLen, len(bt.Tokens), len(bt.Positions), len(bt.Starts))
	case len(bt.Outputs) != len(bt.Targets):
		return fmt.Errorf("forward: %d outputs but %d targets", len(bt.Outputs), len(bt.Targets))
	}
	for i, t := range bt.Tokens {
		if t < 0 || int(t) >= m.Config.VocabSize {
			return fmt.Errorf("forward: token %d: id %d out of range [0, %d)", i, t, m.Config.VocabSize)
		}
		if p := bt.Positions[i]; p < 0 || int(p) >= m.Config.MaxPositions {
			return fmt.Errorf("forward: token %d: position %d out of range [0, %d)", i, p, m.Config.MaxPositions)
		}
		if s := bt.Starts[i]; s < 0 || int(s) > i%bt.SeqLen {
			return fmt.Errorf("forward: token %d: sequence start %d after the token", i, s)
		}
	}
	for i, o := range bt.Outputs {
		if o < 0 || int(o) >= N {
			return fmt.Errorf("forward: output %d: token index %d out of range", i, o)
		}
		if t := bt.Targets[i]; t < 0 || int(t) >= m.Config.VocabSize {
			return fmt.Errorf("forward: output %d: target id %d out of range [0, %d)", i, t, m.Config.VocabSize)
		}
	}
	return nil
}

// Backward adds to every trainable parameter's gradient the gradient of
// sum(dLogp*logp + dEntropy*entropy) over the last Forward's outputs.
// dEntropy may be nil. Gradients accumulate across calls (micro-batches)
// until ZeroGrad.
func (m *Model) Backward(dLogp, dEntropy []float32) error {
	p := m.pass
	if p == nil || p.batch == nil {
		return fmt.Errorf("backward: no forward pass to differentiate")
	}
	if len(dLogp) != p.M || (dEntropy != nil && len(dEntropy) != p.M) {
		return fmt.Errorf("backward: %d dLogp and %d dEntropy values for %d outputs", len(dLogp), len(dEntropy), p.M)
	}
	if !finite(dLogp) || (dEntropy != nil && !finite(dEntropy)) {
		return fmt.Errorf("backward: dLoss/dLogProb or dLoss/dEntropy is not finite")
	}
	m.backward(dLogp, dEntropy, nil)
	return nil
}

// backward runs the checked backward pass; nil gradients are zero.
func (m *Model) backward(dLogp, dEntropy, dValues []float32) {
	p := m.pass
	p.allocGrads(m)
	m.allocGrads()
	c := &m.Config
	b := m.B
	bt := p.batch
	N, M, h := p.N, p.M, c.HiddenSize
	if dLogp == nil && dEntropy == nil {
		b.Zero(p.dhsel)
	} else {
		if dLogp != nil {
			b.Upload(p.dlogp, dLogp)
		} else {
			b.Zero(p.dlogp)
		}
		var dent backend.Tensor
		if dEntropy != nil {
			b.Upload(p.dent, dEntropy)
			dent = p.dent
		}
		b.LogProbsBackward(p.dlog, p.logits, p.lse, p.dlogp, dent, bt.Targets, M, c.VocabSize)
		b.MatMul(false, false, M, h, c.VocabSize, 1, p.dlog, m.LMHead.W, 0, p.dhsel)
		if m.LMHead.G != nil {
			b.MatMul(true, false, c.VocabSize, h, M, 1, p.dlog, p.hsel, 1, m.LMHead.G)
		}
	}
	if v := m.Value; v != nil && dValues != nil {
		// V = hsel w^T + b: dhsel += dV w, dw += dV^T hsel, db += sum dV.
		b.Upload(p.dval, dValues)
		if !v.DetachTrunk {
			b.MatMul(false, false, M, h, 1, 1, p.dval, v.Weight.W, 1, p.dhsel)
		}
		if v.Weight.G != nil {
			b.MatMul(true, false, 1, h, M, 1, p.dval, p.hsel, 1, v.Weight.G)
			b.SumRows(v.Bias.G, p.dval, M, 1)
		}
	}
	b.Zero(p.dlnf)
	b.ScatterAddRows(p.dlnf, p.dhsel, bt.Outputs, h)
	b.Zero(p.g.dres)
	b.RMSNormBackward(p.g.dres, m.Norm.G, p.dlnf, p.resid[c.NumLayers], m.Norm.W, p.rstdf, N, h)
	for i := c.NumLayers - 1; i >= 0; i-- {
		if p.ckpt {
			// The layer's activations again, from its input: the same
			// ops on the same values, so the same bits.
			m.Layers[i].Forward(m, p.recomp, p.resid[i], &p.layers[i], bt, p.tmp)
		}
		if p.bf16 && i < len(p.stash) {
			st := b.(backend.BF16Storage)
			for k, t := range p.layers[i].large() {
				st.FromBF16(t, p.stash[i][k])
			}
		}
		m.Layers[i].Backward(m, p.resid[i], &p.layers[i], bt, &p.g)
		if p.gradsFinal != nil {
			p.gradsFinal(c.NumLayers - 1 - i)
		}
	}
	if m.Embed.G != nil {
		b.ScatterAddRows(m.Embed.G, p.g.dres, bt.Tokens, h)
	}
	if p.gradsFinal != nil {
		p.gradsFinal(c.NumLayers)
	}
}

// GradGroups lists the trainable parameters in the order the backward
// pass finishes their gradients: group k < NumLayers is decoder layer
// NumLayers−1−k's (the last layer first), group NumLayers all the others
// (embedding, final norm, lm_head, value head). Those come last because a
// tied embedding's gradient takes the lm_head's contribution first and
// the embedding's at the very end; the untied lm_head and the norm could
// go earlier but are one group's worth of elements, not worth the
// bookkeeping. A group may be empty (a layer without trainable
// parameters). Within a group, parameters keep TrainableParams' order.
func (m *Model) GradGroups() [][]*Param {
	c := &m.Config
	layerOf := map[*Param]int{}
	for i, l := range m.Layers {
		ps := []*Param{l.InputNorm, l.PostNorm}
		for _, lin := range l.linears() {
			ps = append(ps, lin.Weight)
			if lin.Bias != nil {
				ps = append(ps, lin.Bias)
			}
			if lin.LoRA != nil {
				ps = append(ps, lin.LoRA.A, lin.LoRA.B)
			}
		}
		for _, p := range ps {
			layerOf[p] = i
		}
	}
	groups := make([][]*Param, c.NumLayers+1)
	for _, p := range m.TrainableParams() {
		k := c.NumLayers
		if i, ok := layerOf[p]; ok {
			k = c.NumLayers - 1 - i
		}
		groups[k] = append(groups[k], p)
	}
	return groups
}
