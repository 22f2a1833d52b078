package cuda

import "fmt"

// AttentionKernels chooses the kernels behind Attention and
// AttentionBackward.
type AttentionKernels int

const (
	// TiledAttention is kernels/flash.cu: a block owns a tile of queries
	// (or keys) and streams tiles of the other side through shared memory.
	// The default.
	TiledAttention AttentionKernels = iota
	// WarpAttention is kernels/attention.cu: a warp per query (or key),
	// the reference the tiled kernels are checked against.
	WarpAttention
)

func (a AttentionKernels) String() string {
	switch a {
	case TiledAttention:
		return "tiled"
	case WarpAttention:
		return "warp"
	}
	return fmt.Sprintf("AttentionKernels(%d)", int(a))
}

// flashBounds are the head-dimension bounds the tiled kernels are built
// for, and the rows (queries for the forward pass and dq, keys for dK/dV)
// a block of each owns, as in kernels/flash.cu.
var flashBounds = []struct{ d, fwd, dq, dkdv int }{
	{32, 64, 64, 64},
	{64, 64, 32, 32},
	{128, 32, 16, 16},
}

// flashThreads is FLASH_THREADS.
const flashThreads = 128

// attnPlan is the kernels and launch shapes of one attention call.
type attnPlan struct {
	fwd, delta, dq, dkdv                 string
	fwdGrid, deltaGrid, dqGrid, dkdvGrid Dim3
	block, deltaBlock                    Dim3
}

// flashTCRows is the queries (keys for dK/dV) a block of the tensor-core
// kernels (kernels/flash_tc.cu) owns.
const flashTCRows = 64

// planAttention picks the kernels for an attention over batch rows of
// seqLen tokens, elements of type dt ("f32" or "bf16"). The tiled kernels
// need a head dimension of at most 128 and starts that do not decrease
// along a row (packed sequences); otherwise, or when kind is
// WarpAttention, the warp kernels run with warpBlock threads a block.
// With tc (matrix products in bf16) the tiled passes are the tensor-core
// ones.
func planAttention(kind AttentionKernels, dt string, tc bool, starts []int32, batch, seqLen, heads, kvHeads, headDim, warpBlock int) attnPlan {
	nl := batch * heads * seqLen
	warps := warpBlock / 32
	p := attnPlan{
		fwd: "attn_fwd_" + dt, delta: "attn_bwd_delta_" + dt, dq: "attn_bwd_dq_" + dt, dkdv: "attn_bwd_dkdv_" + dt,
		fwdGrid: blocks(nl, warps), deltaGrid: blocks(nl, warps), dqGrid: blocks(nl, warps), dkdvGrid: blocks(batch*kvHeads*seqLen, warps),
		block: D1(warpBlock), deltaBlock: D1(warpBlock),
	}
	if kind != TiledAttention || !startsRise(starts, batch, seqLen) {
		return p
	}
	for _, f := range flashBounds {
		if headDim > f.d {
			continue
		}
		tiles := func(rows int) int { return (seqLen + rows - 1) / rows }
		sfx := fmt.Sprintf("_%s_d%d", dt, f.d)
		p.fwd, p.dq, p.dkdv = "flash_fwd"+sfx, "flash_bwd_dq"+sfx, "flash_bwd_dkdv"+sfx
		p.fwdGrid = D1(max(1, batch*heads*tiles(f.fwd)))
		p.dqGrid = D1(max(1, batch*heads*tiles(f.dq)))
		p.dkdvGrid = D1(max(1, batch*kvHeads*tiles(f.dkdv)))
		p.block = D1(flashThreads)
		if tc {
			p.fwd = "flash_fwd_tc" + sfx
			p.fwdGrid = D1(max(1, batch*heads*tiles(flashTCRows)))
			p.dq, p.dkdv = "flash_bwd_dq_tc"+sfx, "flash_bwd_dkdv_tc"+sfx
			p.dqGrid = D1(max(1, batch*heads*tiles(flashTCRows)))
			p.dkdvGrid = D1(max(1, batch*kvHeads*tiles(flashTCRows)))
		}
		return p
	}
	return p
}

// startsRise reports whether starts never decrease along each row.
func startsRise(starts []int32, batch, seqLen int) bool {
	for r := 0; r < batch; r++ {
		row := starts[r*seqLen : (r+1)*seqLen]
		for t := 1; t < len(row); t++ {
			if row[t] < row[t-1] {
				return false
			}
		}
	}
	return true
}
