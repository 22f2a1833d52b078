package model

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/blas"
)

// This file is the incremental (generation) forward pass: the same network
// as Forward, run a few tokens at a time per sequence, with each layer's
// keys and values kept in a per-sequence cache so that earlier tokens are
// never recomputed. It serves the native inference engine. It works on the
// weights in place through backend.HostMemory (the cpu backend) and
// learner/blas; a device backend would need its own cached-attention
// kernel. It keeps no activations and has no backward pass.

// KVCache holds one sequence's attention keys (after RoPE) and values for
// every layer, in the order its tokens went through Inference.Forward.
// Position t of layer l is K[l][t*kvDim:(t+1)*kvDim]. A cache is used by one
// Forward call at a time.
type KVCache struct {
	n      int
	layers int
	kvDim  int
	k, v   [][]float32
}

// NewKVCache returns an empty cache for a sequence of this model.
func (m *Model) NewKVCache() *KVCache {
	c := &m.Config
	return &KVCache{layers: c.NumLayers, kvDim: c.NumKVHeads * c.HeadDim,
		k: make([][]float32, c.NumLayers), v: make([][]float32, c.NumLayers)}
}

// Len is the number of tokens whose keys and values the cache holds: the
// position the sequence's next token takes.
func (c *KVCache) Len() int { return c.n }

// Bytes is the memory the cache's keys and values take.
func (c *KVCache) Bytes() int { return 2 * 4 * c.n * c.kvDim * c.layers }

