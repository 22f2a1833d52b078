package cuda

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
)

// attnCase is one attention shape: rows of seqLen tokens whose packed
// sequences start where starts says.
type attnCase struct {
	name                                   string
	batch, seqLen, heads, kvHeads, headDim int
	starts                                 []int32
}

// packed returns the starts of one row packing sequences of these lengths.
func packed(lens ...int) []int32 {
	var s []int32
	at := 0
	for _, n := range lens {
		for range n {
			s = append(s, int32(at))
		}
		at += n
	}
	return s
}

// attnCases cover each kernel family's edges: for the warp kernels, lanes
// with one and two dimensions (headDim 40; the model test covers headDim
// 8, under a warp); for the tiled ones, each head-dimension bound (8 and
// 32 → 32, 40 and 64 → 64, 100 → 128), several tiles of queries and keys
// with sequences crossing tile boundaries, a last tile cut short, and GQA
// groups of 1, 2 and 4.
var attnCases = []attnCase{
	{"two rows", 2, 7, 4, 2, 40, append(packed(3, 4), packed(7)...)},
	{"d32 tiles", 1, 70, 2, 1, 8, packed(20, 25, 25)},
	{"d32 full", 1, 33, 2, 2, 32, packed(33)},
	{"d64 tiles", 1, 75, 4, 1, 64, packed(1, 40, 34)},
	{"d128 tiles", 2, 37, 2, 2, 100, append(packed(30, 7), packed(37)...)},
}

func TestAttention(t *testing.T) {
	variants := []struct {
		name string
		kind AttentionKernels
		tc   bool
	}{{"warp", WarpAttention, false}, {"tiled", TiledAttention, false}, {"tensor-cores", TiledAttention, true}}
	for name, l := range launchers(t) {
		for _, vr := range variants {
			for _, c := range attnCases {
				for _, dt := range dtypes {
					t.Run(fmt.Sprintf("%s/%s/%s/%s", name, vr.name, c.name, dt), func(t *testing.T) {
						checkAttention(t, l, vr.kind, vr.tc, c, dt)
					})
				}
			}
		}
	}
}

func checkAttention(t *testing.T, l Launcher, kind AttentionKernels, tc bool, c attnCase, dt string) {
	batch, seqLen, heads, kvHeads, headDim := c.batch, c.seqLen, c.heads, c.kvHeads, c.headDim
	starts := c.starts
	if len(starts) != batch*seqLen {
		t.Fatalf("case %s: %d starts for %d tokens", c.name, len(starts), batch*seqLen)
	}
	qd, kd := heads*headDim, kvHeads*headDim
	nq, nk := batch*seqLen*qd, batch*seqLen*kd
	nl := batch * heads * seqLen
	pl := planAttention(kind, dt, tc, starts, batch, seqLen, heads, kvHeads, headDim, block)
	if tiled := strings.HasPrefix(pl.fwd, "flash_"); tiled != (kind == TiledAttention) || strings.Contains(pl.fwd, "_tc_") != tc {
		t.Fatalf("%s kernels (tensor cores %v) planned as %s", kind, tc, pl.fwd)
	}
	rng := rand.New(rand.NewPCG(13, uint64(headDim)))
	q, k, v, dOut := randn(rng, nq, 1), randn(rng, nk, 1), randn(rng, nk, 1), randn(rng, nq, 1)
	qa, ka, va, da := input(dt, q), input(dt, k), input(dt, v), input(dt, dOut)
	out, lse := input(dt, make([]float32, nq)), make([]float32, nl)
	args := []any{int32(batch), int32(seqLen), int32(heads), int32(kvHeads), int32(headDim)}
	must(t, l.Launch(pl.fwd, pl.fwdGrid, pl.block, append([]any{out, lse, qa, ka, va, starts}, args...)...))

	b := cpu.New()
	cOut, cLse := make(cpu.Tensor, nq), make(cpu.Tensor, nl)
	b.Attention(cOut, cLse, cpu.Tensor(q), cpu.Tensor(k), cpu.Tensor(v), starts, batch, seqLen, heads, kvHeads, headDim)
	tl, ltl := tolFor(dt), tolF32
	if tc {
		// Products from bf16 operands (q·scale and the probabilities
		// rounded too): a few bf16 steps.
		tl, ltl = tol{rel: 2e-2, abs: 1e-2}, tol{rel: 1e-2, abs: 1e-2}
	}
	near(t, "out", output(out), cOut, tl)
	near(t, "lse", lse, cLse, ltl)

	// Backward from the kernel's own forward outputs, as training does.
	delta := make([]float32, nl)
	must(t, l.Launch(pl.delta, pl.deltaGrid, pl.deltaBlock, delta, da, out, int32(batch), int32(seqLen), int32(heads), int32(headDim)))
	dq := input(dt, make([]float32, nq))
	dk, dv := input(dt, make([]float32, nk)), input(dt, make([]float32, nk))
	must(t, l.Launch(pl.dq, pl.dqGrid, pl.block, append([]any{dq, da, qa, ka, va, lse, delta, starts}, args...)...))
	must(t, l.Launch(pl.dkdv, pl.dkdvGrid, pl.block, append([]any{dk, dv, da, qa, ka, va, lse, delta, starts}, args...)...))

	cDq, cDk, cDv := make(cpu.Tensor, nq), make(cpu.Tensor, nk), make(cpu.Tensor, nk)
	b.AttentionBackward(cDq, cDk, cDv, cpu.Tensor(dOut), cpu.Tensor(q), cpu.Tensor(k), cpu.Tensor(v), cOut, cLse, starts, batch, seqLen, heads, kvHeads, headDim)
	// In bf16 the backward starts from the rounded forward output, so its
	// error is a few bf16 steps.
	gtl := tol{rel: 2e-5, abs: 1e-5}
	if dt == "bf16" || tc {
		gtl = tol{rel: 2e-2, abs: 1e-2}
	}
	near(t, "dq", output(dq), cDq, gtl)
	near(t, "dk", output(dk), cDk, gtl)
	near(t, "dv", output(dv), cDv, gtl)
}

