package cuda

import (
	"errors"
	"fmt"
)

// Ptr is a device address.
type Ptr uint64

// DType is a tensor element type on the device.
type DType uint8

const (
	F32  DType = iota // float32
	BF16              // bfloat16, as its 16 bits
)

// Size is the element size in bytes.
func (d DType) Size() int64 {
	if d == BF16 {
		return 2
	}
	return 4
}

func (d DType) String() string {
	if d == BF16 {
		return "bf16"
	}
	return "fp32"
}

// ParseDType reads "fp32"/"f32"/"float32" or "bf16"/"bfloat16".
func ParseDType(s string) (DType, error) {
	switch s {
	case "fp32", "f32", "float32":
		return F32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	}
	return 0, fmt.Errorf("dtype %q: want fp32 or bf16", s)
}

// Gemm is one (strided-batched) matrix product on the device,
// row-major as backend.Backend's: C = alpha·op(A)·op(B) + beta·C with
// op(A) M×K and op(B) K×N; matrix i of A starts StrideA elements after
// matrix i-1 and its rows are LDA apart (likewise B and C). A and B hold
// In elements, C fp32; accumulation is fp32. Beta 0 does not read C.
type Gemm struct {
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float32
	In             DType
	A              Ptr
	LDA            int
	StrideA        int64
	B              Ptr
	LDB            int
	StrideB        int64
	C              Ptr
	LDC            int
	StrideC        int64
	Batch          int
}

// Accel is the device a DeviceBackend runs on: raw memory, copies, the
// kernels of kernels/ by name, and matrix products. Operations run in the
// order they are issued (one stream); ToHost returns once the bytes and
// every operation issued before it are done, so a caller never sees a
// partial result. Freed memory may be reused by the next allocation even
// while earlier operations that read it are queued, since they run first.
// Methods are called by one goroutine at a time.
//
// Implementations: GPU (the CUDA driver API and cuBLASLt) and EmuDevice
// (host memory, the kernels built by the host C++ compiler under
// emu/cuda_emu.h, matrix products by learner/blas).
type Accel interface {
	// Name says which device this is, for messages and reports.
	Name() string
	// Malloc returns bytes of device memory with unspecified contents,
	// aligned to 256 bytes; an allocation the device cannot serve wraps
	// ErrOutOfMemory.
	Malloc(bytes int64) (Ptr, error)
	// MemFree releases what Malloc returned.
	MemFree(p Ptr) error
	// ToDevice copies src to dst; ToHost copies src to dst.
	ToDevice(dst Ptr, src []byte) error
	ToHost(dst []byte, src Ptr) error
	// Copy copies bytes within the device; Zero clears them.
	Copy(dst, src Ptr, bytes int64) error
	Zero(p Ptr, bytes int64) error
	// Launch queues a kernel over grid×block threads. Its pointer
	// arguments are Ptr (or Null), its scalars int32, int64, float32,
	// float64, in the kernel's order, checked against its declaration.
	Launch(kernel string, grid, block Dim3, args ...any) error
	// Gemm queues a matrix product.
	Gemm(g Gemm) error
	// Sync waits for every queued operation and reports a failure of any.
	Sync() error
	// Close releases the device; nothing may be used afterwards.
	Close() error
}

// ErrOutOfMemory: the device could not serve an allocation.
var ErrOutOfMemory = errors.New("out of device memory")

// extent is the number of elements a (strided-batched) row-major matrix
// operand spans: rows×cols stored with leading dimension ld.
func extent(batch int, stride int64, rows, cols, ld int) int64 {
	if batch == 0 || rows == 0 || cols == 0 {
		return 0
	}
	return int64(batch-1)*stride + int64(rows-1)*int64(ld) + int64(cols)
}

// operands gives the stored shape of A and B (rows, cols as laid out in
// memory, row-major) and their extents in elements.
func (g Gemm) operands() (aRows, aCols, bRows, bCols int, aExt, bExt, cExt int64) {
	aRows, aCols = g.M, g.K
	if g.TransA {
		aRows, aCols = g.K, g.M
	}
	bRows, bCols = g.K, g.N
	if g.TransB {
		bRows, bCols = g.N, g.K
	}
	b := max(g.Batch, 1)
	return aRows, aCols, bRows, bCols, extent(b, g.StrideA, aRows, aCols, g.LDA), extent(b, g.StrideB, bRows, bCols, g.LDB), extent(b, g.StrideC, g.M, g.N, g.LDC)
}

// check rejects shapes no implementation can run.
func (g Gemm) check() error {
	_, aCols, _, bCols, _, _, _ := g.operands()
	switch {
	case g.M < 0 || g.N < 0 || g.K < 0 || g.Batch < 1:
		return fmt.Errorf("gemm: m %d, n %d, k %d, batch %d", g.M, g.N, g.K, g.Batch)
	case g.LDA < max(aCols, 1) || g.LDB < max(bCols, 1) || g.LDC < max(g.N, 1):
		return fmt.Errorf("gemm: leading dimensions %d, %d, %d below the rows' %d, %d, %d", g.LDA, g.LDB, g.LDC, aCols, bCols, g.N)
	case g.StrideA < 0 || g.StrideB < 0 || g.StrideC < 0:
		return fmt.Errorf("gemm: negative stride")
	}
	return nil
}
