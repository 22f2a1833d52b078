package cpu

import (
	"math"

	"github.com/rlnode/rlnode/learner/backend"
)

func (b *Backend) RMSNorm(out, rstd, x, w backend.Tensor, rows, cols int, eps float32) {
	O, R, X, W := f(out), f(rstd), f(x), f(w)
	b.parallel(rows, 16, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr := X[r*cols : (r+1)*cols]
			ss := dotf(xr, xr)
			s := float32(1 / math.Sqrt(float64(ss)/float64(cols)+float64(eps)))
			R[r] = s
			rmsScale(O[r*cols:(r+1)*cols], xr, W[:cols], s)
		}
	})
}

// RMSNormBackward: with n = x*s, y = n*w and s = 1/rms,
// dx = s*(dy*w - n*mean(dy*w*n)), dw = sum over rows of dy*n.
func (b *Backend) RMSNormBackward(dx, dw, dy, x, w, rstd backend.Tensor, rows, cols int) {
	DX, DW, DY, X, W, R := f(dx), f(dw), f(dy), f(x), f(w), f(rstd)
	// dx rows are independent; dw sums over rows, so each chunk keeps a
	// partial sum, added in chunk order at the end (the same result
	// whichever worker ran which chunk).
	nc := b.chunks(rows, 16)
	parts, done := b.partials(nc * cols)
	defer done()
	W = W[:cols]
	b.parallelChunks(rows, 16, func(_, c, lo, hi int) {
		part := parts[c*cols : (c+1)*cols]
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := X[r*cols:(r+1)*cols], DY[r*cols:(r+1)*cols], DX[r*cols:(r+1)*cols]
			s := R[r]
			cc := dot3(dyr, W, xr) * s * s / float32(cols)
			rmsBack(dxr, part, dyr, xr, W, s, cc)
		}
	})
	if DW == nil {
		return
	}
	DW = DW[:cols]
	for c := 0; c < nc; c++ {
		addTo(DW, parts[c*cols:(c+1)*cols])
	}
}

type ropeKey struct {
	headDim int
	theta   float64
}

type ropeTable struct {
	cos, sin []float32 // [pos][headDim/2]
}

// rope returns cos/sin tables covering positions < n, growing them on demand.
func (b *Backend) rope(headDim int, theta float64, n int) *ropeTable {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ropes == nil {
		b.ropes = map[ropeKey]*ropeTable{}
	}
	key := ropeKey{headDim, theta}
	half := headDim / 2
	t := b.ropes[key]
	if t != nil && len(t.cos) >= n*half {
		return t
	}
	n = max(n, 1024)
	t = &ropeTable{cos: make([]float32, n*half), sin: make([]float32, n*half)}
	for i := 0; i < half; i++ {
		// Same order of operations as HF: inv_freq in float32, then the
		// product with the position in float32.
		inv := float32(1 / math.Pow(theta, float64(2*i)/float64(headDim)))
		for p := 0; p < n; p++ {
			a := float64(float32(p) * inv)
			t.cos[p*half+i] = float32(math.Cos(a))
			t.sin[p*half+i] = float32(math.Sin(a))
		}
	}
	b.ropes[key] = t
	return t
}

func (b *Backend) RoPE(x backend.Tensor, pos []int32, rows, heads, headDim int, theta float64) {
	b.rotate(f(x), pos, rows, heads, headDim, theta, 1)
}

func (b *Backend) RoPEBackward(dx backend.Tensor, pos []int32, rows, heads, headDim int, theta float64) {
	b.rotate(f(dx), pos, rows, heads, headDim, theta, -1)
}

