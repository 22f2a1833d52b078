package cpu

import (
	"math"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/blas"
)

// attnBlock is the number of queries per head scored together.
const attnBlock = 64

// attnBlockKeys returns the first key of the query block [i0, i1) of one
// row: the earliest sequence start among its queries.
func attnBlockKeys(st []int32, i0, i1 int) int {
	j0 := int(st[i0])
	for i := i0 + 1; i < i1; i++ {
		j0 = min(j0, int(st[i]))
	}
	return j0
}

// gatherHeads copies, for the group heads starting at h0, rows [i0, i1) of
// x (row stride ld, base row base) into dst stacked head after head: dst
// row hh*(i1-i0)+ii is head h0+hh of row base+i0+ii.
func gatherHeads(dst, x []float32, ld, base, i0, i1, h0, group, headDim int) {
	nq := i1 - i0
	for hh := 0; hh < group; hh++ {
		for ii := 0; ii < nq; ii++ {
			src := (base+i0+ii)*ld + (h0+hh)*headDim
			copy(dst[(hh*nq+ii)*headDim:(hh*nq+ii+1)*headDim], x[src:src+headDim])
		}
	}
}

// scatterHeads is gatherHeads' inverse.
func scatterHeads(x, src []float32, ld, base, i0, i1, h0, group, headDim int) {
	nq := i1 - i0
	for hh := 0; hh < group; hh++ {
		for ii := 0; ii < nq; ii++ {
			d := (base+i0+ii)*ld + (h0+hh)*headDim
			copy(x[d:d+headDim], src[(hh*nq+ii)*headDim:(hh*nq+ii+1)*headDim])
		}
	}
}

// Attention works on each (row, kv head) pair independently, queries in
// blocks: the block's keys run from the first query's sequence start to its
// last query, so causal masking wastes at most one block triangle and
// packed sequences skip each other's keys. The query heads that share a kv
// head are stacked into one matrix, so each block is two products of
// group*attnBlock rows (a multiple of the micro-kernel's 12) against the
// shared keys and values, packed once. Softmax statistics go to lse so the
// backward pass can recompute probabilities instead of storing them.
func (b *Backend) Attention(out, lse, q, k, v backend.Tensor, starts []int32, batch, seqLen, heads, kvHeads, headDim int) {
	O, LSE, Q, K, V := f(out), f(lse), f(q), f(k), f(v)
	qd, kd := heads*headDim, kvHeads*headDim
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(headDim)))
	gb := group * attnBlock
	bufs, done := b.scratch(gb*seqLen + 2*gb*headDim)
	defer done()
	b.parallelChunks(batch*kvHeads, 1, func(worker, _, lo, hi int) {
		buf := bufs[worker]
		S, Qs, Os := buf[:gb*seqLen], buf[gb*seqLen:gb*(seqLen+headDim)], buf[gb*(seqLen+headDim):gb*(seqLen+2*headDim)]
		for bk := lo; bk < hi; bk++ {
			r, kh := bk/kvHeads, bk%kvHeads
			st := starts[r*seqLen : (r+1)*seqLen]
			base := r * seqLen
			h0 := kh * group
			for i0 := 0; i0 < seqLen; i0 += attnBlock {
				i1 := min(i0+attnBlock, seqLen)
				j0 := attnBlockKeys(st, i0, i1)
				nk, nq := i1-j0, i1-i0
				rows := group * nq
				gatherHeads(Qs, Q, qd, base, i0, i1, h0, group, headDim)
				// S = scale * Qs K[j0:i1]^T, rows nk wide.
				blas.SgemmSerial(false, true, rows, nk, headDim, scale, Qs, headDim,
					K[(base+j0)*kd+kh*headDim:], kd, 0, S, nk)
				for x := 0; x < rows; x++ {
					hh, ii := x/nq, x%nq
					i := i0 + ii
					row := S[x*nk : (x+1)*nk]
					lo, hi := int(st[i])-j0, i-j0+1 // valid keys [lo, hi)
					clear(row[:lo])
					clear(row[hi:])
					valid := row[lo:hi]
					m := maxOf(valid)
					s := expSub(valid, valid, m)
					scal(valid, 1/s)
					LSE[(r*heads+h0+hh)*seqLen+i] = m + float32(math.Log(float64(s)))
				}
				// Os = P V[j0:i1]
				blas.SgemmSerial(false, false, rows, headDim, nk, 1, S, nk,
					V[(base+j0)*kd+kh*headDim:], kd, 0, Os, headDim)
				scatterHeads(O, Os, qd, base, i0, i1, h0, group, headDim)
			}
		}
	})
}

