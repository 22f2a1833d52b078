package cuda

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/rlnode/rlnode/learner/backend"
)

// optimState is the device optimizer's reusable memory: the pointer and
// length tables its launches read, the partial sums, and their host
// copies (a table is uploaded only when it changed).
type optimState struct {
	tables  Ptr // tableCap×7 int64: w, g, m, v, wb, len, x (sums of squares)
	partial Ptr // partCap doubles
	sums    Ptr // tableCap doubles
	tabCap  int
	partCap int

	host     []int64 // the tables as last uploaded
	next     []int64
	hostSums []float64
}

var _ backend.FusedAdamW = (*DeviceBackend)(nil)

// optimBlocks is how many blocks stride over each tensor of a launch over
// tensors of at most maxLen elements: up to 4 elements a thread, at most
// 256 blocks.
func (b *DeviceBackend) optimBlocks(maxLen int) int {
	per := 4 * b.block()
	return min(256, max(1, (maxLen+per-1)/per))
}

// reserve grows the optimizer's buffers to tables of n tensors and parts
// partial sums; in a steady state it allocates nothing.
func (b *DeviceBackend) reserve(n, parts int) {
	o := &b.opt
	grow := func(ptr *Ptr, capacity *int, want int, elem int64, what string) {
		if want <= *capacity || !b.ok() {
			return
		}
		if *ptr != 0 {
			b.fail(b.A.Free(*ptr))
			*ptr = 0
		}
		p, err := b.alloc(elem*int64(want), true)
		if err != nil {
			b.fail(fmt.Errorf("cuda backend: optimizer %s for %d: %w", what, want, err))
			*capacity = 0
			return
		}
		*ptr, *capacity = p, want
	}
	oldCap := o.tabCap
	grow(&o.tables, &o.tabCap, n, 7*8, "tables")
	if o.tabCap != oldCap {
		o.host = nil // the new tables hold nothing yet
		if o.sums != 0 {
			b.fail(b.A.Free(o.sums))
			o.sums = 0
		}
		if b.ok() {
			p, err := b.alloc(8*int64(o.tabCap), true)
			if err != nil {
				b.fail(fmt.Errorf("cuda backend: optimizer sums for %d tensors: %w", o.tabCap, err))
			}
			o.sums = p
		}
	}
	grow(&o.partial, &o.partCap, parts, 8, "partial sums")
}

// column is table column c (of 7) in the device tables.
func (b *DeviceBackend) column(c int) Ptr { return b.opt.tables + Ptr(8*c*b.opt.tabCap) }

// upload writes the tables in next (7 columns of tabCap) to the device
// unless they are what it holds already.
func (b *DeviceBackend) uploadTables() {
	o := &b.opt
	if !b.ok() || slices.Equal(o.host, o.next) {
		return
	}
	b.fail(b.D.ToDevice(o.tables, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(o.next))), 8*len(o.next))))
	o.host = append(o.host[:0], o.next...)
}

// setTable fills column c of the host tables for tensors ts (addresses),
// or lengths when lens is set.
func (b *DeviceBackend) setTable(c int, vals func(i int) int64, n int) {
	o := &b.opt
	if len(o.next) != 7*o.tabCap {
		o.next = make([]int64, 7*o.tabCap)
		copy(o.next, o.host)
	}
	col := o.next[c*o.tabCap : (c+1)*o.tabCap]
	for i := 0; i < n; i++ {
		col[i] = vals(i)
	}
}

// maxYGrid is the most tensors one launch takes (gridDim.y's limit).
const maxYGrid = 65535

