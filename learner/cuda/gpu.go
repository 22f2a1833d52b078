package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

// GPU is an Accel on one GPU: memory through the driver API, the kernels
// of a Device (NVRTC output loaded as modules, cached on disk), matrix
// products through cuBLASLt with fp32 accumulation. Everything runs on the
// legacy default stream, so operations run in the order issued; ToHost
// waits for them.
//
// This code has not yet run on a GPU.
type GPU struct {
	dev    *Device
	lt     *CublasLt
	handle uintptr
	ws     Ptr // cuBLASLt's workspace
	plans  *planCache[ltKey, *ltPlan]
}

// gpuWorkspace is the workspace cuBLASLt's algorithms may use (32 MiB, as
// PyTorch gives it on Hopper).
const gpuWorkspace = 32 << 20

// CUDA and cuBLAS constants used here (cuda.h, library_types.h,
// cublas_api.h, cublasLt.h).
const (
	cudaErrorOutOfMemory  = 2
	cudaR32F              = 0
	cudaR16BF             = 14
	cublasCompute32F      = 68
	cublasOpN, cublasOpT  = 0, 1
	ltDescTransA          = 3
	ltDescTransB          = 4
	ltLayoutBatchCount    = 5
	ltLayoutStridedOffset = 6
	ltPrefMaxWorkspace    = 1
	ltPrefMinAlignA       = 5 // B, C, D follow
	ltHeuristicBytes      = 96
)

// OpenGPU opens GPU index with its kernels and cuBLASLt. Its errors
// name the GPU first ("GPU 0: ...").
func OpenGPU(index int) (*GPU, error) {
	dev, err := OpenDevice(index)
	if err != nil {
		return nil, onGPU(index, err)
	}
	lt, err := OpenCublasLt()
	if err != nil {
		dev.Close()
		return nil, onGPU(index, err)
	}
	g := &GPU{dev: dev, lt: lt}
	err = g.on(func() error {
		if r := lt.cublasLtCreate(&g.handle); r != 0 {
			return fmt.Errorf("cublasLtCreate: cuBLAS status %d", r)
		}
		var p uint64
		if r := dev.drv.cuMemAlloc(&p, gpuWorkspace); r != cudaSuccess {
			return fmt.Errorf("cuBLASLt workspace: cuMemAlloc(%d): %w", gpuWorkspace, dev.drv.err(r))
		}
		g.ws = Ptr(p)
		return nil
	})
	if err != nil {
		g.Close()
		return nil, onGPU(index, err)
	}
	return g, nil
}

// onGPU prefixes err with "GPU index: " unless its message names that
// GPU first already.
func onGPU(index int, err error) error {
	p := fmt.Sprintf("GPU %d", index)
	if m := err.Error(); strings.HasPrefix(m, p+":") || strings.HasPrefix(m, p+" ") {
		return err
	}
	return fmt.Errorf("%s: %w", p, err)
}

func (g *GPU) Name() string { return "GPU " + g.dev.Info.String() }

// on runs fn with the GPU's context current on a locked thread.
func (g *GPU) on(fn func() error) error {
	g.dev.mu.Lock()
	defer g.dev.mu.Unlock()
	if g.dev.ctx == 0 {
		return errors.New("the GPU is closed")
	}
	return g.dev.drv.onContext(g.dev.ctx, fn)
}

func (g *GPU) drvErr(what string, r int32) error {
	if r == cudaSuccess {
		return nil
	}
	err := g.dev.drv.err(r)
	if r == cudaErrorOutOfMemory {
		return fmt.Errorf("%s on GPU %d: %w: %w", what, g.dev.Info.Index, ErrOutOfMemory, err)
	}
	return fmt.Errorf("%s on GPU %d: %w", what, g.dev.Info.Index, err)
}

func (g *GPU) Malloc(bytes int64) (Ptr, error) {
	var p uint64
	err := g.on(func() error {
		return g.drvErr(fmt.Sprintf("cuMemAlloc(%d)", bytes), g.dev.drv.cuMemAlloc(&p, uint64(bytes)))
	})
	return Ptr(p), err
}

