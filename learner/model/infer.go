package model

import (
	"fmt"

	"github.com/rlnode/rlnode/learner/backend"
)

// This file is the incremental (generation) forward pass: the same network
// as Forward, run a few tokens at a time per sequence, with each layer's
// keys and values kept in a per-sequence cache so that earlier tokens are
// never recomputed. It serves the native inference engine. Like the
// training forward it is written against learner/backend only: the caches
// and every activation live in backend tensors, and the host sees token
// ids going in and the logits coming out. It keeps no activations for a
// backward pass and has none.
//
// Not done yet: the caches are one contiguous tensor per layer and
// sequence, grown by doubling and copied when a prompt's samples fork
// (Clone); a paged cache with shared prompt blocks would save both copies.

// KVCache holds one sequence's attention keys (after RoPE) and values for
// every layer, in the order its tokens went through Inference.Forward, in
// backend tensors of the model's backend: row t of layer l's key tensor is
// token t's key (NumKVHeads*HeadDim wide). Capacity grows by doubling. A
// cache is used by one Forward call at a time.
type KVCache struct {
	b      backend.Backend
	n      int // tokens held
	rows   int // tokens the tensors have room for
	layers int
	kvDim  int
	freed  bool
	k, v   []backend.Tensor // per layer, rows*kvDim each; nil while rows == 0
}

// NewKVCache returns an empty cache for a sequence of this model. It takes
// no backend memory until its first tokens arrive.
func (m *Model) NewKVCache() *KVCache {
	c := &m.Config
	return &KVCache{b: m.B, layers: c.NumLayers, kvDim: c.NumKVHeads * c.HeadDim}
}

// Len is the number of tokens whose keys and values the cache holds: the
// position the sequence's next token takes.
func (c *KVCache) Len() int { return c.n }

// Bytes is the memory the cache's keys and values take (the tokens held,
// not the spare capacity).
func (c *KVCache) Bytes() int { return 2 * 4 * c.n * c.kvDim * c.layers }

// Clone returns an independent copy with the same capacity: several
// samples of one prompt share the prompt's prefill this way.
func (c *KVCache) Clone() *KVCache {
	d := &KVCache{b: c.b, layers: c.layers, kvDim: c.kvDim, freed: c.freed}
	if c.freed || c.rows == 0 {
		return d
	}
	d.alloc(c.rows)
	d.copyFrom(c)
	return d
}

// Free releases the cache's backend memory at once (rather than when the
// garbage collector finds it, which a device backend cannot rely on). The
// cache is empty afterwards and Forward refuses it.
func (c *KVCache) Free() {
	c.release()
	c.n, c.freed = 0, true
}

func (c *KVCache) release() {
	for l := range c.k {
		c.b.Free(c.k[l])
		c.b.Free(c.v[l])
	}
	c.k, c.v, c.rows = nil, nil, 0
}

func (c *KVCache) alloc(rows int) {
	c.k, c.v = make([]backend.Tensor, c.layers), make([]backend.Tensor, c.layers)
	for l := range c.k {
		c.k[l], c.v[l] = c.b.Alloc(rows*c.kvDim), c.b.Alloc(rows*c.kvDim)
	}
	c.rows = rows
}

// copyFrom copies src's tokens into c, which has room for them.
func (c *KVCache) copyFrom(src *KVCache) {
	if src.n == 0 {
		c.n = 0
		return
	}
	// WriteKV's source is exactly the rows it copies: the tokens held, not
	// the spare capacity behind them.
	at, rows, n := []int32{0}, []int32{0, int32(src.n)}, src.n*c.kvDim
	for l := range c.k {
		c.b.WriteKV(c.k[l:l+1], at, c.b.View(src.k[l], 0, n), rows, c.kvDim)
		c.b.WriteKV(c.v[l:l+1], at, c.b.View(src.v[l], 0, n), rows, c.kvDim)
	}
	c.n = src.n
}

// reserve makes room for need tokens (at most limit), doubling.
func (c *KVCache) reserve(need, limit int) {
	if need <= c.rows {
		return
	}
	old := *c
	c.alloc(min(max(need, 2*c.rows, 16), max(limit, need)))
	c.copyFrom(&old)
	old.release()
}