// Clone returns an independent copy: several samples of one prompt share
// the prompt's prefill this way.
func (c *KVCache) Clone() *KVCache {
	d := &KVCache{n: c.n, layers: c.layers, kvDim: c.kvDim,
		k: make([][]float32, c.layers), v: make([][]float32, c.layers)}
	for l := range c.k {
		d.k[l] = slices.Clone(c.k[l][:c.n*c.kvDim])
		d.v[l] = slices.Clone(c.v[l][:c.n*c.kvDim])
	}
	return d
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
// scratch memory. It is used by one goroutine at a time and reads the
// model's weights at every call, so weights uploaded between calls take
// effect at the next one.
type Inference struct {
	m       *Model
	host    backend.HostMemory
	workers int

	pos                                         []int32
	resid, ln, q, k, v, att, tmp, rstd          []float32
	gate, up, act, lora, last, logits, lastRstd []float32
	scores                                      [][]float32 // attention scores per worker

	cos, sin []float32 // RoPE tables [pos][headDim/2]
}

// NewInference prepares incremental forward passes over m. The model's
// backend must keep tensors in host memory (the cpu backend).
func (m *Model) NewInference() (*Inference, error) {
	h, ok := m.B.(backend.HostMemory)
	if !ok {
		return nil, fmt.Errorf("incremental forward: backend %q does not keep tensors in host memory", m.B.Name())
	}
	w := runtime.GOMAXPROCS(0)
	return &Inference{m: m, host: h, workers: w, scores: make([][]float32, w)}, nil
}

// Forward runs the chunks through the model as one batch, appends their
// keys and values to their caches, and returns the next-token logits after
// each chunk's last token: len(chunks)×vocab values, row i for chunk i,
// valid until the next call. Each cache may appear in one chunk only. On
// error no cache is changed.
func (in *Inference) Forward(chunks []Chunk) ([]float32, error) {
	m, c := in.m, &in.m.Config
	if len(chunks) == 0 {
		return nil, fmt.Errorf("incremental forward: no chunks")
	}
	N := 0
	seen := make(map[*KVCache]bool, len(chunks))
	for i, ch := range chunks {
		switch {
		case ch.Cache == nil:
			return nil, fmt.Errorf("incremental forward: chunk %d: no KV cache", i)
		case ch.Cache.layers != c.NumLayers || ch.Cache.kvDim != c.NumKVHeads*c.HeadDim:
			return nil, fmt.Errorf("incremental forward: chunk %d: KV cache of another model shape", i)
		case len(ch.Tokens) == 0:
			return nil, fmt.Errorf("incremental forward: chunk %d: no tokens", i)
		case seen[ch.Cache]:
			return nil, fmt.Errorf("incremental forward: chunk %d: its KV cache is already used by another chunk of the batch", i)
		case ch.Cache.n+len(ch.Tokens) > c.MaxPositions:
			return nil, fmt.Errorf("incremental forward: chunk %d: positions up to %d exceed max_position_embeddings %d", i, ch.Cache.n+len(ch.Tokens)-1, c.MaxPositions)
		}
		seen[ch.Cache] = true
		for j, t := range ch.Tokens {
			if t < 0 || int(t) >= c.VocabSize {
				return nil, fmt.Errorf("incremental forward: chunk %d: token %d: id %d out of range [0, %d)", i, j, t, c.VocabSize)
			}
		}
		N += len(ch.Tokens)
	}
	h, hd := c.HiddenSize, c.HeadDim
	qd, kd, I := c.NumHeads*hd, c.NumKVHeads*hd, c.IntermediateSize
	in.pos = grow(in.pos, N)
	in.resid, in.ln, in.tmp = grow(in.resid, N*h), grow(in.ln, N*h), grow(in.tmp, N*h)
	in.q, in.att = grow(in.q, N*qd), grow(in.att, N*qd)
	in.k, in.v = grow(in.k, N*kd), grow(in.v, N*kd)
	in.gate, in.up, in.act = grow(in.gate, N*I), grow(in.up, N*I), grow(in.act, N*I)
	in.rstd = grow(in.rstd, N)

	embed := in.host.Host(m.Embed.W)
	maxPos := 0
	row := 0
	for _, ch := range chunks {
		for j, t := range ch.Tokens {
			p := ch.Cache.n + j
			in.pos[row] = int32(p)
			maxPos = max(maxPos, p)
			copy(in.resid[row*h:(row+1)*h], embed[int(t)*h:(int(t)+1)*h])
			row++
		}
	}
	in.ropeTables(maxPos + 1)
	eps := float32(c.RMSNormEps)
	for li, l := range m.Layers {
		in.rmsNorm(in.ln, in.rstd, in.resid, in.host.Host(l.InputNorm.W), N, h, eps)
		in.linear(in.q, in.ln, l.Attn.Q, N)
		in.linear(in.k, in.ln, l.Attn.K, N)
		in.linear(in.v, in.ln, l.Attn.V, N)
		in.rope(in.q, N, c.NumHeads)
		in.rope(in.k, N, c.NumKVHeads)
		row := 0
		for _, ch := range chunks {
			kv := ch.Cache
			n := len(ch.Tokens)
			kv.k[li] = append(kv.k[li][:kv.n*kd], in.k[row*kd:(row+n)*kd]...)
			kv.v[li] = append(kv.v[li][:kv.n*kd], in.v[row*kd:(row+n)*kd]...)
			row += n
		}
		in.attention(chunks, li)
		in.linear(in.tmp, in.att, l.Attn.O, N)
		addTo(in.resid[:N*h], in.tmp[:N*h])
		in.rmsNorm(in.ln, in.rstd, in.resid, in.host.Host(l.PostNorm.W), N, h, eps)
		in.linear(in.gate, in.ln, l.MLP.Gate, N)
		in.linear(in.up, in.ln, l.MLP.Up, N)
		in.swiGLU(N * I)
		in.linear(in.tmp, in.act, l.MLP.Down, N)
		addTo(in.resid[:N*h], in.tmp[:N*h])
	}
	for _, ch := range chunks {
		ch.Cache.n += len(ch.Tokens)
	}
	// Only each chunk's last token is scored.
	R := len(chunks)
	in.last, in.lastRstd = grow(in.last, R*h), grow(in.lastRstd, R)
	in.logits = grow(in.logits, R*c.VocabSize)
	row = 0
	for i, ch := range chunks {
		row += len(ch.Tokens)
		copy(in.tmp[i*h:(i+1)*h], in.resid[(row-1)*h:row*h])
	}
	in.rmsNorm(in.last, in.lastRstd, in.tmp, in.host.Host(m.Norm.W), R, h, eps)
	blas.Sgemm(false, true, R, c.VocabSize, h, 1, in.last, h, in.host.Host(m.LMHead.W), h, 0, in.logits, c.VocabSize)
	return in.logits[:R*c.VocabSize], nil
}

// grow returns s with length n, reusing its storage when large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n, n+n/4)
}