func (g *GPU) MemFree(p Ptr) error {
	return g.on(func() error { return g.drvErr("cuMemFree", g.dev.drv.cuMemFree(uint64(p))) })
}

func (g *GPU) ToDevice(dst Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return g.on(func() error {
		return g.drvErr("copy to device", g.dev.drv.cuMemcpyHtoD(uint64(dst), unsafe.Pointer(&src[0]), uint64(len(src))))
	})
}

// ToDeviceAsync queues src's copy on the default stream, behind the
// kernels queued before it (AsyncUploader: src must be page-locked).
func (g *GPU) ToDeviceAsync(dst Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return g.on(func() error {
		return g.drvErr("queued copy to device", g.dev.drv.cuMemcpyHtoDAsync(uint64(dst), unsafe.Pointer(&src[0]), uint64(len(src)), 0))
	})
}

func (g *GPU) ToHost(dst []byte, src Ptr) error {
	if len(dst) == 0 {
		return g.Sync()
	}
	return g.on(func() error {
		return g.drvErr("copy to host", g.dev.drv.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), uint64(src), uint64(len(dst))))
	})
}

func (g *GPU) Copy(dst, src Ptr, bytes int64) error {
	return g.on(func() error {
		return g.drvErr("device copy", g.dev.drv.cuMemcpyDtoD(uint64(dst), uint64(src), uint64(bytes)))
	})
}

func (g *GPU) Zero(p Ptr, bytes int64) error {
	return g.on(func() error { return g.drvErr("cuMemsetD8", g.dev.drv.cuMemsetD8(uint64(p), 0, uint64(bytes))) })
}

func (g *GPU) Sync() error {
	return g.on(func() error { return g.drvErr("synchronize", g.dev.drv.cuCtxSynchronize()) })
}

