package cpu

import (
	"math"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/blas"
)

// attnBlock is the number of queries scored together with one Sgemm.
const attnBlock = 64

// Attention processes each (row, head) pair independently, queries in
// blocks: the block's keys run from the first query's sequence start to its
// last query, so causal masking wastes at most one block triangle and
// packed sequences skip each other's keys. Softmax statistics go to lse so
// the backward pass can recompute probabilities instead of storing them.
func (b *Backend) Attention(out, lse, q, k, v backend.Tensor, starts []int32, batch, seqLen, heads, kvHeads, headDim int) {
	O, LSE, Q, K, V := f(out), f(lse), f(q), f(k), f(v)
	qd, kd := heads*headDim, kvHeads*headDim
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(headDim)))
	bufs := b.scratch(attnBlock * seqLen)
	b.parallelChunks(batch*heads, 1, func(worker, _, lo, hi int) {
		S := bufs[worker]
		for bh := lo; bh < hi; bh++ {
			r, h := bh/heads, bh%heads
			kh := h / group
			st := starts[r*seqLen : (r+1)*seqLen]
			base := r * seqLen
			for i0 := 0; i0 < seqLen; i0 += attnBlock {
				i1 := min(i0+attnBlock, seqLen)
				j0 := int(st[i0])
				for i := i0 + 1; i < i1; i++ {
					j0 = min(j0, int(st[i]))
				}
				nk := i1 - j0
				// S = scale * Q[i0:i1] K[j0:i1]^T, rows nk wide.
				blas.Sgemm(false, true, i1-i0, nk, headDim, scale,
					Q[(base+i0)*qd+h*headDim:], qd,
					K[(base+j0)*kd+kh*headDim:], kd, 0, S, nk)
				for i := i0; i < i1; i++ {
					row := S[(i-i0)*nk : (i-i0+1)*nk]
					lo, hi := int(st[i])-j0, i-j0+1 // valid keys [lo, hi)
					clear(row[:lo])
					clear(row[hi:])
					valid := row[lo:hi]
					m := maxOf(valid)
					s := expSub(valid, valid, m)
					scal(valid, 1/s)
					LSE[(r*heads+h)*seqLen+i] = m + float32(math.Log(float64(s)))
				}
				// O[i0:i1] = P V[j0:i1]
				blas.Sgemm(false, false, i1-i0, headDim, nk, 1, S, nk,
					V[(base+j0)*kd+kh*headDim:], kd, 0,
					O[(base+i0)*qd+h*headDim:], qd)
			}
		}
	})
}

// AttentionBackward recomputes P = exp(S - lse) block by block, then
// dV += P^T dO, dP = dO V^T, dS = P*(dP - rowsum(dO*O)), dQ = scale*dS K,
// dK += scale*dS^T Q. Work is split by (row, kv head) so the query heads
// sharing a kv head add into dK and dV from one goroutine.
func (b *Backend) AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse backend.Tensor, starts []int32, batch, seqLen, heads, kvHeads, headDim int) {
	DQ, DK, DV, DO, Q, K, V, O, LSE := f(dq), f(dk), f(dv), f(dOut), f(q), f(k), f(v), f(out), f(lse)
	qd, kd := heads*headDim, kvHeads*headDim
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(headDim)))
	bufs := b.scratch(2 * attnBlock * seqLen)
	b.parallelChunks(batch*kvHeads, 1, func(worker, _, lo, hi int) {
		P, dP := bufs[worker][:attnBlock*seqLen], bufs[worker][attnBlock*seqLen:]
		for bk := lo; bk < hi; bk++ {
			r, kh := bk/kvHeads, bk%kvHeads
			st := starts[r*seqLen : (r+1)*seqLen]
			base := r * seqLen
			for t := 0; t < seqLen; t++ {
				clear(DK[(base+t)*kd+kh*headDim : (base+t)*kd+(kh+1)*headDim])
				clear(DV[(base+t)*kd+kh*headDim : (base+t)*kd+(kh+1)*headDim])
			}
			for h := kh * group; h < (kh+1)*group; h++ {
				for i0 := 0; i0 < seqLen; i0 += attnBlock {
					i1 := min(i0+attnBlock, seqLen)
					j0 := int(st[i0])
					for i := i0 + 1; i < i1; i++ {
						j0 = min(j0, int(st[i]))
					}
					nk, nq := i1-j0, i1-i0
					qOff := (base+i0)*qd + h*headDim
					kOff := (base+j0)*kd + kh*headDim
					blas.Sgemm(false, true, nq, nk, headDim, scale, Q[qOff:], qd, K[kOff:], kd, 0, P, nk)
					blas.Sgemm(false, true, nq, nk, headDim, 1, DO[qOff:], qd, V[kOff:], kd, 0, dP, nk)
					for i := i0; i < i1; i++ {
						ii := i - i0
						o := (base+i)*qd + h*headDim
						d := dotf(O[o:o+headDim], DO[o:o+headDim])
						l := LSE[(r*heads+h)*seqLen+i]
						row, drow := P[ii*nk:(ii+1)*nk], dP[ii*nk:(ii+1)*nk]
						lo, hi := int(st[i])-j0, i-j0+1
						clear(row[:lo])
						clear(drow[:lo])
						clear(row[hi:])
						clear(drow[hi:])
						softmaxGrad(row[lo:hi], drow[lo:hi], l, d)
					}
					// dV[j0:i1] += P^T dO;  dK[j0:i1] += scale dS^T Q;  dQ = scale dS K
					blas.Sgemm(true, false, nk, headDim, nq, 1, P, nk, DO[qOff:], qd, 1, DV[kOff:], kd)
					blas.Sgemm(true, false, nk, headDim, nq, scale, dP, nk, Q[qOff:], qd, 1, DK[kOff:], kd)
					blas.Sgemm(false, false, nq, headDim, nk, scale, dP, nk, K[kOff:], kd, 0, DQ[qOff:], qd)
				}
			}
		}
	})
}
