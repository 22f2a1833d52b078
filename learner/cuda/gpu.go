package cuda

import (
	"errors"
	"fmt"
	"runtime"
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

// OpenGPU opens GPU index with its kernels and cuBLASLt.
func OpenGPU(index int) (*GPU, error) {
	dev, err := OpenDevice(index)
	if err != nil {
		return nil, err
	}
	lt, err := OpenCublasLt()
	if err != nil {
		dev.Close()
		return nil, err
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
		return nil, fmt.Errorf("GPU %d: %w", index, err)
	}
	return g, nil
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

// Gemm maps the row-major product onto cuBLASLt's column-major one: a
// row-major X is the column-major Xᵀ, so C = op(A)·op(B) is computed as
// Cᵀ = op(B)ᵀ·op(A)ᵀ with B's and A's storage as the operands.
func (g *GPU) Gemm(m Gemm) error {
	if err := m.check(); err != nil {
		return err
	}
	if m.M == 0 || m.N == 0 {
		return nil
	}
	lt := g.lt
	inType := int32(cudaR32F)
	if m.In == BF16 {
		inType = cudaR16BF
	}
	aRows, aCols, bRows, bCols, _, _, _ := m.operands()
	return g.on(func() error {
		var desc uintptr
		if r := lt.cublasLtMatmulDescCreate(&desc, cublasCompute32F, cudaR32F); r != 0 {
			return fmt.Errorf("cublasLtMatmulDescCreate: cuBLAS status %d", r)
		}
		defer lt.cublasLtMatmulDescDestroy(desc)
		op := func(t bool) int32 {
			if t {
				return cublasOpT
			}
			return cublasOpN
		}
		// The first operand is B's storage: column-major bCols×bRows.
		// set records the first failed attribute.
		var setErr error
		set := func(what string, r int32) {
			if r != 0 && setErr == nil {
				setErr = fmt.Errorf("gemm: set %s: cuBLAS status %d", what, r)
			}
		}
		ta, tb := op(m.TransB), op(m.TransA)
		set("transa", lt.cublasLtMatmulDescSetAttribute(desc, ltDescTransA, unsafe.Pointer(&ta), 4))
		set("transb", lt.cublasLtMatmulDescSetAttribute(desc, ltDescTransB, unsafe.Pointer(&tb), 4))
		var layouts [3]uintptr
		defer func() {
			for _, l := range layouts {
				if l != 0 {
					lt.cublasLtMatrixLayoutDestroy(l)
				}
			}
		}()
		specs := []struct {
			dtype      int32
			rows, cols int
			ld         int
			stride     int64
		}{
			{inType, bCols, bRows, m.LDB, m.StrideB},
			{inType, aCols, aRows, m.LDA, m.StrideA},
			{cudaR32F, m.N, m.M, m.LDC, m.StrideC},
		}
		for i, s := range specs {
			if r := lt.cublasLtMatrixLayoutCreate(&layouts[i], s.dtype, uint64(s.rows), uint64(s.cols), int64(s.ld)); r != 0 {
				return fmt.Errorf("cublasLtMatrixLayoutCreate: cuBLAS status %d", r)
			}
			if m.Batch > 1 {
				batch, stride := int32(m.Batch), s.stride
				set("batch count", lt.cublasLtMatrixLayoutSetAttribute(layouts[i], ltLayoutBatchCount, unsafe.Pointer(&batch), 4))
				set("batch stride", lt.cublasLtMatrixLayoutSetAttribute(layouts[i], ltLayoutStridedOffset, unsafe.Pointer(&stride), 8))
			}
		}
		var pref uintptr
		if r := lt.cublasLtMatmulPreferenceCreate(&pref); r != 0 {
			return fmt.Errorf("cublasLtMatmulPreferenceCreate: cuBLAS status %d", r)
		}
		defer lt.cublasLtMatmulPreferenceDestroy(pref)
		ws := uint64(gpuWorkspace)
		set("workspace", lt.cublasLtMatmulPreferenceSetAttribute(pref, ltPrefMaxWorkspace, unsafe.Pointer(&ws), 8))
		for i, p := range []Ptr{m.B, m.A, m.C, m.C} {
			al := alignment(p)
			set("alignment", lt.cublasLtMatmulPreferenceSetAttribute(pref, int32(ltPrefMinAlignA+i), unsafe.Pointer(&al), 4))
		}
		if setErr != nil {
			return setErr
		}
		var heur [ltHeuristicBytes]byte
		var found int32
		if r := lt.cublasLtMatmulAlgoGetHeuristic(g.handle, desc, layouts[0], layouts[1], layouts[2], layouts[2], pref, 1, unsafe.Pointer(&heur[0]), &found); r != 0 || found == 0 {
			return fmt.Errorf("gemm %dx%dx%d (batch %d, %s): no cuBLASLt algorithm (status %d)", m.M, m.N, m.K, m.Batch, m.In, r)
		}
		alpha, beta := m.Alpha, m.Beta
		r := lt.cublasLtMatmul(g.handle, desc, unsafe.Pointer(&alpha), uint64(m.B), layouts[0], uint64(m.A), layouts[1], unsafe.Pointer(&beta),
			uint64(m.C), layouts[2], uint64(m.C), layouts[2], unsafe.Pointer(&heur[0]), uint64(g.ws), gpuWorkspace, 0)
		if r != 0 {
			return fmt.Errorf("gemm %dx%dx%d (batch %d, %s): cublasLtMatmul: cuBLAS status %d", m.M, m.N, m.K, m.Batch, m.In, r)
		}
		return nil
	})
}

// Close frees the workspace and the cuBLASLt handle and closes the device.
func (g *GPU) Close() error {
	if g.dev.ctx != 0 {
		g.on(func() error {
			if g.ws != 0 {
				g.dev.drv.cuMemFree(uint64(g.ws))
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
