package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// refAttentionBackward is the float64 gradient of sum(out*dOut) for
// refAttention, query by query.
func refAttentionBackward(q, k, v, dOut []float32, starts []int32, batch, T, H, KV, D int) (dq, dk, dv []float64) {
	dq, dk, dv = make([]float64, len(q)), make([]float64, len(k)), make([]float64, len(v))
	sc := 1 / math.Sqrt(float64(D))
	for r := 0; r < batch; r++ {
		for h := 0; h < H; h++ {
			kh := h / (H / KV)
			for i := 0; i < T; i++ {
				qi := ((r*T+i)*H + h) * D
				s0 := int(starts[r*T+i])
				p := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := s0; j <= i; j++ {
					var d float64
					for x := 0; x < D; x++ {
						d += float64(q[qi+x]) * float64(k[((r*T+j)*KV+kh)*D+x])
					}
					p[j] = d * sc
					mx = max(mx, p[j])
				}
				var sum float64
				for j := s0; j <= i; j++ {
					p[j] = math.Exp(p[j] - mx)
					sum += p[j]
				}
				dp := make([]float64, i+1)
				var dsum float64
				for j := s0; j <= i; j++ {
					p[j] /= sum
					vj := ((r*T+j)*KV + kh) * D
					for x := 0; x < D; x++ {
						dp[j] += float64(dOut[qi+x]) * float64(v[vj+x])
						dv[vj+x] += p[j] * float64(dOut[qi+x])
					}
					dsum += p[j] * dp[j]
				}
				for j := s0; j <= i; j++ {
					ds := p[j] * (dp[j] - dsum) * sc
					kj := ((r*T+j)*KV + kh) * D
					for x := 0; x < D; x++ {
						dq[qi+x] += ds * float64(k[kj+x])
						dk[kj+x] += ds * float64(q[qi+x])
					}
				}
			}
		}
	}
	return dq, dk, dv
}

// TestAttentionGroupsMatchReference checks every output and gradient of
// the blocked, head-stacked kernels against the float64 reference for
// multi-head, grouped and multi-query layouts, on packed rows longer than
// one query block.
func TestAttentionGroupsMatchReference(t *testing.T) {
	for _, c := range []struct{ H, KV int }{{2, 2}, {6, 2}, {3, 1}} {
		t.Run(fmt.Sprintf("H%d_KV%d", c.H, c.KV), func(t *testing.T) {
			b := New()
			rng := rand.New(rand.NewPCG(uint64(c.H), uint64(c.KV)))
			batch, T, D := 2, 150, 16
			starts := make([]int32, batch*T)
			for i := 0; i < T; i++ {
				if i >= 70 {
					starts[i] = 70 // row 0: two sequences
				}
				if i >= 140 {
					starts[T+i] = 140 // row 1: one sequence, then padding
				}
			}
			q, k, v := randVec(rng, batch*T*c.H*D), randVec(rng, batch*T*c.KV*D), randVec(rng, batch*T*c.KV*D)
			dOut := randVec(rng, len(q))
			out, lse := make(Tensor, len(q)), make(Tensor, batch*c.H*T)
			b.Attention(out, lse, Tensor(q), Tensor(k), Tensor(v), starts, batch, T, c.H, c.KV, D)
			dq, dk, dv := make(Tensor, len(q)), make(Tensor, len(k)), make(Tensor, len(v))
			b.AttentionBackward(dq, dk, dv, Tensor(dOut), Tensor(q), Tensor(k), Tensor(v), out, lse, starts, batch, T, c.H, c.KV, D)
			want := refAttention(q, k, v, starts, batch, T, c.H, c.KV, D)
			wq, wk, wv := refAttentionBackward(q, k, v, dOut, starts, batch, T, c.H, c.KV, D)
			for _, g := range []struct {
				name string
				got  []float32
				want []float64
			}{{"out", out, want}, {"dq", dq, wq}, {"dk", dk, wk}, {"dv", dv, wv}} {
				for i := range g.want {
					if d := math.Abs(float64(g.got[i]) - g.want[i]); d > 2e-5*(1+math.Abs(g.want[i])) {
						t.Fatalf("%s[%d] = %v, want %v", g.name, i, g.got[i], g.want[i])
					}
				}
			}
		})
	}
}
