package cuda

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"unsafe"

	"github.com/rlnode/rlnode/learner/backend"
)

// DeviceBackend is backend.Backend with every tensor in device memory:
// kernels of kernels/ for the transformer's ops, Accel.Gemm for the
// matrix products, a caching Allocator for tensors and per-op
// temporaries. The same code runs on a GPU and on the emulated device.
//
// Storage, master weights, gradients and the optimizer's state are fp32.
// With GEMM set to BF16 the matrix products take bf16 operands (rounded
// from the fp32 tensors by cast_f32_bf16) with fp32 accumulation and
// fp32 results, as torch.autocast(bfloat16) does for linear layers; the
// other ops stay fp32. The weights the fused AdamW updates keep a bf16
// copy, written by the update itself, that their products read.
//
// Backend methods return no errors: the first failure (out of memory, a
// failed launch) is kept, every op after it does nothing, and Download
// fills its destination with NaN, so a training step fails at its finite
// check instead of going on with garbage. Err reports the failure.
type DeviceBackend struct {
	D     Accel
	A     *Allocator
	GEMM  DType // element type of matrix-product operands: F32 or BF16
	Block int   // threads per block; 128 when 0
	// AttnKernels chooses the attention kernels: tiled (the zero value)
	// or the warp-per-query reference.
	AttnKernels AttentionKernels
	// Prof, when set, times every device op by name (OpProfile), waiting
	// for the device around each.
	Prof *OpProfile
	// AttnTensorCores runs the tiled attention on the tensor cores
	// (kernels/flash_tc.cu) when GEMM is BF16. Off by default: it has not
	// run on a GPU yet.
	AttnTensorCores bool

	// Casts counts the bf16 casts of matrix-product operands launched,
	// KeptReuses the products that read a kept cast instead (devkept.go).
	Casts      int
	KeptReuses int
	// Downloaded counts the bytes Download copied to the host.
	Downloaded int64

	err     error
	temps   []Ptr // an op's temporaries, freed when it returns
	opt     optimState
	shadows []*shadow // bf16 copies of weights, by address
	// bf16 casts of other operands; checkKept compares each with its
	// operand when it is reused (RLNODE_CUDA_CHECK_KEPT=1)
	kept      []keptCast
	keepOff   bool // the device ran short: no more casts are kept
	held      Ptr  // a product's first operand while its second is made
	checkKept bool
	pinned    map[*byte][]byte // HostBuffer's page-locked buffers by address
	// PinHostBuffer's ranges by address
	registered map[*byte][]byte
	side       sideRing
}

// NewDeviceBackend returns a backend on d with matrix products in gemm.
func NewDeviceBackend(d Accel, gemm DType) *DeviceBackend {
	return &DeviceBackend{D: d, A: NewAllocator(d), GEMM: gemm, checkKept: os.Getenv("RLNODE_CUDA_CHECK_KEPT") == "1"}
}

var _ backend.Backend = (*DeviceBackend)(nil)

func (b *DeviceBackend) Name() string { return "cuda" }

// Err is the first failure, or nil.
func (b *DeviceBackend) Err() error { return b.err }

// Sync waits for the device and returns Err or the device's failure.
func (b *DeviceBackend) Sync() error {
	if b.err == nil {
		b.fail(b.D.Sync())
	}
	return b.err
}

// Close frees every tensor and host buffer and closes the device.
func (b *DeviceBackend) Close() error {
	b.kept = nil // their blocks go with the allocator's
	return errors.Join(b.A.Release(), b.freePinned(), b.freeSide(), b.D.Close())
}

// Tensor is a DeviceBackend tensor: n fp32 elements at p. A view shares
// its parent's block and is not freed.
type Tensor struct {
	p    Ptr
	n    int
	view bool
	bf16 bool // n bf16 values (AllocBF16), else n float32
}

func (t *Tensor) Len() int { return t.n }

// Ptr is the tensor's device address.
func (t *Tensor) Ptr() Ptr { return t.p }