// Chunk is the next tokens of one sequence: they take positions
// Cache.Len(), Cache.Len()+1, ... and attend to everything before them.
// A prompt goes in as one chunk (or several), each generated token as a
// chunk of one.
type Chunk struct {
	Cache  *KVCache
	Tokens []int32
}

// Inference runs incremental forward passes of one model and owns their
// scratch tensors, sized for the largest batch so far and used through
// views of the exact size. It is used by one goroutine at a time and reads
// the model's weights at every call, so weights uploaded between calls take
// effect at the next one.
type Inference struct {
	m *Model
	b backend.Backend

	capN, capR, capLoRA int // token rows, chunk rows and LoRA elements the tensors hold
	all                 []backend.Tensor

	resid, ln, q, k, v, att, tmp, rstd, gate, up, act backend.Tensor // capN rows
	last, lastLN, lastRstd, logits                    backend.Tensor // capR rows
	lora                                              backend.Tensor // capLoRA

	// Host side: token ids and positions in, logits out, per-sequence cuts.
	tokens, pos, lastRow, rows, at, lens []int32
	kc, vc                               []backend.Tensor
	hostLogits                           []float32
}

// NewInference prepares incremental forward passes over m on its backend.
func (m *Model) NewInference() (*Inference, error) {
	return &Inference{m: m, b: m.B}, nil
}

// Free releases the scratch tensors; the next Forward allocates them again.
func (in *Inference) Free() {
	for _, t := range in.all {
		in.b.Free(t)
	}
	in.all = nil
	in.capN, in.capR, in.capLoRA = 0, 0, 0
}

// reserve makes the scratch tensors hold N token rows, R chunk rows and
// lora LoRA elements. Capacities never shrink and grow with a quarter
// spare, so that a batch growing by a few sequences, or prefill steps
// alternating with decoding steps, do not reallocate every step.
func (in *Inference) reserve(N, R, lora int) {
	if N <= in.capN && R <= in.capR && lora <= in.capLoRA {
		return
	}
	grown := func(need, have, least int) int {
		if need <= have {
			return have
		}
		return max(need+need/4, least)
	}
	N, R, lora = grown(N, in.capN, 8), grown(R, in.capR, 4), grown(lora, in.capLoRA, 0)
	in.Free()
	c := &in.m.Config
	alloc := func(n int) backend.Tensor {
		t := in.b.Alloc(n)
		in.all = append(in.all, t)
		return t
	}
	h, qd, kd, I := c.HiddenSize, c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim, c.IntermediateSize
	in.resid, in.ln, in.tmp, in.rstd = alloc(N*h), alloc(N*h), alloc(N*h), alloc(N)
	in.q, in.att, in.k, in.v = alloc(N*qd), alloc(N*qd), alloc(N*kd), alloc(N*kd)
	in.gate, in.up, in.act = alloc(N*I), alloc(N*I), alloc(N*I)
	in.last, in.lastLN, in.lastRstd, in.logits = alloc(R*h), alloc(R*h), alloc(R), alloc(R*c.VocabSize)
	if lora > 0 {
		in.lora = alloc(lora)
	}
	in.capN, in.capR, in.capLoRA = N, R, lora
}

