package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
)

func TestAttention(t *testing.T) {
	// Two rows of 7 tokens; row 0 packs sequences starting at 0 and 3,
	// row 1 holds one. GQA: 4 query heads over 2 kv heads. headDim 40
	// leaves lanes with one dimension and lanes with two (the model test
	// covers headDim 8, under a warp).
	const batch, seqLen, heads, kvHeads = 2, 7, 4, 2
	starts := []int32{0, 0, 0, 3, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0}
	for _, headDim := range []int{40} {
		qd, kd := heads*headDim, kvHeads*headDim
		nq, nk := batch*seqLen*qd, batch*seqLen*kd
		nl := batch * heads * seqLen
		for name, l := range launchers(t) {
			for _, dt := range dtypes {
				t.Run(name+"/"+dt, func(t *testing.T) {
					rng := rand.New(rand.NewPCG(13, uint64(headDim)))
					q, k, v, dOut := randn(rng, nq, 1), randn(rng, nk, 1), randn(rng, nk, 1), randn(rng, nq, 1)
					qa, ka, va, da := input(dt, q), input(dt, k), input(dt, v), input(dt, dOut)
					out, lse := input(dt, make([]float32, nq)), make([]float32, nl)
					args := []any{int32(batch), int32(seqLen), int32(heads), int32(kvHeads), int32(headDim)}
					warps := block / 32
					must(t, l.Launch(kname("attn_fwd", dt), blocks(nl, warps), D1(block), append([]any{out, lse, qa, ka, va, starts}, args...)...))

					b := cpu.New()
					cOut, cLse := make(cpu.Tensor, nq), make(cpu.Tensor, nl)
					b.Attention(cOut, cLse, cpu.Tensor(q), cpu.Tensor(k), cpu.Tensor(v), starts, batch, seqLen, heads, kvHeads, headDim)
					tl := tolFor(dt)
					near(t, "out", output(out), cOut, tl)
					near(t, "lse", lse, cLse, tolF32)

					// Backward from the kernel's own forward outputs, as training does.
					delta := make([]float32, nl)
					must(t, l.Launch(kname("attn_bwd_delta", dt), blocks(nl, warps), D1(block), delta, da, out, int32(batch), int32(seqLen), int32(heads), int32(headDim)))
					dq := input(dt, make([]float32, nq))
					dk, dv := input(dt, make([]float32, nk)), input(dt, make([]float32, nk))
					must(t, l.Launch(kname("attn_bwd_dq", dt), blocks(nl, warps), D1(block), append([]any{dq, da, qa, ka, va, lse, delta, starts}, args...)...))
					must(t, l.Launch(kname("attn_bwd_dkdv", dt), blocks(batch*kvHeads*seqLen, warps), D1(block), append([]any{dk, dv, da, qa, ka, va, lse, delta, starts}, args...)...))

					cDq, cDk, cDv := make(cpu.Tensor, nq), make(cpu.Tensor, nk), make(cpu.Tensor, nk)
					b.AttentionBackward(cDq, cDk, cDv, cpu.Tensor(dOut), cpu.Tensor(q), cpu.Tensor(k), cpu.Tensor(v), cOut, cLse, starts, batch, seqLen, heads, kvHeads, headDim)
					// In bf16 the backward starts from the rounded forward
					// output, so its error is a few bf16 steps.
					gtl := tol{rel: 2e-5, abs: 1e-5}
					if dt == "bf16" {
						gtl = tol{rel: 2e-2, abs: 1e-2}
					}
					near(t, "dq", output(dq), cDq, gtl)
					near(t, "dk", output(dk), cDk, gtl)
					near(t, "dv", output(dv), cDv, gtl)
				})
			}
		}
	}
}

func TestAttentionDecode(t *testing.T) {
	// Three sequences: one new token against 5 cached, two new against 4,
	// and one with no new tokens.
	const heads, kvHeads, headDim = 4, 2, 16
	rows, lens := []int32{0, 1, 3, 3}, []int32{5, 4, 2}
	qd, kd := heads*headDim, kvHeads*headDim
	nrows := int(rows[len(rows)-1])
	for name, l := range launchers(t) {
		for _, dt := range dtypes {
			t.Run(name+"/"+dt, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(15, 16))
				q := randn(rng, nrows*qd, 1)
				var kpool, vpool []float32
				var offs []int64
				var ks, vs []backend.Tensor
				for _, L := range lens {
					// Caches with spare rows past lens, as a growing cache has.
					k, v := randn(rng, (int(L)+2)*kd, 1), randn(rng, (int(L)+2)*kd, 1)
					if dt == "bf16" {
						roundBF16(k)
						roundBF16(v)
					}
					offs = append(offs, int64(len(kpool)))
					kpool, vpool = append(kpool, k...), append(vpool, v...)
					ks, vs = append(ks, cpu.Tensor(k)), append(vs, cpu.Tensor(v))
				}
				qa := input(dt, q)
				out := input(dt, make([]float32, nrows*qd))
				must(t, l.Launch(kname("attn_decode", dt), blocks(nrows*heads, block/32), D1(block), out, qa, input(dt, kpool), input(dt, vpool), offs, rows, lens,
					int32(len(lens)), int32(heads), int32(kvHeads), int32(headDim)))
				want := make(cpu.Tensor, nrows*qd)
				cpu.New().CachedAttention(want, cpu.Tensor(q), ks, vs, rows, lens, heads, kvHeads, headDim)
				near(t, "out", output(out), want, tolFor(dt))

				// Five warps a block for 12 (row, head) items: the last
				// block's spare warps return at once, and the others must
				// not wait for them.
				out5 := input(dt, make([]float32, nrows*qd))
				must(t, l.Launch(kname("attn_decode", dt), blocks(nrows*heads, 5), D1(5*32), out5, qa, input(dt, kpool), input(dt, vpool), offs, rows, lens,
					int32(len(lens)), int32(heads), int32(kvHeads), int32(headDim)))
				near(t, "out with spare warps", output(out5), want, tolFor(dt))
			})
		}
	}
}