func (b *DeviceBackend) fail(err error) {
	if err != nil && b.err == nil {
		b.err = err
	}
}

func (b *DeviceBackend) ok() bool { return b.err == nil }

// dt unwraps a tensor; nil stays Null.
func dt(t backend.Tensor) *Tensor {
	if t == nil {
		return nil
	}
	d, ok := t.(*Tensor)
	if !ok {
		panic(fmt.Sprintf("cuda backend: foreign tensor %T", t))
	}
	return d
}

func p(t backend.Tensor) Ptr { return dt(t).p }

func (b *DeviceBackend) Alloc(n int) backend.Tensor {
	return b.zeros(&Tensor{n: n}, 4, "tensor")
}

// zeros gives t device memory of size bytes per element (at least one
// element's), zeroed; a failure is the backend's error.
func (b *DeviceBackend) zeros(t *Tensor, size int64, what string) *Tensor {
	if !b.ok() {
		return t
	}
	bytes := size * int64(max(t.n, 1))
	ptr, err := b.alloc(bytes, false)
	if err != nil {
		b.fail(fmt.Errorf("cuda backend: %s of %d elements: %w", what, t.n, err))
		return t
	}
	t.p = ptr
	b.fail(b.D.Zero(ptr, bytes))
	return t
}

func (b *DeviceBackend) Free(t backend.Tensor) {
	d := dt(t)
	if d == nil || d.view || d.p == 0 {
		return
	}
	switch {
	case d.bf16 && len(b.kept) > 0:
		b.dropBorrowers(d.p, 2*int64(max(d.n, 1)))
	case !d.bf16:
		if len(b.shadows) > 0 {
			b.dropShadows(d.p, 4*int64(max(d.n, 1)))
		}
		if len(b.kept) > 0 {
			b.dropKept(d.p, 4*int64(max(d.n, 1)))
		}
	}
	b.fail(b.A.Free(d.p))
	d.p = 0
}

func mustLen(op string, a, c int) {
	if a != c {
		panic(fmt.Sprintf("cuda backend: %s: length %d != %d", op, a, c))
	}
}

func f32Bytes(x []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

func (b *DeviceBackend) Upload(dst backend.Tensor, src []float32) {
	mustLen("Upload", dst.Len(), len(src))
	b.wrote(dst)
	if len(src) > 0 {
		b.run(named("upload"), func() error { return b.D.ToDevice(p(dst), f32Bytes(src)) })
	}
}

func (b *DeviceBackend) Download(dst []float32, src backend.Tensor) {
	mustLen("Download", len(dst), src.Len())
	if b.ok() && len(dst) > 0 {
		b.run(named("download"), func() error { return b.D.ToHost(f32Bytes(dst), p(src)) })
		b.Downloaded += 4 * int64(len(dst))
	}
	if !b.ok() {
		nan := float32(math.NaN())
		for i := range dst {
			dst[i] = nan
		}
	}
}

func (b *DeviceBackend) Zero(t backend.Tensor) {
	b.wrote(t)
	if t.Len() > 0 {
		b.run(named("zero"), func() error { return b.D.Zero(p(t), 4*int64(t.Len())) })
	}
}

func (b *DeviceBackend) Copy(dst, src backend.Tensor) {
	mustLen("Copy", dst.Len(), src.Len())
	b.wrote(dst)
	if dst.Len() > 0 {
		b.run(named("copy"), func() error { return b.D.Copy(p(dst), p(src), 4*int64(dst.Len())) })
	}
}

func (b *DeviceBackend) View(t backend.Tensor, off, n int) backend.Tensor {
	d := dt(t)
	if off < 0 || n < 0 || off+n > d.n {
		panic(fmt.Sprintf("cuda backend: View [%d, %d) of %d elements", off, off+n, d.n))
	}
	return &Tensor{p: d.p + Ptr(4*off), n: n, view: true}
}

func (b *DeviceBackend) block() int {
	if b.Block == 0 {
		return 128
	}
	return b.Block
}

// grid is the grid for n items, per items a block: at most 65535 blocks
// (the kernels it is used for stride over the rest).
func (b *DeviceBackend) grid(n, per int) Dim3 { return D1(min(65535, max(1, (n+per-1)/per))) }

func (b *DeviceBackend) launch(kernel string, grid Dim3, args ...any) {
	b.launchIn(kernel, grid, D1(b.block()), args...)
}

// launchIn launches with a block of the kernel's own size.
func (b *DeviceBackend) launchIn(kernel string, grid, block Dim3, args ...any) {
	b.run(named(kernel), func() error { return b.D.Launch(kernel, grid, block, args...) })
}

// elems launches an element-wise kernel over n elements.
func (b *DeviceBackend) elems(kernel string, n int, args ...any) {
	if n > 0 {
		b.launch(kernel, b.grid(n, b.block()), args...)
	}
}

// temp returns a temporary of n bytes, freed by done.
func (b *DeviceBackend) temp(n int64) Ptr {
	if !b.ok() {
		return 0
	}
	ptr, err := b.alloc(n, false)
	if err != nil {
		b.fail(fmt.Errorf("cuda backend: temporary of %d bytes: %w", n, err))
		return 0
	}
	b.temps = append(b.temps, ptr)
	return ptr
}

// done frees the op's temporaries: queued work that reads them runs
// before anything that reuses them.
func (b *DeviceBackend) done() {
	for _, t := range b.temps {
		b.fail(b.A.Free(t))
	}
	b.temps = b.temps[:0]
}

// ints uploads host integers into a temporary (sideInput).
func (b *DeviceBackend) ints(x []int32) Ptr {
	return b.sideInput(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x)))
}

