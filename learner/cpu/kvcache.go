package cpu

import (
	"fmt"
	"math"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/blas"
)

// The ops of the incremental (generation) forward pass: views into scratch
// buffers, appends to per-sequence KV caches and attention of new tokens
// against those caches.

// View is a subslice: it shares t's storage.
func (*Backend) View(t backend.Tensor, off, n int) backend.Tensor {
	s := f(t)
	if off < 0 || n < 0 || off+n > len(s) {
		panic(fmt.Sprintf("cpu backend: View [%d, %d) of a tensor of %d elements", off, off+n, len(s)))
	}
	return Tensor(s[off : off+n : off+n])
}

// checkSeqRows checks a batch's per-sequence row cuts against the number
// of sequences and the rows of a tensor cols wide.
func checkSeqRows(op string, rows []int32, seqs, tensorLen, cols int) {
	if len(rows) != seqs+1 || rows[0] != 0 {
		panic(fmt.Sprintf("cpu backend: %s: %d row cuts (first %v) for %d sequences", op, len(rows), rows[:min(len(rows), 1)], seqs))
	}
	for i := 0; i < seqs; i++ {
		if rows[i+1] < rows[i] {
			panic(fmt.Sprintf("cpu backend: %s: sequence %d: rows [%d, %d)", op, i, rows[i], rows[i+1]))
		}
	}
	if int(rows[seqs])*cols > tensorLen {
		panic(fmt.Sprintf("cpu backend: %s: %d rows of %d exceed a tensor of %d elements", op, rows[seqs], cols, tensorLen))
	}
}

// WriteKV copies each sequence's rows; the copies are small (a decoding
// step appends one row per sequence), so they run on one goroutine.
func (*Backend) WriteKV(dst []backend.Tensor, at []int32, src backend.Tensor, rows []int32, cols int) {
	S := f(src)
	checkSeqRows("WriteKV", rows, len(dst), len(S), cols)
	if int(rows[len(dst)])*cols != len(S) {
		// As a device backend requires: src is exactly the rows.
		panic(fmt.Sprintf("cpu backend: WriteKV: %d rows of %d in a source of %d elements", rows[len(dst)], cols, len(S)))
	}
	mustLen("WriteKV", len(at), len(dst))
	for i, d := range dst {
		D := f(d)
		r0, r1 := int(rows[i]), int(rows[i+1])
		o := int(at[i]) * cols
		if o < 0 || o+(r1-r0)*cols > len(D) {
			panic(fmt.Sprintf("cpu backend: WriteKV: sequence %d: rows [%d, %d) do not fit a cache of %d rows", i, at[i], int(at[i])+r1-r0, len(D)/max(cols, 1)))
		}
		copy(D[o:o+(r1-r0)*cols], S[r0*cols:r1*cols])
	}
}

// CachedAttention works on each (sequence, kv head) pair independently,
// as Attention does: the query heads sharing a kv head are stacked so that
// a decoding token's whole group is one product against its cached keys
// and one against its values; a longer chunk (prefill) goes in blocks of
// attnBlock queries, each scoring only the keys up to its last query.
func (b *Backend) CachedAttention(out, q backend.Tensor, k, v []backend.Tensor, rows, lens []int32, heads, kvHeads, headDim int) {
	O, Q := f(out), f(q)
	qd, kd := heads*headDim, kvHeads*headDim
	nseq := len(k)
	checkSeqRows("CachedAttention", rows, nseq, len(Q), qd)
	mustLen("CachedAttention", len(O), len(Q))
	mustLen("CachedAttention", len(v), nseq)
	mustLen("CachedAttention", len(lens), nseq)
	if kvHeads <= 0 || heads%kvHeads != 0 {
		panic(fmt.Sprintf("cpu backend: CachedAttention: %d heads over %d kv heads", heads, kvHeads))
	}
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(headDim)))
	maxCtx, maxT := 0, 0
	for i := 0; i < nseq; i++ {
		T, L := int(rows[i+1]-rows[i]), int(lens[i])
		if L < T || len(f(k[i])) < L*kd || len(f(v[i])) < L*kd {
			panic(fmt.Sprintf("cpu backend: CachedAttention: sequence %d: %d new tokens, %d cached, caches of %d and %d elements", i, T, L, len(f(k[i])), len(f(v[i]))))
		}
		maxCtx, maxT = max(maxCtx, L), max(maxT, T)
	}
	nq := min(maxT, attnBlock) // queries per block
	gb := group * nq
	bufs, done := b.scratch(gb*maxCtx + 2*gb*headDim)
	defer done()
	b.parallelChunks(nseq*kvHeads, 1, func(worker, _, lo, hi int) {
		buf := bufs[worker]
		for u := lo; u < hi; u++ {
			i, kh := u/kvHeads, u%kvHeads
			base, T, L := int(rows[i]), int(rows[i+1]-rows[i]), int(lens[i])
			if T == 0 {
				continue
			}
			K, V := f(k[i])[kh*headDim:], f(v[i])[kh*headDim:]
			h0 := kh * group
			L0 := L - T // keys before the chunk
			if T == 1 {
				// The group's query heads are adjacent in the token's row.
				S := buf[:group*L]
				off := base*qd + h0*headDim
				blas.SgemmSerial(false, true, group, L, headDim, scale, Q[off:], headDim, K, kd, 0, S, L)
				for g := 0; g < group; g++ {
					softmaxInPlace(S[g*L : (g+1)*L])
				}
				blas.SgemmSerial(false, false, group, headDim, L, 1, S, L, V, kd, 0, O[off:], headDim)
				continue
			}
			for i0 := 0; i0 < T; i0 += attnBlock {
				i1 := min(i0+attnBlock, T)
				n := i1 - i0
				nk := L0 + i1 // keys the block's last query sees
				r := group * n
				S := buf[:r*nk]
				Qs, Os := buf[gb*maxCtx:gb*maxCtx+r*headDim], buf[gb*maxCtx+gb*headDim:gb*maxCtx+gb*headDim+r*headDim]
				gatherHeads(Qs, Q, qd, base, i0, i1, h0, group, headDim)
				blas.SgemmSerial(false, true, r, nk, headDim, scale, Qs, headDim, K, kd, 0, S, nk)
				for x := 0; x < r; x++ {
					t := i0 + x%n
					row := S[x*nk : (x+1)*nk]
					valid := L0 + t + 1
					softmaxInPlace(row[:valid])
					clear(row[valid:])
				}
				blas.SgemmSerial(false, false, r, headDim, nk, 1, S, nk, V, kd, 0, Os, headDim)
				scatterHeads(O, Os, qd, base, i0, i1, h0, group, headDim)
			}
		}
	})
}

// softmaxInPlace replaces x by softmax(x).
func softmaxInPlace(x []float32) {
	m := maxOf(x)
	s := expSub(x, x, m)
	scal(x, 1/s)
}