// AttentionBackward recomputes P = exp(S - lse) block by block, then
// dV += P^T dO, dP = dO V^T, dS = P*(dP - rowsum(dO*O)), dQ = scale*dS K,
// dK += scale*dS^T Q, with the query heads of a kv head stacked as in
// Attention: the sums over those heads that dK and dV need happen inside
// one product each.
func (b *Backend) AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse backend.Tensor, starts []int32, batch, seqLen, heads, kvHeads, headDim int) {
	DQ, DK, DV, DO, Q, K, V, O, LSE := f(dq), f(dk), f(dv), f(dOut), f(q), f(k), f(v), f(out), f(lse)
	qd, kd := heads*headDim, kvHeads*headDim
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(headDim)))
	gb := group * attnBlock
	ps, hs := gb*seqLen, gb*headDim
	bufs, done := b.scratch(2*ps + 3*hs)
	defer done()
	b.parallelChunks(batch*kvHeads, 1, func(worker, _, lo, hi int) {
		buf := bufs[worker]
		P, dP := buf[:ps], buf[ps:2*ps]
		Qs, dOs, dQs := buf[2*ps:2*ps+hs], buf[2*ps+hs:2*ps+2*hs], buf[2*ps+2*hs:2*ps+3*hs]
		for bk := lo; bk < hi; bk++ {
			r, kh := bk/kvHeads, bk%kvHeads
			st := starts[r*seqLen : (r+1)*seqLen]
			base := r * seqLen
			h0 := kh * group
			for t := 0; t < seqLen; t++ {
				clear(DK[(base+t)*kd+kh*headDim : (base+t)*kd+(kh+1)*headDim])
				clear(DV[(base+t)*kd+kh*headDim : (base+t)*kd+(kh+1)*headDim])
			}
			for i0 := 0; i0 < seqLen; i0 += attnBlock {
				i1 := min(i0+attnBlock, seqLen)
				j0 := attnBlockKeys(st, i0, i1)
				nk, nq := i1-j0, i1-i0
				rows := group * nq
				kOff := (base+j0)*kd + kh*headDim
				gatherHeads(Qs, Q, qd, base, i0, i1, h0, group, headDim)
				gatherHeads(dOs, DO, qd, base, i0, i1, h0, group, headDim)
				blas.SgemmSerial(false, true, rows, nk, headDim, scale, Qs, headDim, K[kOff:], kd, 0, P, nk)
				blas.SgemmSerial(false, true, rows, nk, headDim, 1, dOs, headDim, V[kOff:], kd, 0, dP, nk)
				for x := 0; x < rows; x++ {
					hh, ii := x/nq, x%nq
					i := i0 + ii
					o := (base+i)*qd + (h0+hh)*headDim
					d := dotf(O[o:o+headDim], DO[o:o+headDim])
					l := LSE[(r*heads+h0+hh)*seqLen+i]
					row, drow := P[x*nk:(x+1)*nk], dP[x*nk:(x+1)*nk]
					lo, hi := int(st[i])-j0, i-j0+1
					clear(row[:lo])
					clear(drow[:lo])
					clear(row[hi:])
					clear(drow[hi:])
					softmaxGrad(row[lo:hi], drow[lo:hi], l, d)
				}
				// dV[j0:i1] += P^T dOs;  dK[j0:i1] += scale dS^T Qs;  dQs = scale dS K
				blas.SgemmSerial(true, false, nk, headDim, rows, 1, P, nk, dOs, headDim, 1, DV[kOff:], kd)
				blas.SgemmSerial(true, false, nk, headDim, rows, scale, dP, nk, Qs, headDim, 1, DK[kOff:], kd)
				blas.SgemmSerial(false, false, rows, headDim, nk, scale, dP, nk, K[kOff:], kd, 0, dQs, headDim)
				scatterHeads(DQ, dQs, qd, base, i0, i1, h0, group, headDim)
			}
		}
	})
}