func (b *DeviceBackend) longs(x []int64) Ptr {
	return b.sideInput(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 8*len(x)))
}

// operand returns a GEMM operand of ext elements at t in b.GEMM: the
// tensor itself in fp32; in bf16 a weight's copy, else a kept cast (made
// now if there is none), else a cast into a temporary.
func (b *DeviceBackend) operand(t backend.Tensor, ext int64) Ptr {
	if b.GEMM == F32 || ext == 0 {
		return p(t)
	}
	if c := b.cachedOperand(t, ext); c != 0 {
		return c
	}
	if c := b.keptOperand(p(t), ext); c != 0 {
		return c
	}
	if c := b.keepOperand(t, ext); c != 0 {
		return c
	}
	h := b.temp(2 * ext)
	b.elems("cast_f32_bf16", int(ext), h, p(t), ext)
	b.Casts++
	return h
}

func (b *DeviceBackend) gemm(g Gemm, a, bb, c backend.Tensor) {
	defer b.done()
	_, _, _, _, aExt, bExt, cExt := g.operands()
	if aExt > int64(a.Len()) || bExt > int64(bb.Len()) || cExt > int64(c.Len()) {
		panic(fmt.Sprintf("cuda backend: matrix product %dx%dx%d (batch %d) spans %d, %d, %d elements of tensors of %d, %d, %d", g.M, g.N, g.K, g.Batch, aExt, bExt, cExt, a.Len(), bb.Len(), c.Len()))
	}
	g.In = b.GEMM
	// While B's operand is made, A's is held: if that frees the kept
	// casts, A's goes back to the allocator only after the product is
	// queued (done), not to be reused by B's cast first.
	g.A = b.operand(a, aExt)
	b.held = g.A
	g.B = b.operand(bb, bExt)
	b.held = 0
	g.C = p(c)
	b.wrote(c)
	b.run(func() string {
		if g.Batch > 1 {
			return fmt.Sprintf("gemm %dx%dx%d ×%d %s", g.M, g.N, g.K, g.Batch, g.In)
		}
		return fmt.Sprintf("gemm %dx%dx%d %s", g.M, g.N, g.K, g.In)
	}, func() error { return b.D.Gemm(g) })
}