// SumSquares computes each tensor's sum of squares in fp64 on the device
// (sumsq_multi, then sumsq_finish) and copies the sums to out.
func (b *DeviceBackend) SumSquares(out []float64, ts []backend.Tensor) error {
	if len(out) != len(ts) {
		panic(fmt.Sprintf("cuda backend: SumSquares: %d sums for %d tensors", len(out), len(ts)))
	}
	if len(ts) == 0 || !b.ok() {
		return b.err
	}
	n, maxLen := len(ts), 0
	for _, t := range ts {
		maxLen = max(maxLen, t.Len())
	}
	gx := b.optimBlocks(maxLen)
	b.reserve(n, min(n, maxYGrid)*gx)
	if !b.ok() {
		return b.err
	}
	b.setTable(6, func(i int) int64 { return int64(p(ts[i])) }, n)
	b.setTable(5, func(i int) int64 { return int64(ts[i].Len()) }, n)
	b.uploadTables()
	for lo := 0; lo < n; lo += maxYGrid {
		k := min(maxYGrid, n-lo)
		b.launchGrid("sumsq_multi", Dim3{gx, k, 1}, b.opt.partial, b.column(6)+Ptr(8*lo), b.column(5)+Ptr(8*lo))
		b.launchGrid("sumsq_finish", b.grid(k, b.block()), b.opt.sums+Ptr(8*lo), b.opt.partial, int32(gx), int32(k))
	}
	if !b.ok() {
		return b.err
	}
	o := &b.opt
	if cap(o.hostSums) < n {
		o.hostSums = make([]float64, n)
	}
	h := o.hostSums[:n]
	b.fail(b.D.ToHost(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(h))), 8*n), o.sums))
	if !b.ok() {
		nan := math.NaN()
		for i := range out {
			out[i] = nan
		}
		return b.err
	}
	copy(out, h)
	return nil
}

// AdamW updates every set in one launch (adamw_multi, a grid row per
// tensor). With GEMM BF16 it also writes each weight's bf16 copy, the
// operand its matrix products read next; a set whose W is a view (part of
// a weight) writes none and leaves the weight's copy stale.
func (b *DeviceBackend) AdamW(sets []backend.AdamWTensors, c backend.AdamWCoef) error {
	if len(sets) == 0 || !b.ok() {
		return b.err
	}
	n, maxLen := len(sets), 0
	for i, s := range sets {
		l := s.W.Len()
		if s.G.Len() != l || s.M.Len() != l || s.V.Len() != l {
			panic(fmt.Sprintf("cuda backend: AdamW: set %d: weights %d, gradient %d, moments %d and %d elements", i, l, s.G.Len(), s.M.Len(), s.V.Len()))
		}
		maxLen = max(maxLen, l)
	}
	b.reserve(n, 0)
	if !b.ok() {
		return b.err
	}
	for col, f := range []func(s backend.AdamWTensors) backend.Tensor{
		func(s backend.AdamWTensors) backend.Tensor { return s.W },
		func(s backend.AdamWTensors) backend.Tensor { return s.G },
		func(s backend.AdamWTensors) backend.Tensor { return s.M },
		func(s backend.AdamWTensors) backend.Tensor { return s.V },
	} {
		b.setTable(col, func(i int) int64 { return int64(p(f(sets[i]))) }, n)
	}
	b.setTable(4, func(i int) int64 { return int64(b.shadowFor(sets[i].W)) }, n)
	b.setTable(5, func(i int) int64 { return int64(sets[i].W.Len()) }, n)
	b.uploadTables()
	gx := b.optimBlocks(maxLen)
	for lo := 0; lo < n; lo += maxYGrid {
		k := min(maxYGrid, n-lo)
		o := Ptr(8 * lo)
		b.launchGrid("adamw_multi", Dim3{gx, k, 1}, b.column(0)+o, b.column(1)+o, b.column(2)+o, b.column(3)+o, b.column(4)+o, b.column(5)+o,
			c.GradScale, c.Decay, c.Beta1, c.Beta2, c.OneMinusB1, c.OneMinusB2, c.BC2Sqrt, c.Eps, c.StepSize)
	}
	for _, s := range sets {
		if dt(s.W).view {
			b.wrote(s.W)
		} else {
			// The copy AdamW wrote serves the products; a cast kept
			// from before the copy existed is stale now.
			b.shadowWritten(s.W)
			if len(b.kept) > 0 {
				b.dropKept(p(s.W), 4*int64(s.W.Len()))
			}
		}
	}
	return b.err
}

func (b *DeviceBackend) launchGrid(kernel string, grid Dim3, args ...any) {
	b.launchIn(kernel, grid, D1(b.block()), args...)
}