func addTo(dst, x []float32) {
	for i, v := range x {
		dst[i] += v
	}
}

// linear sets y = x W^T + b (+ the LoRA term) for rows rows.
func (in *Inference) linear(y, x []float32, l *Linear, rows int) {
	w := in.host.Host(l.Weight.W)
	blas.Sgemm(false, true, rows, l.Out, l.In, 1, x, l.In, w, l.In, 0, y, l.Out)
	if l.Bias != nil {
		b := in.host.Host(l.Bias.W)
		for r := 0; r < rows; r++ {
			addTo(y[r*l.Out:(r+1)*l.Out], b)
		}
	}
	if a := l.LoRA; a != nil {
		in.lora = grow(in.lora, rows*a.Rank)
		blas.Sgemm(false, true, rows, a.Rank, l.In, 1, x, l.In, in.host.Host(a.A.W), l.In, 0, in.lora, a.Rank)
		blas.Sgemm(false, true, rows, l.Out, a.Rank, a.Scaling(), in.lora, a.Rank, in.host.Host(a.B.W), a.Rank, 1, y, l.Out)
	}
}

// rmsNorm is the cpu backend's RMSNorm: the sum of squares in float64.
func (in *Inference) rmsNorm(out, rstd, x, w []float32, rows, cols int, eps float32) {
	in.parallel(rows, 16, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr := x[r*cols : (r+1)*cols]
			var ss float64
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			s := float32(1 / math.Sqrt(ss/float64(cols)+float64(eps)))
			rstd[r] = s
			or := out[r*cols : (r+1)*cols]
			for j, v := range xr {
				or[j] = v * s * w[j]
			}
		}
	})
}

// ropeTables makes cos/sin tables cover positions < n, computed as the cpu
// backend and Hugging Face do (inverse frequencies and their product with
// the position in float32).
func (in *Inference) ropeTables(n int) {
	c := &in.m.Config
	half := c.HeadDim / 2
	if len(in.cos) >= n*half {
		return
	}
	n = min(max(n, 2*len(in.cos)/max(half, 1), 256), max(n, c.MaxPositions))
	in.cos, in.sin = make([]float32, n*half), make([]float32, n*half)
	for i := 0; i < half; i++ {
		inv := float32(1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim)))
		for p := 0; p < n; p++ {
			a := float64(float32(p) * inv)
			in.cos[p*half+i] = float32(math.Cos(a))
			in.sin[p*half+i] = float32(math.Sin(a))
		}
	}
}

// rope rotates each head of x (rows × heads*headDim) by its token's
// position, "rotate half" layout.
func (in *Inference) rope(x []float32, rows, heads int) {
	hd := in.m.Config.HeadDim
	half := hd / 2
	for r := 0; r < rows; r++ {
		p := int(in.pos[r])
		cs, sn := in.cos[p*half:(p+1)*half], in.sin[p*half:(p+1)*half]
		for h := 0; h < heads; h++ {
			v := x[(r*heads+h)*hd : (r*heads+h+1)*hd]
			x1, x2 := v[:half], v[half:]
			for i := 0; i < half; i++ {
				a, b := x1[i], x2[i]
				x1[i] = a*cs[i] - b*sn[i]
				x2[i] = b*cs[i] + a*sn[i]
			}
		}
	}
}

func (in *Inference) swiGLU(n int) {
	g, u, o := in.gate[:n], in.up[:n], in.act[:n]
	in.parallel(n, 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := g[i]
			o[i] = x / (1 + float32(math.Exp(float64(-x)))) * u[i]
		}
	})
}