func (b *DeviceBackend) MatMul(transA, transB bool, m, n, k int, alpha float32, a, bb backend.Tensor, beta float32, c backend.Tensor) {
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	b.gemm(Gemm{TransA: transA, TransB: transB, M: m, N: n, K: k, Alpha: alpha, Beta: beta, LDA: max(lda, 1), LDB: max(ldb, 1), LDC: max(n, 1), Batch: 1}, a, bb, c)
}

func (b *DeviceBackend) BatchedMatMul(transA, transB bool, m, n, k int, alpha float32, a backend.Tensor, lda, strideA int, bb backend.Tensor, ldb, strideB int, beta float32, c backend.Tensor, ldc, strideC int, batch int) {
	if batch == 0 {
		return
	}
	b.gemm(Gemm{TransA: transA, TransB: transB, M: m, N: n, K: k, Alpha: alpha, Beta: beta, LDA: lda, StrideA: int64(strideA), LDB: ldb,
		StrideB: int64(strideB), LDC: ldc, StrideC: int64(strideC), Batch: batch}, a, bb, c)
}

func (b *DeviceBackend) Add(dst, x, y backend.Tensor) {
	mustLen("Add", dst.Len(), x.Len())
	mustLen("Add", dst.Len(), y.Len())
	b.wrote(dst)
	b.elems("add_f32", dst.Len(), p(dst), p(x), p(y), int64(dst.Len()))
}

func (b *DeviceBackend) AddScaled(dst backend.Tensor, alpha float32, x backend.Tensor) {
	mustLen("AddScaled", dst.Len(), x.Len())
	b.wrote(dst)
	b.elems("add_scaled_f32", dst.Len(), p(dst), p(x), alpha, int64(dst.Len()))
}

func (b *DeviceBackend) Scale(t backend.Tensor, alpha float32) {
	b.wrote(t)
	b.elems("scale_f32", t.Len(), p(t), alpha, int64(t.Len()))
}

func (b *DeviceBackend) Mul(dst, x, y backend.Tensor) {
	mustLen("Mul", dst.Len(), x.Len())
	mustLen("Mul", dst.Len(), y.Len())
	b.wrote(dst)
	b.elems("mul_f32", dst.Len(), p(dst), p(x), p(y), int64(dst.Len()))
}

func (b *DeviceBackend) AddRowVector(x, v backend.Tensor, rows, cols int) {
	b.wrote(x)
	b.elems("add_row_vector_f32", rows*cols, p(x), p(v), int32(rows), int32(cols))
}

func (b *DeviceBackend) SumRows(dst, x backend.Tensor, rows, cols int) {
	defer b.done()
	b.wrote(dst)
	if cols > 0 && rows > 0 {
		per, chunks, grid := colChunks(rows, cols, b.block())
		part := b.temp(4 * int64(chunks*cols))
		b.launch("sum_rows_part_f32", grid, part, p(x), int32(rows), int32(cols), int32(per))
		b.elems("sum_rows_finish_f32", cols, p(dst), part, int32(chunks), int32(cols))
	}
}

// colChunks splits rows for the two-pass column sums: per rows a thread,
// at most 4096 chunks, and the first pass's grid of blocks of block
// threads (the column blocks of each chunk).
func colChunks(rows, cols, block int) (per, chunks int, grid Dim3) {
	per = max(64, (rows+4095)/4096)
	chunks = (rows + per - 1) / per
	return per, chunks, D1(chunks * ((cols + block - 1) / block))
}

func (b *DeviceBackend) RMSNorm(out, rstd, x, w backend.Tensor, rows, cols int, eps float32) {
	b.wrote(out, rstd)
	if rows > 0 {
		b.launch("rmsnorm_fwd_f32", D1(rows), p(out), p(rstd), p(x), p(w), int32(rows), int32(cols), eps)
	}
}

