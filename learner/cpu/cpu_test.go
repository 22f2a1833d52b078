package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

func near(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); !(d <= tol*(1+math.Abs(float64(want[i])))) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestMatMulTransposes(t *testing.T) {
	b := New()
	rng := rand.New(rand.NewPCG(1, 1))
	m, n, k := 7, 5, 9
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			A, B, C := randVec(rng, m*k), randVec(rng, k*n), randVec(rng, m*n)
			want := make([]float32, m*n)
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var s float64
					for p := 0; p < k; p++ {
						av, bv := A[i*k+p], B[p*n+j]
						if ta {
							av = A[p*m+i]
						}
						if tb {
							bv = B[j*k+p]
						}
						s += float64(av) * float64(bv)
					}
					want[i*n+j] = float32(2*s + 0.5*float64(C[i*n+j]))
				}
			}
			got := Tensor(append([]float32(nil), C...))
			b.MatMul(ta, tb, m, n, k, 2, Tensor(A), Tensor(B), 0.5, got)
			near(t, "MatMul", got, want, 1e-5)
			// Batched: two copies side by side give two identical products.
			A2, C2 := Tensor(append(append([]float32(nil), A...), A...)), Tensor(append(append([]float32(nil), C...), C...))
			ldA, ldC := k, n
			if ta {
				ldA = m
			}
			ldB := n
			if tb {
				ldB = k
			}
			b.BatchedMatMul(ta, tb, m, n, k, 2, A2, ldA, m*k, Tensor(B), ldB, 0, 0.5, C2, ldC, m*n, 2)
			near(t, "BatchedMatMul[0]", C2[:m*n], want, 1e-5)
			near(t, "BatchedMatMul[1]", C2[m*n:], want, 1e-5)
		}
	}
}

// refAttention is causal attention with sequence starts in float64.
func refAttention(q, k, v []float32, starts []int32, batch, T, H, KV, D int) []float64 {
	out := make([]float64, batch*T*H*D)
	for r := 0; r < batch; r++ {
		for h := 0; h < H; h++ {
			kh := h / (H / KV)
			for i := 0; i < T; i++ {
				s0 := int(starts[r*T+i])
				w := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := s0; j <= i; j++ {
					var d float64
					for x := 0; x < D; x++ {
						d += float64(q[((r*T+i)*H+h)*D+x]) * float64(k[((r*T+j)*KV+kh)*D+x])
					}
					w[j] = d / math.Sqrt(float64(D))
					mx = max(mx, w[j])
				}
				var sum float64
				for j := s0; j <= i; j++ {
					w[j] = math.Exp(w[j] - mx)
					sum += w[j]
				}
				for j := s0; j <= i; j++ {
					for x := 0; x < D; x++ {
						out[((r*T+i)*H+h)*D+x] += w[j] / sum * float64(v[((r*T+j)*KV+kh)*D+x])
					}
				}
			}
		}
	}
	return out
}

func TestAttentionPackedGQA(t *testing.T) {
	b := New()
	rng := rand.New(rand.NewPCG(2, 2))
	// 2 rows of 70 tokens (more than one query block); row 0 holds two
	// sequences (starts at 0 and 40), row 1 one sequence then padding.
	batch, T, H, KV, D := 2, 70, 4, 2, 8
	starts := make([]int32, batch*T)
	for i := 0; i < T; i++ {
		if i >= 40 {
			starts[i] = 40
		}
		if i >= 65 {
			starts[T+i] = 65
		}
	}
	q, k, v := randVec(rng, batch*T*H*D), randVec(rng, batch*T*KV*D), randVec(rng, batch*T*KV*D)
	out, lse := make(Tensor, len(q)), make(Tensor, batch*H*T)
	b.Attention(out, lse, Tensor(q), Tensor(k), Tensor(v), starts, batch, T, H, KV, D)
	want := refAttention(q, k, v, starts, batch, T, H, KV, D)
	w32 := make([]float32, len(want))
	for i := range want {
		w32[i] = float32(want[i])
	}
	near(t, "attention", out, w32, 1e-5)

	// Backward against central differences of the float64 reference.
	dOut := randVec(rng, len(q))
	loss := func() float64 {
		o := refAttention(q, k, v, starts, batch, T, H, KV, D)
		var s float64
		for i := range o {
			s += o[i] * float64(dOut[i])
		}
		return s
	}
	dq, dk, dv := make(Tensor, len(q)), make(Tensor, len(k)), make(Tensor, len(v))
	b.AttentionBackward(dq, dk, dv, Tensor(dOut), Tensor(q), Tensor(k), Tensor(v), out, lse, starts, batch, T, H, KV, D)
	for _, c := range []struct {
		name string
		x    []float32
		g    Tensor
	}{{"dq", q, dq}, {"dk", k, dk}, {"dv", v, dv}} {
		for n := 0; n < 12; n++ {
			i := rng.IntN(len(c.x))
			orig := c.x[i]
			const h = 1e-2
			c.x[i] = orig + h
			lp := loss()
			c.x[i] = orig - h
			lm := loss()
			c.x[i] = orig
			fd := (lp - lm) / (2 * h)
			if math.Abs(fd-float64(c.g[i])) > 1e-3*(1+math.Abs(fd)) {
				t.Errorf("%s[%d] = %v, finite difference %v", c.name, i, c.g[i], fd)
			}
		}
	}
}