// attention computes in.att for every chunk's queries from layer li of its
// cache (which already holds the chunk's own keys and values). The work is split by
// (chunk, kv head); a single decoding token scores its whole group of
// query heads with one product.
func (in *Inference) attention(chunks []Chunk, li int) {
	c := &in.m.Config
	hd, nh, nkv := c.HeadDim, c.NumHeads, c.NumKVHeads
	qd, kd, group := nh*hd, nkv*hd, nh/nkv
	scale := float32(1 / math.Sqrt(float64(hd)))
	offs := make([]int, len(chunks))
	need := 0
	row := 0
	for i, ch := range chunks {
		offs[i] = row
		row += len(ch.Tokens)
		need = max(need, max(len(ch.Tokens), group)*(ch.Cache.n+len(ch.Tokens)))
	}
	for w := range in.scores {
		in.scores[w] = grow(in.scores[w], need)
	}
	in.parallelUnits(len(chunks)*nkv, func(worker, u int) {
		ci, kh := u/nkv, u%nkv
		ch := chunks[ci]
		// The cache holds the chunk's keys already; its length is updated
		// after the last layer.
		T, L0 := len(ch.Tokens), ch.Cache.n
		ctx := L0 + T
		Kl, Vl := ch.Cache.k[li][kh*hd:], ch.Cache.v[li][kh*hd:]
		S := in.scores[worker]
		base := offs[ci]
		if T == 1 {
			// The group's query heads are adjacent in the token's row.
			q := in.q[base*qd+kh*group*hd:]
			out := in.att[base*qd+kh*group*hd:]
			blas.Sgemm(false, true, group, ctx, hd, scale, q, hd, Kl, kd, 0, S, ctx)
			for g := 0; g < group; g++ {
				softmaxPrefix(S[g*ctx:(g+1)*ctx], ctx)
			}
			blas.Sgemm(false, false, group, hd, ctx, 1, S, ctx, Vl, kd, 0, out, hd)
			return
		}
		for h := kh * group; h < (kh+1)*group; h++ {
			q := in.q[base*qd+h*hd:]
			out := in.att[base*qd+h*hd:]
			blas.Sgemm(false, true, T, ctx, hd, scale, q, qd, Kl, kd, 0, S, ctx)
			for t := 0; t < T; t++ {
				softmaxPrefix(S[t*ctx:(t+1)*ctx], L0+t+1)
			}
			blas.Sgemm(false, false, T, hd, ctx, 1, S, ctx, Vl, kd, 0, out, qd)
		}
	})
}

// softmaxPrefix replaces row[:n] by its softmax and zeroes the rest (the
// causal mask).
func softmaxPrefix(row []float32, n int) {
	m := float32(math.Inf(-1))
	for _, v := range row[:n] {
		m = max(m, v)
	}
	var s float32
	for j := range row[:n] {
		e := float32(math.Exp(float64(row[j] - m)))
		row[j] = e
		s += e
	}
	inv := 1 / s
	for j := range row[:n] {
		row[j] *= inv
	}
	clear(row[n:])
}

// parallel runs fn over [0, n) in contiguous chunks of at least grain items,
// one per worker.
func (in *Inference) parallel(n, grain int, fn func(lo, hi int)) {
	w := min(in.workers, (n+grain-1)/grain)
	if w <= 1 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	var wg sync.WaitGroup
	chunk := (n + w - 1) / w
	for lo := 0; lo < n; lo += chunk {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, min(lo+chunk, n))
	}
	wg.Wait()
}

// parallelUnits runs fn(worker, u) for every u < n, the workers claiming
// units one at a time so that uneven units balance out.
func (in *Inference) parallelUnits(n int, fn func(worker, u int)) {
	w := min(in.workers, n)
	if w <= 1 {
		for u := 0; u < n; u++ {
			fn(0, u)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for worker := 0; worker < w; worker++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				u := int(next.Add(1) - 1)
				if u >= n {
					return
				}
				fn(worker, u)
			}
		}()
	}
	wg.Wait()
}