func (b *DeviceBackend) RMSNormBackward(dx, dw, dy, x, w, rstd backend.Tensor, rows, cols int) {
	b.wrote(dx, dw)
	if rows == 0 {
		return
	}
	b.launch("rmsnorm_bwd_dx_f32", D1(rows), p(dx), p(dy), p(x), p(w), p(rstd), int32(rows), int32(cols))
	if dw != nil {
		defer b.done()
		per, chunks, grid := colChunks(rows, cols, b.block())
		part := b.temp(4 * int64(chunks*cols))
		b.launch("rmsnorm_bwd_dw_part_f32", grid, part, p(dy), p(x), p(rstd), int32(rows), int32(cols), int32(per))
		b.elems("sum_rows_finish_f32", cols, p(dw), part, int32(chunks), int32(cols))
	}
}

func (b *DeviceBackend) rope(x backend.Tensor, pos []int32, rows, heads, headDim int, theta float64, sign float32) {
	defer b.done()
	b.wrote(x)
	n := rows * heads * headDim / 2
	if n == 0 {
		return
	}
	b.elems("rope_f32", n, p(x), b.ints(pos[:rows]), int32(rows), int32(heads), int32(headDim), theta, sign)
}

func (b *DeviceBackend) RoPE(x backend.Tensor, pos []int32, rows, heads, headDim int, theta float64) {
	b.rope(x, pos, rows, heads, headDim, theta, 1)
}

func (b *DeviceBackend) RoPEBackward(dx backend.Tensor, pos []int32, rows, heads, headDim int, theta float64) {
	b.rope(dx, pos, rows, heads, headDim, theta, -1)
}

func (b *DeviceBackend) SwiGLU(out, gate, up backend.Tensor, n int) {
	b.wrote(out)
	b.elems("swiglu_fwd_f32", n, p(out), p(gate), p(up), int64(n))
}

func (b *DeviceBackend) SwiGLUBackward(dGate, dUp, dOut, gate, up backend.Tensor, n int) {
	b.wrote(dGate, dUp)
	b.elems("swiglu_bwd_f32", n, p(dGate), p(dUp), p(dOut), p(gate), p(up), int64(n))
}

func (b *DeviceBackend) Softmax(out, x backend.Tensor, rows, cols int) {
	b.wrote(out)
	if rows > 0 {
		b.launch("softmax_f32", D1(rows), p(out), p(x), int32(rows), int32(cols))
	}
}

// warpGrid gives one warp to each of n items.
func (b *DeviceBackend) warpGrid(n int) Dim3 {
	per := b.block() / 32
	return D1(max(1, (n+per-1)/per))
}

func (b *DeviceBackend) Attention(out, lse, q, k, v backend.Tensor, starts []int32, batch, seqLen, heads, kvHeads, headDim int) {
	defer b.done()
	b.wrote(out, lse)
	if batch*heads*seqLen == 0 {
		return
	}
	st := starts[:batch*seqLen]
	pl := planAttention(b.AttnKernels, "f32", b.AttnTensorCores && b.GEMM == BF16, st, batch, seqLen, heads, kvHeads, headDim, b.block())
	b.launchIn(pl.fwd, pl.fwdGrid, pl.block, p(out), p(lse), p(q), p(k), p(v), b.ints(st),
		int32(batch), int32(seqLen), int32(heads), int32(kvHeads), int32(headDim))
}

func (b *DeviceBackend) AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse backend.Tensor, starts []int32, batch, seqLen, heads, kvHeads, headDim int) {
	defer b.done()
	b.wrote(dq, dk, dv)
	nl := batch * heads * seqLen
	if nl == 0 {
		return
	}
	delta := b.temp(4 * int64(nl))
	starts = starts[:batch*seqLen]
	st := b.ints(starts)
	pl := planAttention(b.AttnKernels, "f32", b.AttnTensorCores && b.GEMM == BF16, starts, batch, seqLen, heads, kvHeads, headDim, b.block())
	shape := []any{int32(batch), int32(seqLen), int32(heads), int32(kvHeads), int32(headDim)}
	b.launchIn(pl.delta, pl.deltaGrid, pl.deltaBlock, delta, p(dOut), p(out), int32(batch), int32(seqLen), int32(heads), int32(headDim))
	b.launchIn(pl.dq, pl.dqGrid, pl.block, append([]any{p(dq), p(dOut), p(q), p(k), p(v), p(lse), delta, st}, shape...)...)
	b.launchIn(pl.dkdv, pl.dkdvGrid, pl.block, append([]any{p(dk), p(dv), p(dOut), p(q), p(k), p(v), p(lse), delta, st}, shape...)...)
}