// check validates a batch of chunks before anything changes.
func (in *Inference) check(chunks []Chunk) (N int, err error) {
	c := &in.m.Config
	if len(chunks) == 0 {
		return 0, fmt.Errorf("incremental forward: no chunks")
	}
	seen := make(map[*KVCache]bool, len(chunks))
	for i, ch := range chunks {
		switch {
		case ch.Cache == nil:
			return 0, fmt.Errorf("incremental forward: chunk %d: no KV cache", i)
		case ch.Cache.freed:
			return 0, fmt.Errorf("incremental forward: chunk %d: its KV cache was freed", i)
		case ch.Cache.layers != c.NumLayers || ch.Cache.kvDim != c.NumKVHeads*c.HeadDim:
			return 0, fmt.Errorf("incremental forward: chunk %d: KV cache of another model shape", i)
		case ch.Cache.b != in.b:
			return 0, fmt.Errorf("incremental forward: chunk %d: KV cache on another backend than the model's %q", i, in.b.Name())
		case len(ch.Tokens) == 0:
			return 0, fmt.Errorf("incremental forward: chunk %d: no tokens", i)
		case seen[ch.Cache]:
			return 0, fmt.Errorf("incremental forward: chunk %d: its KV cache is already used by another chunk of the batch", i)
		case ch.Cache.n+len(ch.Tokens) > c.MaxPositions:
			return 0, fmt.Errorf("incremental forward: chunk %d: positions up to %d exceed max_position_embeddings %d", i, ch.Cache.n+len(ch.Tokens)-1, c.MaxPositions)
		}
		seen[ch.Cache] = true
		for j, t := range ch.Tokens {
			if t < 0 || int(t) >= c.VocabSize {
				return 0, fmt.Errorf("incremental forward: chunk %d: token %d: id %d out of range [0, %d)", i, j, t, c.VocabSize)
			}
		}
		N += len(ch.Tokens)
	}
	return N, nil
}

// Forward runs the chunks through the model as one batch, appends their
// keys and values to their caches, and returns the next-token logits after
// each chunk's last token: len(chunks)×vocab values, row i for chunk i,
// valid until the next call. Each cache may appear in one chunk only. On
// a refused batch no cache is changed; after a device failure
// (backend.Err) the caches are undefined.
func (in *Inference) Forward(chunks []Chunk) ([]float32, error) {
	N, err := in.trunk(chunks)
	if err != nil {
		return nil, err
	}
	m, b, c := in.m, in.b, &in.m.Config
	R, h, V := len(chunks), c.HiddenSize, c.VocabSize
	view := func(t backend.Tensor, n int) backend.Tensor { return b.View(t, 0, n) }
	eps := float32(c.RMSNormEps)
	// Only each chunk's last token is scored.
	last, lastLN, logits := view(in.last, R*h), view(in.lastLN, R*h), view(in.logits, R*V)
	b.GatherRows(last, view(in.resid, N*h), in.lastRow, h)
	b.RMSNorm(lastLN, view(in.lastRstd, R), last, m.Norm.W, R, h, eps)
	b.MatMul(false, true, R, V, h, 1, lastLN, m.LMHead.W, 0, logits)
	in.hostLogits = grow(in.hostLogits, R*V)
	b.Download(in.hostLogits, logits)
	if err := backend.Err(b); err != nil {
		return nil, err
	}
	return in.hostLogits, nil
}

// MeanHidden runs each token sequence through the model from an empty
// cache and returns, per sequence, the mean over its tokens of the final
// hidden state (after the final RMSNorm): len(seqs)×HiddenSize values,
// row i for seqs[i].
func (in *Inference) MeanHidden(seqs [][]int32) ([]float32, error) {
	chunks := make([]Chunk, len(seqs))
	for i, s := range seqs {
		chunks[i] = Chunk{Tokens: s, Cache: in.m.NewKVCache()}
	}
	defer func() {
		for _, ch := range chunks {
			ch.Cache.Free()
		}
	}()
	N, err := in.trunk(chunks)
	if err != nil {
		return nil, err
	}
	b, c := in.b, &in.m.Config
	h := c.HiddenSize
	ln := b.View(in.ln, 0, N*h)
	b.RMSNorm(ln, b.View(in.rstd, 0, N), b.View(in.resid, 0, N*h), in.m.Norm.W, N, h, float32(c.RMSNormEps))
	host := make([]float32, N*h)
	b.Download(host, ln)
	if err := backend.Err(b); err != nil {
		return nil, err
	}
	out := make([]float32, len(seqs)*h)
	row := 0
	for i, s := range seqs {
		o := out[i*h : (i+1)*h]
		for range s {
			for j, x := range host[row*h : (row+1)*h] {
				o[j] += x
			}
			row++
		}
		for j := range o {
			o[j] /= float32(len(s))
		}
	}
	return out, nil
}

