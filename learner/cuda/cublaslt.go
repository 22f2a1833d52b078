package cuda

import (
	"fmt"
	"unsafe"
)

// MinCublasLt is the oldest cuBLASLt the backend accepts: bf16 GEMMs with
// fp32 accumulation on sm_90.
var MinCublasLt = Version{11, 11}

// CublasLtCandidates are the names cuBLASLt is looked up by, newest first.
var CublasLtCandidates = []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"}

// CublasLt is NVIDIA's GEMM library, loaded at run time. Its functions are
// bound now and called by the device backend; on a host without a GPU only
// the version is read.
type CublasLt struct {
	lib     *library
	version Version

	cublasLtGetVersion                   func() uint64
	cublasLtCreate                       func(h *uintptr) int32
	cublasLtDestroy                      func(h uintptr) int32
	cublasLtMatmulDescCreate             func(d *uintptr, computeType, scaleType int32) int32
	cublasLtMatmulDescDestroy            func(d uintptr) int32
	cublasLtMatmulDescSetAttribute       func(d uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	cublasLtMatrixLayoutCreate           func(l *uintptr, dtype int32, rows, cols uint64, ld int64) int32
	cublasLtMatrixLayoutDestroy          func(l uintptr) int32
	cublasLtMatrixLayoutSetAttribute     func(l uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	cublasLtMatmulPreferenceCreate       func(p *uintptr) int32
	cublasLtMatmulPreferenceDestroy      func(p uintptr) int32
	cublasLtMatmulPreferenceSetAttribute func(p uintptr, attr int32, buf unsafe.Pointer, size uint64) int32
	cublasLtMatmulAlgoGetHeuristic       func(h, desc, a, b, c, d, pref uintptr, requested int32, results unsafe.Pointer, returned *int32) int32
	cublasLtMatmul                       func(h, desc uintptr, alpha unsafe.Pointer, a uint64, aDesc uintptr, b uint64, bDesc uintptr, beta unsafe.Pointer, c uint64, cDesc uintptr, d uint64, dDesc uintptr, algo unsafe.Pointer, workspace uint64, wsSize uint64, stream uintptr) int32
}

// OpenCublasLt loads cuBLASLt from the first of candidates that opens
// (when none are given: $RLNODE_CUBLASLT alone if set, else
// CublasLtCandidates, then NVIDIA's Python wheels). The errors wrap ErrNoLibrary,
// ErrNoSymbol or ErrTooOld.
func OpenCublasLt(candidates ...string) (*CublasLt, error) {
	if len(candidates) == 0 {
		candidates = searchList(EnvCublasLt, CublasLtCandidates, "libcublasLt.so.1[0-9]*")
	}
	lib, err := openLibrary("cuBLASLt", candidates)
	if err != nil {
		return nil, err
	}
	c := &CublasLt{lib: lib}
	if err := lib.bind(map[string]any{
		"cublasLtGetVersion":                   &c.cublasLtGetVersion,
		"cublasLtCreate":                       &c.cublasLtCreate,
		"cublasLtDestroy":                      &c.cublasLtDestroy,
		"cublasLtMatmulDescCreate":             &c.cublasLtMatmulDescCreate,
		"cublasLtMatmulDescDestroy":            &c.cublasLtMatmulDescDestroy,
		"cublasLtMatmulDescSetAttribute":       &c.cublasLtMatmulDescSetAttribute,
		"cublasLtMatrixLayoutCreate":           &c.cublasLtMatrixLayoutCreate,
		"cublasLtMatrixLayoutDestroy":          &c.cublasLtMatrixLayoutDestroy,
		"cublasLtMatrixLayoutSetAttribute":     &c.cublasLtMatrixLayoutSetAttribute,
		"cublasLtMatmulPreferenceCreate":       &c.cublasLtMatmulPreferenceCreate,
		"cublasLtMatmulPreferenceDestroy":      &c.cublasLtMatmulPreferenceDestroy,
		"cublasLtMatmulPreferenceSetAttribute": &c.cublasLtMatmulPreferenceSetAttribute,
		"cublasLtMatmulAlgoGetHeuristic":       &c.cublasLtMatmulAlgoGetHeuristic,
		"cublasLtMatmul":                       &c.cublasLtMatmul,
	}); err != nil {
		return nil, fmt.Errorf("cuBLASLt: %w", err)
	}
	// cublasLtGetVersion is major*10000 + minor*100 + patch (CUDA 11 and
	// later).
	v := c.cublasLtGetVersion()
	c.version = Version{int(v / 10000), int(v % 10000 / 100)}
	if c.version.Less(MinCublasLt) {
		return nil, fmt.Errorf("cuBLASLt %s: %w: it is %s, the backend needs %s or newer", lib.path, ErrTooOld, c.version, MinCublasLt)
	}
	return c, nil
}

// Path is the library cuBLASLt was loaded from.
func (c *CublasLt) Path() string { return c.lib.path }

// Version is cuBLASLt's major.minor version.
func (c *CublasLt) Version() Version { return c.version }