func checkSeqRows(op string, rows []int32, nseq, n, cols int) {
	if len(rows) != nseq+1 || rows[0] != 0 || int(rows[nseq])*cols != n {
		panic(fmt.Sprintf("cuda backend: %s: rows %v for %d sequences over %d elements of %d columns", op, rows, nseq, n, cols))
	}
	for i := 0; i < nseq; i++ {
		if rows[i+1] < rows[i] {
			panic(fmt.Sprintf("cuda backend: %s: rows %v decrease", op, rows))
		}
	}
}

func (b *DeviceBackend) WriteKV(dst []backend.Tensor, at []int32, src backend.Tensor, rows []int32, cols int) {
	checkSeqRows("WriteKV", rows, len(dst), src.Len(), cols)
	mustLen("WriteKV", len(at), len(dst))
	b.wrote(dst...)
	defer b.done()
	addr := make([]int64, len(dst))
	for i, d := range dst {
		r0, r1 := int(rows[i]), int(rows[i+1])
		o := int(at[i]) * cols
		if o < 0 || o+(r1-r0)*cols > d.Len() {
			panic(fmt.Sprintf("cuda backend: WriteKV: sequence %d: rows [%d, %d) do not fit a cache of %d rows", i, at[i], int(at[i])+r1-r0, d.Len()/max(cols, 1)))
		}
		addr[i] = int64(p(d))
	}
	// One launch for every sequence, not a copy each.
	if n := int(rows[len(dst)]) * cols; n > 0 {
		b.launch("kv_write_f32", b.grid(n, b.block()), b.longs(addr), b.ints(at), p(src), b.ints(rows), int32(len(dst)), int32(cols))
	}
}

// CachedAttention gathers the sequences' caches into one pool per k and
// v, as the decode kernel takes them: a copy of every cache per call.
func (b *DeviceBackend) CachedAttention(out, q backend.Tensor, ks, vs []backend.Tensor, rows, lens []int32, heads, kvHeads, headDim int) {
	defer b.done()
	nseq := len(ks)
	checkSeqRows("CachedAttention", rows, nseq, q.Len(), heads*headDim)
	mustLen("CachedAttention", out.Len(), q.Len())
	b.wrote(out)
	mustLen("CachedAttention", len(vs), nseq)
	mustLen("CachedAttention", len(lens), nseq)
	if kvHeads <= 0 || heads%kvHeads != 0 {
		panic(fmt.Sprintf("cuda backend: CachedAttention: %d heads over %d kv heads", heads, kvHeads))
	}
	kd := kvHeads * headDim
	kc, vc := make([]int64, nseq), make([]int64, nseq)
	for i := range ks {
		n := int64(lens[i]) * int64(kd)
		if n > int64(ks[i].Len()) || n > int64(vs[i].Len()) {
			panic(fmt.Sprintf("cuda backend: CachedAttention: sequence %d: %d keys in a cache of %d rows", i, lens[i], ks[i].Len()/max(kd, 1)))
		}
		kc[i], vc[i] = int64(p(ks[i])), int64(p(vs[i]))
	}
	nrows := int(rows[nseq])
	if nrows == 0 {
		return
	}
	// The kernel reads each sequence's caches where they are (tables of
	// their addresses): nothing is gathered into a pool first.
	b.launch("attn_decode_tab_f32", b.warpGrid(nrows*heads), p(out), p(q), b.longs(kc), b.longs(vc), b.ints(rows), b.ints(lens),
		int32(nseq), int32(heads), int32(kvHeads), int32(headDim))
}