// trunk runs the chunks through every layer, appends their keys and values
// to their caches, and leaves the residual stream of all N token rows in
// in.resid (in.lastRow naming each chunk's last row).
func (in *Inference) trunk(chunks []Chunk) (int, error) {
	N, err := in.check(chunks)
	if err != nil {
		return 0, err
	}
	m, b, c := in.m, in.b, &in.m.Config
	R := len(chunks)
	h, hd := c.HiddenSize, c.HeadDim
	qd, kd, I := c.NumHeads*hd, c.NumKVHeads*hd, c.IntermediateSize
	lora := 0
	for _, l := range m.Layers {
		for _, lin := range l.linears() {
			if lin.LoRA != nil {
				lora = max(lora, N*lin.LoRA.Rank)
			}
		}
	}
	in.reserve(N, R, lora)

	in.tokens, in.pos = grow(in.tokens, N), grow(in.pos, N)
	in.lastRow, in.at, in.lens = grow(in.lastRow, R), grow(in.at, R), grow(in.lens, R)
	in.rows = grow(in.rows, R+1)
	in.kc, in.vc = grow(in.kc, R), grow(in.vc, R)
	in.rows[0] = 0
	row := 0
	for i, ch := range chunks {
		kv := ch.Cache
		for j, t := range ch.Tokens {
			in.tokens[row] = t
			in.pos[row] = int32(kv.n + j)
			row++
		}
		kv.reserve(kv.n+len(ch.Tokens), c.MaxPositions)
		in.rows[i+1] = int32(row)
		in.lastRow[i] = int32(row - 1)
		in.at[i], in.lens[i] = int32(kv.n), int32(kv.n+len(ch.Tokens))
	}

	view := func(t backend.Tensor, n int) backend.Tensor { return b.View(t, 0, n) }
	resid, ln, tmp, rstd := view(in.resid, N*h), view(in.ln, N*h), view(in.tmp, N*h), view(in.rstd, N)
	q, att, k, v := view(in.q, N*qd), view(in.att, N*qd), view(in.k, N*kd), view(in.v, N*kd)
	gate, up, act := view(in.gate, N*I), view(in.up, N*I), view(in.act, N*I)
	linear := func(y, x backend.Tensor, l *Linear) {
		var la *loraActs
		if l.LoRA != nil {
			la = &loraActs{xa: view(in.lora, N*l.LoRA.Rank)}
		}
		l.Forward(b, y, x, N, la)
	}
	eps := float32(c.RMSNormEps)
	b.GatherRows(resid, m.Embed.W, in.tokens, h)
	for li, l := range m.Layers {
		b.RMSNorm(ln, rstd, resid, l.InputNorm.W, N, h, eps)
		linear(q, ln, l.Attn.Q)
		linear(k, ln, l.Attn.K)
		linear(v, ln, l.Attn.V)
		b.RoPE(q, in.pos, N, c.NumHeads, hd, c.RopeTheta)
		b.RoPE(k, in.pos, N, c.NumKVHeads, hd, c.RopeTheta)
		for i, ch := range chunks {
			in.kc[i], in.vc[i] = ch.Cache.k[li], ch.Cache.v[li]
		}
		b.WriteKV(in.kc, in.at, k, in.rows, kd)
		b.WriteKV(in.vc, in.at, v, in.rows, kd)
		b.CachedAttention(att, q, in.kc, in.vc, in.rows, in.lens, c.NumHeads, c.NumKVHeads, hd)
		linear(tmp, att, l.Attn.O)
		b.Add(resid, resid, tmp)
		b.RMSNorm(ln, rstd, resid, l.PostNorm.W, N, h, eps)
		linear(gate, ln, l.MLP.Gate)
		linear(up, ln, l.MLP.Up)
		b.SwiGLU(act, gate, up, N*I)
		linear(tmp, act, l.MLP.Down)
		b.Add(resid, resid, tmp)
	}
	for _, ch := range chunks {
		ch.Cache.n += len(ch.Tokens)
	}
	clear(in.kc)
	clear(in.vc)
	return N, nil
}

// grow returns s with length n, reusing its storage when large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n, n+n/4)
}