func (g *GPU) Launch(kernel string, grid, block Dim3, args ...any) error {
	if err := checkArgs(kernel, grid, block, args); err != nil {
		return err
	}
	fn, ok := g.dev.fns[kernel]
	if !ok {
		return fmt.Errorf("launch %s: not loaded on GPU %d", kernel, g.dev.Info.Index)
	}
	slots, err := argSlots(kernel, args, func(int, Ptr) error { return nil })
	if err != nil {
		return err
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	params := kernelParams(slots, &pin)
	return g.on(func() error {
		r := g.dev.drv.cuLaunchKernel(fn, uint32(grid.X), uint32(grid.Y), uint32(grid.Z), uint32(block.X), uint32(block.Y), uint32(block.Z), 0, 0, unsafe.Pointer(&params[0]), nil)
		return g.drvErr(fmt.Sprintf("launch %s (grid %v, block %v)", kernel, grid, block), r)
	})
}

// alignment is the largest power of two up to 256 dividing p.
func alignment(p Ptr) uint32 {
	a := uint32(256)
	for a > 1 && uint64(p)%uint64(a) != 0 {
		a /= 2
	}
	return a
}

// gemmKey is the product's plan key. cuBLASLt's operands are B, A, C
// and D (= C), in that order. The alignment promised for an operand is
// that of every matrix in it: matrix i of a batch starts at the base plus
// i·stride elements, so with a batch the stride's bytes bound it too (the
// heuristic sees the base's alignment only through this promise).
func gemmKey(m Gemm) ltKey {
	key := ltKey{transA: m.TransA, transB: m.TransB, m: m.M, n: m.N, k: m.K, batch: m.Batch, in: m.In, lda: m.LDA, ldb: m.LDB, ldc: m.LDC}
	if m.Batch > 1 {
		key.strideA, key.strideB, key.strideC = m.StrideA, m.StrideB, m.StrideC
	}
	in := m.In.Size()
	for i, o := range []struct {
		p      Ptr
		stride int64
		size   int64
	}{{m.B, key.strideB, in}, {m.A, key.strideA, in}, {m.C, key.strideC, F32.Size()}, {m.C, key.strideC, F32.Size()}} {
		key.align[i] = min(alignment(o.p), alignment(Ptr(o.stride*o.size)))
	}
	return key
}

// ltKey is what a product's cuBLASLt descriptors and algorithm depend
// on: its shape, types and layouts, and its operands' alignments (not
// their addresses, nor alpha and beta, which cublasLtMatmul takes).
type ltKey struct {
	transA, transB            bool
	m, n, k, batch            int
	in                        DType
	lda, ldb, ldc             int
	strideA, strideB, strideC int64 // zero unless batch > 1
	align                     [4]uint32
}

// ltPlan is a product's descriptors and the algorithm cuBLASLt's
// heuristic chose for them.
type ltPlan struct {
	desc    uintptr
	layouts [3]uintptr
	pref    uintptr
	algo    [ltHeuristicBytes]byte
}

// gemmPlans bounds the cached plans (a training step uses a few dozen).
const gemmPlans = 1024

// destroy releases the plan's descriptors; zero handles are skipped.
func (p *ltPlan) destroy(lt *CublasLt) {
	for _, l := range p.layouts {
		if l != 0 {
			lt.cublasLtMatrixLayoutDestroy(l)
		}
	}
	if p.pref != 0 {
		lt.cublasLtMatmulPreferenceDestroy(p.pref)
	}
	if p.desc != 0 {
		lt.cublasLtMatmulDescDestroy(p.desc)
	}
}

// GemmPlans reports the cuBLASLt plan cache's hits and misses: a miss
// builds descriptors and runs the heuristic, a hit reuses them.
func (g *GPU) GemmPlans() (hits, misses int64) {
	g.dev.mu.Lock()
	defer g.dev.mu.Unlock()
	if g.plans == nil {
		return 0, 0
	}
	return g.plans.Hits, g.plans.Misses
}

// Gemm maps the row-major product onto cuBLASLt's column-major one: a
// row-major X is the column-major Xᵀ, so C = op(A)·op(B) is computed as
// Cᵀ = op(B)ᵀ·op(A)ᵀ with B's and A's storage as the operands. The
// descriptors and algorithm of each shape are built once (plan).
func (g *GPU) Gemm(m Gemm) error {
	if err := m.check(); err != nil {
		return err
	}
	if m.M == 0 || m.N == 0 {
		return nil
	}
	key := gemmKey(m)
	return g.on(func() error {
		if g.plans == nil {
			g.plans = newPlanCache[ltKey, *ltPlan](gemmPlans, func(p *ltPlan) { p.destroy(g.lt) })
		}
		pl, err := g.plans.get(key, func() (*ltPlan, error) { return g.plan(key) })
		if err != nil {
			return fmt.Errorf("gemm %dx%dx%d (batch %d, %s): %w", m.M, m.N, m.K, m.Batch, m.In, err)
		}
		alpha, beta := m.Alpha, m.Beta
		r := g.lt.cublasLtMatmul(g.handle, pl.desc, unsafe.Pointer(&alpha), uint64(m.B), pl.layouts[0], uint64(m.A), pl.layouts[1], unsafe.Pointer(&beta),
			uint64(m.C), pl.layouts[2], uint64(m.C), pl.layouts[2], unsafe.Pointer(&pl.algo[0]), uint64(g.ws), gpuWorkspace, 0)
		if r != 0 {
			return fmt.Errorf("gemm %dx%dx%d (batch %d, %s): cublasLtMatmul: cuBLAS status %d", m.M, m.N, m.K, m.Batch, m.In, r)
		}
		return nil
	})
}

// plan builds k's descriptors and asks the heuristic for an algorithm;
// on failure it releases what it built.
func (g *GPU) plan(k ltKey) (pl *ltPlan, err error) {
	lt := g.lt
	pl = &ltPlan{}
	defer func() {
		if err != nil {
			pl.destroy(lt)
			pl = nil
		}
	}()
	inType := int32(cudaR32F)
	if k.in == BF16 {
		inType = cudaR16BF
	}
	if r := lt.cublasLtMatmulDescCreate(&pl.desc, cublasCompute32F, cudaR32F); r != 0 {
		pl.desc = 0
		return nil, fmt.Errorf("cublasLtMatmulDescCreate: cuBLAS status %d", r)
	}
	op := func(t bool) int32 {
		if t {
			return cublasOpT
		}
		return cublasOpN
	}
	// set records the first failed attribute.
	var setErr error
	set := func(what string, r int32) {
		if r != 0 && setErr == nil {
			setErr = fmt.Errorf("set %s: cuBLAS status %d", what, r)
		}
	}
	// The first operand is B's storage: column-major bCols×bRows.
	ta, tb := op(k.transB), op(k.transA)
	set("transa", lt.cublasLtMatmulDescSetAttribute(pl.desc, ltDescTransA, unsafe.Pointer(&ta), 4))
	set("transb", lt.cublasLtMatmulDescSetAttribute(pl.desc, ltDescTransB, unsafe.Pointer(&tb), 4))
	aRows, aCols, bRows, bCols, _, _, _ := Gemm{TransA: k.transA, TransB: k.transB, M: k.m, N: k.n, K: k.k}.operands()
	specs := []struct {
		dtype      int32
		rows, cols int
		ld         int
		stride     int64
	}{
		{inType, bCols, bRows, k.ldb, k.strideB},
		{inType, aCols, aRows, k.lda, k.strideA},
		{cudaR32F, k.n, k.m, k.ldc, k.strideC},
	}
	for i, s := range specs {
		if r := lt.cublasLtMatrixLayoutCreate(&pl.layouts[i], s.dtype, uint64(s.rows), uint64(s.cols), int64(s.ld)); r != 0 {
			pl.layouts[i] = 0
			return nil, fmt.Errorf("cublasLtMatrixLayoutCreate: cuBLAS status %d", r)
		}
		if k.batch > 1 {
			batch, stride := int32(k.batch), s.stride
			set("batch count", lt.cublasLtMatrixLayoutSetAttribute(pl.layouts[i], ltLayoutBatchCount, unsafe.Pointer(&batch), 4))
			set("batch stride", lt.cublasLtMatrixLayoutSetAttribute(pl.layouts[i], ltLayoutStridedOffset, unsafe.Pointer(&stride), 8))
		}
	}
	if r := lt.cublasLtMatmulPreferenceCreate(&pl.pref); r != 0 {
		pl.pref = 0
		return nil, fmt.Errorf("cublasLtMatmulPreferenceCreate: cuBLAS status %d", r)
	}
	ws := uint64(gpuWorkspace)
	set("workspace", lt.cublasLtMatmulPreferenceSetAttribute(pl.pref, ltPrefMaxWorkspace, unsafe.Pointer(&ws), 8))
	for i := range k.align {
		set("alignment", lt.cublasLtMatmulPreferenceSetAttribute(pl.pref, int32(ltPrefMinAlignA+i), unsafe.Pointer(&k.align[i]), 4))
	}
	if setErr != nil {
		return nil, setErr
	}
	var found int32
	if r := lt.cublasLtMatmulAlgoGetHeuristic(g.handle, pl.desc, pl.layouts[0], pl.layouts[1], pl.layouts[2], pl.layouts[2], pl.pref, 1, unsafe.Pointer(&pl.algo[0]), &found); r != 0 || found == 0 {
		return nil, fmt.Errorf("no cuBLASLt algorithm (status %d)", r)
	}
	return pl, nil
}

// Close frees the workspace and the cuBLASLt handle and closes the device.
func (g *GPU) Close() error {
	if g.dev.ctx != 0 {
		g.on(func() error {
			if g.ws != 0 {
				g.dev.drv.cuMemFree(uint64(g.ws))
			}
			if g.plans != nil {
				g.plans.clear()
			}
			if g.handle != 0 {
				g.lt.cublasLtDestroy(g.handle)
			}
			return nil
		})
	}
	return g.dev.Close()
}

var _ Accel = (*GPU)(nil)