func (b *DeviceBackend) GatherRows(dst, src backend.Tensor, idx []int32, cols int) {
	defer b.done()
	mustLen("GatherRows", dst.Len(), len(idx)*cols)
	b.wrote(dst)
	b.elems("gather_rows_f32", len(idx)*cols, p(dst), p(src), b.ints(idx), int32(len(idx)), int32(cols))
}

func (b *DeviceBackend) ScatterAddRows(dst, src backend.Tensor, idx []int32, cols int) {
	defer b.done()
	mustLen("ScatterAddRows", src.Len(), len(idx)*cols)
	b.wrote(dst)
	if len(idx) > 0 && cols > 0 {
		dests, offs, order := groupRows(idx, dst.Len()/cols)
		b.elems("scatter_add_rows_f32", len(dests)*cols, p(dst), p(src), b.ints(dests), b.ints(offs), b.ints(order), int32(len(dests)), int32(cols))
	}
}

// groupRows groups the rows i of a scatter-add by destination idx[i]: the
// destinations in increasing order, where each one's rows start in order
// (offs, one more than dests), and the rows themselves, increasing within a
// destination. An index outside [0, n) panics, as the CPU backend's does.
func groupRows(idx []int32, n int) (dests, offs, order []int32) {
	order = make([]int32, len(idx))
	for i, r := range idx {
		if r < 0 || int(r) >= n {
			panic(fmt.Sprintf("cuda backend: ScatterAddRows: row %d of a %d-row destination", r, n))
		}
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(idx[a], idx[b]) })
	for j, i := range order {
		if j == 0 || idx[i] != idx[order[j-1]] {
			dests = append(dests, idx[i])
			offs = append(offs, int32(j))
		}
	}
	return dests, append(offs, int32(len(order))), order
}

func (b *DeviceBackend) LogProbs(logp, entropy, lse, logits backend.Tensor, targets []int32, rows, vocab int) {
	defer b.done()
	b.wrote(logp, entropy, lse)
	if rows > 0 {
		b.launch("logprobs_fwd_f32", D1(rows), p(logp), p(entropy), p(lse), p(logits), b.ints(targets[:rows]), int32(rows), int32(vocab))
	}
}

func (b *DeviceBackend) LogProbsBackward(dLogits, logits, lse, dLogp, dEntropy backend.Tensor, targets []int32, rows, vocab int) {
	defer b.done()
	b.wrote(dLogits)
	if rows == 0 {
		return
	}
	var dEnt any = Null{}
	if dEntropy != nil {
		dEnt = p(dEntropy)
	}
	b.launch("logprobs_bwd_f32", D1(rows), p(dLogits), p(logits), p(lse), p(dLogp), dEnt, b.ints(targets[:rows]), int32(rows), int32(vocab))
}

var _ backend.BF16Storage = (*DeviceBackend)(nil)

// AllocBF16 returns n bf16 zeros in device memory (half a float32
// tensor's bytes).
func (b *DeviceBackend) AllocBF16(n int) backend.Tensor {
	return b.zeros(&Tensor{n: n, bf16: true}, 2, "bf16 tensor")
}

// ToBF16 rounds src into the bf16 tensor dst (cast_f32_bf16).
func (b *DeviceBackend) ToBF16(dst, src backend.Tensor) {
	d, s := dt(dst), dt(src)
	if !d.bf16 || s.bf16 {
		panic("cuda backend: ToBF16 wants a bf16 destination and a float32 source")
	}
	mustLen("ToBF16", d.n, s.n)
	b.wrote(dst)
	b.elems("cast_f32_bf16", d.n, d.p, s.p, int64(d.n))
}

// FromBF16 widens the bf16 tensor src into dst (cast_bf16_f32).
func (b *DeviceBackend) FromBF16(dst, src backend.Tensor) {
	d, s := dt(dst), dt(src)
	if d.bf16 || !s.bf16 {
		panic("cuda backend: FromBF16 wants a float32 destination and a bf16 source")
	}
	mustLen("FromBF16", d.n, s.n)
	b.wrote(dst)
	b.elems("cast_bf16_f32", d.n, d.p, s.p, int64(d.n))
	b.lendCast(d, s)
}