// TestPlanAttention checks which kernels run: the tiled ones by default,
// per head-dimension bound, with the grid covering every tile; the warp
// ones on request, over a head dimension above 128, or when starts
// decrease along a row.
func TestPlanAttention(t *testing.T) {
	st := packed(10, 30, 60)
	falls := append([]int32{}, st...)
	falls[50] = 0 // query 50 sees keys from 0: starts fall there
	cases := []struct {
		kind    AttentionKernels
		headDim int
		starts  []int32
		fwd     string
		grids   [3]int // forward, dq, dK/dV blocks
	}{
		{TiledAttention, 8, st, "flash_fwd_f32_d32", [3]int{2 * 14 * 2, 2 * 14 * 2, 2 * 2 * 2}},
		{TiledAttention, 64, st, "flash_fwd_f32_d64", [3]int{2 * 14 * 2, 2 * 14 * 4, 2 * 2 * 4}},
		{TiledAttention, 128, st, "flash_fwd_f32_d128", [3]int{2 * 14 * 4, 2 * 14 * 7, 2 * 2 * 7}},
		{WarpAttention, 64, st, "attn_fwd_f32", [3]int{2 * 14 * 100 / 4, 2 * 14 * 100 / 4, 2 * 2 * 100 / 4}},
		{TiledAttention, 160, st, "attn_fwd_f32", [3]int{2 * 14 * 100 / 4, 2 * 14 * 100 / 4, 2 * 2 * 100 / 4}},
		{TiledAttention, 64, falls, "attn_fwd_f32", [3]int{2 * 14 * 100 / 4, 2 * 14 * 100 / 4, 2 * 2 * 100 / 4}},
	}
	for _, c := range cases {
		starts := append(append([]int32{}, c.starts...), c.starts...)
		pl := planAttention(c.kind, "f32", false, starts, 2, 100, 14, 2, c.headDim, 128)
		got := [3]int{pl.fwdGrid.X, pl.dqGrid.X, pl.dkdvGrid.X}
		if pl.fwd != c.fwd || got != c.grids {
			t.Errorf("%s, headDim %d: %s over %v blocks, want %s over %v", c.kind, c.headDim, pl.fwd, got, c.fwd, c.grids)
		}
	}
	// With bf16 products the tiled passes are the tensor-core ones, 64
	// queries (or keys) a block.
	starts := append(append([]int32{}, st...), st...)
	pl := planAttention(TiledAttention, "bf16", true, starts, 2, 100, 14, 2, 64, 128)
	if pl.fwd != "flash_fwd_tc_bf16_d64" || pl.fwdGrid.X != 2*14*2 || pl.dq != "flash_bwd_dq_tc_bf16_d64" || pl.dqGrid.X != 2*14*2 ||
		pl.dkdv != "flash_bwd_dkdv_tc_bf16_d64" || pl.dkdvGrid.X != 2*2*2 {
		t.Errorf("tensor cores, headDim 64: %s over %d blocks, %s over %d, %s over %d", pl.fwd, pl.fwdGrid.X, pl.dq, pl.dqGrid.X, pl.dkdv, pl.dkdvGrid.X)
	}
	pl = planAttention(TiledAttention, "bf16", true, starts, 2, 100, 14, 2, 128, 128)
	if pl.fwd != "flash_fwd_tc_bf16_d128" || pl.fwdGrid.X != 2*14*2 || pl.dq != "flash_bwd_dq_tc_bf16_d128" || pl.dqGrid.X != 2*14*2 {
		t.Errorf("tensor cores, headDim 128: %s over %d blocks, %s over %d", pl.fwd, pl.fwdGrid.X, pl.dq, pl.dqGrid.X)
	}
	if pl := planAttention(WarpAttention, "f32", true, starts, 2, 100, 14, 2, 64, 128); pl.fwd != "attn_fwd_f32" {
		t.Errorf("warp kernels asked for, with bf16 products: %s", pl.fwd)
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