// rotate applies (x1, x2) → (x1 cos - x2 sin, x2 cos + x1 sin) with sin
// negated for the inverse.
func (b *Backend) rotate(X []float32, pos []int32, rows, heads, headDim int, theta float64, sign float32) {
	maxPos := int32(0)
	for _, p := range pos[:rows] {
		maxPos = max(maxPos, p)
	}
	t := b.rope(headDim, theta, int(maxPos)+1)
	half := headDim / 2
	b.parallel(rows, 8, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			p := int(pos[r])
			cs, sn := t.cos[p*half:(p+1)*half], t.sin[p*half:(p+1)*half]
			ropeRow(X[r*heads*headDim:(r+1)*heads*headDim], cs, sn, heads, sign)
		}
	})
}

func sigmoid(x float32) float32 { return 1 / (1 + expf(-x)) }

func (b *Backend) SwiGLU(out, gate, up backend.Tensor, n int) {
	O, G, U := f(out), f(gate), f(up)
	b.parallel(n, elemGrain, func(lo, hi int) {
		swiglu(O[lo:hi], G[lo:hi], U[lo:hi])
	})
}

// SwiGLUBackward: d silu(g)/dg = sig(g) * (1 + g*(1 - sig(g))).
func (b *Backend) SwiGLUBackward(dGate, dUp, dOut, gate, up backend.Tensor, n int) {
	DG, DU, DO, G, U := f(dGate), f(dUp), f(dOut), f(gate), f(up)
	b.parallel(n, elemGrain, func(lo, hi int) {
		swigluBack(DG[lo:hi], DU[lo:hi], DO[lo:hi], G[lo:hi], U[lo:hi])
	})
}

func (b *Backend) Softmax(out, x backend.Tensor, rows, cols int) {
	O, X := f(out), f(x)
	b.parallel(rows, 4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			softmaxRow(O[r*cols:(r+1)*cols], X[r*cols:(r+1)*cols])
		}
	})
}

// softmaxRow writes softmax(x) to o and returns log-sum-exp(x).
func softmaxRow(o, x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	var s float64
	for j, v := range x {
		e := expf(v - m)
		o[j] = e
		s += float64(e)
	}
	inv := float32(1 / s)
	for j := range o {
		o[j] *= inv
	}
	return m + float32(math.Log(s))
}

// LogProbs: logp = z[t] - lse; entropy = lse - sum p*z.
func (b *Backend) LogProbs(logp, entropy, lse, logits backend.Tensor, targets []int32, rows, vocab int) {
	LP, EN, L, Z := f(logp), f(entropy), f(lse), f(logits)
	bufs, done := b.scratch(vocab)
	defer done()
	b.parallelChunks(rows, 1, func(worker, _, lo, hi int) {
		e := bufs[worker][:vocab]
		for r := lo; r < hi; r++ {
			z := Z[r*vocab : (r+1)*vocab]
			m := maxOf(z)
			s, sz := expSubDot(e, z, m)
			ls := math.Log(float64(s))
			L[r] = m + float32(ls)
			LP[r] = z[targets[r]] - L[r]
			EN[r] = float32(ls - float64(sz)/float64(s))
		}
	})
}

// LogProbsBackward: d logp/dz = onehot - p; d entropy/dz = -p*(log p + H).
func (b *Backend) LogProbsBackward(dLogits, logits, lse, dLogp, dEntropy backend.Tensor, targets []int32, rows, vocab int) {
	DZ, Z, L, DLP, DEN := f(dLogits), f(logits), f(lse), f(dLogp), f(dEntropy)
	b.parallel(rows, 1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			z, dz := Z[r*vocab:(r+1)*vocab], DZ[r*vocab:(r+1)*vocab]
			l := L[r]
			g := DLP[r]
			var ge, h float32
			if DEN != nil && DEN[r] != 0 {
				ge = DEN[r]
				var hs float64
				for _, v := range z {
					lp := v - l
					hs -= math.Exp(float64(lp)) * float64(lp)
				}
				h = float32(hs)
			}
			expSub(dz, z, l) // p
			if ge == 0 {
				scal(dz, -g)
			} else {
				for j, v := range z {
					p := dz[j]
					dz[j] = -g*p - ge*p*(v-l+h)
				}
			}
			dz[targets[r]] += g
		}
	})
}