// checkGrad compares an analytic gradient with central differences of a
// float64-accumulated scalar function of x.
func checkGrad(t *testing.T, name string, x []float32, grad []float32, f func() float64, tol float64) {
	t.Helper()
	for i := range x {
		orig := x[i]
		const h = 1e-2
		x[i] = orig + h
		lp := f()
		x[i] = orig - h
		lm := f()
		x[i] = orig
		fd := (lp - lm) / (2 * h)
		if math.Abs(fd-float64(grad[i])) > tol*(1+math.Abs(fd)) {
			t.Errorf("%s[%d] = %v, finite difference %v", name, i, grad[i], fd)
		}
	}
}

func dot(a []float32, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func TestElementwiseBackward(t *testing.T) {
	b := New()
	rng := rand.New(rand.NewPCG(3, 3))
	rows, cols := 3, 10

	t.Run("rmsnorm", func(t *testing.T) {
		x, w, dy := randVec(rng, rows*cols), randVec(rng, cols), randVec(rng, rows*cols)
		out, rstd := make(Tensor, rows*cols), make(Tensor, rows)
		f := func() float64 {
			b.RMSNorm(out, rstd, Tensor(x), Tensor(w), rows, cols, 1e-6)
			return dot(out, dy)
		}
		f()
		dx, dw := make(Tensor, rows*cols), make(Tensor, cols)
		dx[0] = 5 // backward adds to dx
		b.RMSNormBackward(dx, dw, Tensor(dy), Tensor(x), Tensor(w), rstd, rows, cols)
		dx[0] -= 5
		checkGrad(t, "dx", x, dx, f, 2e-3)
		checkGrad(t, "dw", w, dw, f, 2e-3)
	})
	t.Run("swiglu", func(t *testing.T) {
		n := 20
		g, u, dy := randVec(rng, n), randVec(rng, n), randVec(rng, n)
		out := make(Tensor, n)
		f := func() float64 { b.SwiGLU(out, Tensor(g), Tensor(u), n); return dot(out, dy) }
		dg, du := make(Tensor, n), make(Tensor, n)
		b.SwiGLUBackward(dg, du, Tensor(dy), Tensor(g), Tensor(u), n)
		checkGrad(t, "dgate", g, dg, f, 2e-3)
		checkGrad(t, "dup", u, du, f, 2e-3)
	})
	t.Run("rope", func(t *testing.T) {
		heads, hd := 2, 6
		pos := []int32{0, 3, 17}
		x, dy := randVec(rng, rows*heads*hd), randVec(rng, rows*heads*hd)
		orig := append([]float32(nil), x...)
		f := func() float64 {
			y := Tensor(append([]float32(nil), x...))
			b.RoPE(y, pos, rows, heads, hd, 10000)
			return dot(y, dy)
		}
		g := Tensor(append([]float32(nil), dy...))
		b.RoPEBackward(g, pos, rows, heads, hd, 10000)
		checkGrad(t, "dx", x, g, f, 2e-3)
		// Position 0 is the identity; rotation keeps norms.
		y := Tensor(append([]float32(nil), x...))
		b.RoPE(y, pos, rows, heads, hd, 10000)
		near(t, "pos 0", y[:heads*hd], orig[:heads*hd], 0)
		if math.Abs(dot(y, y)-dot(orig, orig)) > 1e-4*dot(orig, orig) {
			t.Error("RoPE changed the norm")
		}
	})
	t.Run("logprobs", func(t *testing.T) {
		vocab := 7
		z := randVec(rng, rows*vocab)
		targets := []int32{0, 6, 3}
		wl, we := randVec(rng, rows), randVec(rng, rows)
		logp, ent, lse := make(Tensor, rows), make(Tensor, rows), make(Tensor, rows)
		f := func() float64 {
			b.LogProbs(logp, ent, lse, Tensor(z), targets, rows, vocab)
			return dot(logp, wl) + dot(ent, we)
		}
		f()
		// Against a float64 softmax.
		for r := 0; r < rows; r++ {
			var s float64
			for _, v := range z[r*vocab : (r+1)*vocab] {
				s += math.Exp(float64(v))
			}
			var h float64
			for _, v := range z[r*vocab : (r+1)*vocab] {
				p := math.Exp(float64(v)) / s
				h -= p * math.Log(p)
			}
			want := float64(z[r*vocab+int(targets[r])]) - math.Log(s)
			if math.Abs(float64(logp[r])-want) > 1e-6 || math.Abs(float64(ent[r])-h) > 1e-6 {
				t.Errorf("row %d: logp %v ent %v, want %v %v", r, logp[r], ent[r], want, h)
			}
		}
		dz := make(Tensor, rows*vocab)
		b.LogProbsBackward(dz, Tensor(z), lse, Tensor(wl), Tensor(we), targets, rows, vocab)
		checkGrad(t, "dlogits", z, dz, f, 2e-3)
	})
	t.Run("softmax", func(t *testing.T) {
		x := []float32{1, 2, 3, 1000, 1000, -1000}
		out := make(Tensor, 6)
		b.Softmax(out, Tensor(x), 2, 3)
		e := math.Exp(1.0)
		s := 1 + e + e*e
		near(t, "softmax", out, []float32{float32(1 / s), float32(e / s), float32(e * e / s), 0.5, 0.5, 0}, 1e-6)
	})
	t.Run("gather scatter", func(t *testing.T) {
		src := Tensor{1, 2, 3, 4, 5, 6}
		dst := make(Tensor, 6)
		b.GatherRows(dst, src, []int32{2, 0, 2}, 2)
		near(t, "gather", dst, []float32{5, 6, 1, 2, 5, 6}, 0)
		acc := make(Tensor, 6)
		b.ScatterAddRows(acc, dst, []int32{2, 0, 2}, 2)
		near(t, "scatter", acc, []float32{1, 2, 0, 0, 10, 12}, 0)
	})
}
