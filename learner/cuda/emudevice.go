package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/rlnode/rlnode/learner/blas"
)

// EmuDevice is an Accel on the CPU: "device memory" is host memory owned
// by the EmuDevice, kernels run in-process in the emulation's shared
// library (EmulatorLibrary: the same kernels/*.cu under emu/cuda_emu.h),
// and matrix products run in learner/blas (bf16 operands widened to fp32
// first, so the product is the fp32 product of the rounded values, as
// cuBLASLt computes it with fp32 accumulation). Every copy and product is
// bounds-checked against its allocation, so a wrong offset fails with an
// error where a GPU would corrupt memory. Operations run when issued.
//
// A kernel that never finishes hangs the caller: unlike Emulator, the
// emulation runs in this process and cannot be killed.
type EmuDevice struct {
	// Capacity bounds the bytes allocated at once (0: no bound); above it
	// Malloc fails with ErrOutOfMemory, as a full GPU does.
	Capacity int64

	launch func(name string, grid, block *uint32, args unsafe.Pointer, nargs int32, msg *byte, msgLen int32) int32
	allocs []emuBlock // by base address
	used   int64
	// Launches, Gemms, Copies (device to device) and AsyncUploads
	// (ToDeviceAsync) count the operations run.
	Launches, Gemms, Copies, AsyncUploads int
	// PinnedBytes counts the bytes copied to or from HostAlloc's buffers.
	PinnedBytes int64

	pinned     map[*byte][]byte // HostAlloc's buffers by address
	registered map[*byte][]byte // HostRegister's ranges by address
}

type emuBlock struct {
	base Ptr
	mem  []uint64 // 8-byte aligned storage; its address is base
}

func (b emuBlock) bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b.mem))), 8*len(b.mem))
}

// emuLaunchMu serializes launches process-wide: the emulation keeps the
// running launch's state in globals of the library.
var emuLaunchMu sync.Mutex

// OpenEmuDevice loads the emulation library at lib (EmulatorLibrary's
// path). With lib empty the device has memory, copies and products but
// no kernels.
func OpenEmuDevice(lib string) (*EmuDevice, error) {
	d := &EmuDevice{}
	if lib == "" {
		return d, nil
	}
	l, err := openLibrary("cuda emulation", []string{lib})
	if err != nil {
		return nil, err
	}
	if err := l.bind(map[string]any{"emu_launch": &d.launch}); err != nil {
		return nil, fmt.Errorf("cuda emulation: %w", err)
	}
	return d, nil
}

func (*EmuDevice) Name() string { return "emulated device (CPU)" }

// Used is the bytes allocated now (rounded up to 256 each), the figure
// Capacity bounds.
func (d *EmuDevice) Used() int64 { return d.used }

// Malloc allocates zeroed host memory standing for device memory.
func (d *EmuDevice) Malloc(bytes int64) (Ptr, error) {
	if bytes <= 0 || bytes > 1<<40 {
		return 0, fmt.Errorf("emulated device: malloc %d bytes: out of range", bytes)
	}
	n := (bytes + 255) / 256 * 256
	if d.Capacity > 0 && d.used+n > d.Capacity {
		return 0, fmt.Errorf("emulated device: malloc %d bytes with %d of %d in use: %w", bytes, d.used, d.Capacity, ErrOutOfMemory)
	}
	// 256 extra bytes to align the base as cudaMalloc does.
	mem := make([]uint64, (n+256)/8)
	base := Ptr(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
	skip := (256 - uint64(base)%256) % 256
	b := emuBlock{base: base + Ptr(skip), mem: mem[skip/8 : skip/8+uint64(n)/8]}
	i, _ := slices.BinarySearchFunc(d.allocs, b.base, func(e emuBlock, p Ptr) int { return cmpPtr(e.base, p) })
	d.allocs = slices.Insert(d.allocs, i, b)
	d.used += n
	return b.base, nil
}

func cmpPtr(a, b Ptr) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (d *EmuDevice) MemFree(p Ptr) error {
	i, ok := slices.BinarySearchFunc(d.allocs, p, func(e emuBlock, p Ptr) int { return cmpPtr(e.base, p) })
	if !ok {
		return fmt.Errorf("emulated device: free %#x: not an allocation", uint64(p))
	}
	d.used -= int64(8 * len(d.allocs[i].mem))
	d.allocs = slices.Delete(d.allocs, i, i+1)
	return nil
}

// span is the host memory of [p, p+n) bytes, which must lie inside one
// allocation.
func (d *EmuDevice) span(p Ptr, n int64) ([]byte, error) {
	i, ok := slices.BinarySearchFunc(d.allocs, p, func(e emuBlock, p Ptr) int { return cmpPtr(e.base, p) })
	if !ok {
		i--
	}
	if i < 0 || n < 0 {
		return nil, fmt.Errorf("emulated device: %#x: not device memory", uint64(p))
	}
	b := d.allocs[i].bytes()
	off := int64(p - d.allocs[i].base)
	if off > int64(len(b)) || off+n > int64(len(b)) {
		return nil, fmt.Errorf("emulated device: [%#x, +%d bytes) runs past its allocation of %d bytes at %#x", uint64(p), n, len(b), uint64(d.allocs[i].base))
	}
	return b[off : off+n], nil
}

func (d *EmuDevice) ToDevice(dst Ptr, src []byte) error {
	b, err := d.span(dst, int64(len(src)))
	if err != nil {
		return fmt.Errorf("copy to device: %w", err)
	}
	d.countPinned(src)
	copy(b, src)
	return nil
}

// ToDeviceAsync copies now, as every emulated operation runs when issued;
// like a GPU's queued copy it takes page-locked memory only (HostAlloc's
// or HostRegister's), and counts in AsyncUploads (not in PinnedBytes).
func (d *EmuDevice) ToDeviceAsync(dst Ptr, src []byte) error {
	if len(src) > 0 && !d.within(d.pinned, src) && !d.within(d.registered, src) {
		return fmt.Errorf("queued copy to device: %d bytes of memory that is not page-locked", len(src))
	}
	b, err := d.span(dst, int64(len(src)))
	if err != nil {
		return fmt.Errorf("queued copy to device: %w", err)
	}
	copy(b, src)
	d.AsyncUploads++
	return nil
}

func (d *EmuDevice) ToHost(dst []byte, src Ptr) error {
	b, err := d.span(src, int64(len(dst)))
	if err != nil {
		return fmt.Errorf("copy to host: %w", err)
	}
	d.countPinned(dst)
	copy(dst, b)
	return nil
}

func (d *EmuDevice) Copy(dst, src Ptr, n int64) error {
	s, err := d.span(src, n)
	if err != nil {
		return fmt.Errorf("device copy from: %w", err)
	}
	t, err := d.span(dst, n)
	if err != nil {
		return fmt.Errorf("device copy to: %w", err)
	}
	copy(t, s)
	d.Copies++
	return nil
}

func (d *EmuDevice) Zero(p Ptr, n int64) error {
	b, err := d.span(p, n)
	if err != nil {
		return fmt.Errorf("zero: %w", err)
	}
	clear(b)
	return nil
}

func (d *EmuDevice) Sync() error { return nil }
func (d *EmuDevice) Close() error {
	d.allocs, d.used, d.pinned, d.registered = nil, 0, nil, nil
	return nil
}

// Launch runs the kernel now; pointer arguments must point into this
// device's memory.
func (d *EmuDevice) Launch(kernel string, grid, block Dim3, args ...any) error {
	if err := checkArgs(kernel, grid, block, args); err != nil {
		return err
	}
	if d.launch == nil {
		return fmt.Errorf("launch %s: the emulated device was opened without its kernel library", kernel)
	}
	slots, err := argSlots(kernel, args, func(i int, p Ptr) error {
		if _, err := d.span(p, 0); err != nil {
			return fmt.Errorf("argument %d: %w", i, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	params := kernelParams(slots, &pin)
	g := [3]uint32{uint32(grid.X), uint32(grid.Y), uint32(grid.Z)}
	b := [3]uint32{uint32(block.X), uint32(block.Y), uint32(block.Z)}
	msg := make([]byte, 512)
	emuLaunchMu.Lock()
	r := d.launch(kernel, &g[0], &b[0], unsafe.Pointer(&params[0]), int32(len(params)), &msg[0], int32(len(msg)))
	emuLaunchMu.Unlock()
	if r != 0 {
		return fmt.Errorf("launch %s (grid %v, block %v): %s", kernel, grid, block, cString(msg))
	}
	d.Launches++
	return nil
}

// kernelParams is the kernel-parameter array of a launch: the address of
// each slot, slots and array pinned by pin for the call.
func kernelParams(slots []uint64, pin *runtime.Pinner) []unsafe.Pointer {
	params := make([]unsafe.Pointer, len(slots))
	pin.Pin(&slots[0])
	for i := range slots {
		params[i] = unsafe.Pointer(&slots[i])
	}
	pin.Pin(&params[0])
	return params
}

// argSlots lays out a launch's arguments as the kernel reads them: a
// device address, or a scalar in the low bytes (little-endian). check
// vets each pointer.
func argSlots(kernel string, args []any, check func(i int, p Ptr) error) ([]uint64, error) {
	slots := make([]uint64, max(len(args), 1))
	for i, a := range args {
		switch v := a.(type) {
		case Null:
		case Ptr:
			if err := check(i, v); err != nil {
				return nil, fmt.Errorf("launch %s: %w", kernel, err)
			}
			slots[i] = uint64(v)
		case int32:
			slots[i] = uint64(uint32(v))
		case int64:
			slots[i] = uint64(v)
		case float32:
			slots[i] = uint64(math.Float32bits(v))
		case float64:
			slots[i] = math.Float64bits(v)
		default:
			return nil, fmt.Errorf("launch %s: argument %d is %T: a device launch takes Ptr, not host slices", kernel, i, a)
		}
	}
	return slots, nil
}

// floats is the fp32 view of n elements at p; bf16 operands are widened
// into a new slice.
func (d *EmuDevice) floats(p Ptr, n int64, dt DType) ([]float32, error) {
	b, err := d.span(p, n*dt.Size())
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	if dt == F32 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), nil
	}
	h := unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n)
	out := make([]float32, n)
	for i, v := range h {
		out[i] = math.Float32frombits(uint32(v) << 16)
	}
	return out, nil
}

// Gemm runs the product in learner/blas: Sgemm for one matrix with zero
// strides (as the CPU backend's MatMul), SgemmBatched otherwise.
func (d *EmuDevice) Gemm(g Gemm) error {
	if err := g.check(); err != nil {
		return err
	}
	if g.A%4 != 0 || g.B%4 != 0 || g.C%4 != 0 {
		return errors.New("gemm: misaligned operand")
	}
	_, _, _, _, aExt, bExt, cExt := g.operands()
	a, err := d.floats(g.A, aExt, g.In)
	if err != nil {
		return fmt.Errorf("gemm A: %w", err)
	}
	b, err := d.floats(g.B, bExt, g.In)
	if err != nil {
		return fmt.Errorf("gemm B: %w", err)
	}
	c, err := d.floats(g.C, cExt, F32)
	if err != nil {
		return fmt.Errorf("gemm C: %w", err)
	}
	if g.M == 0 || g.N == 0 {
		return nil
	}
	if g.Batch == 1 && g.StrideA == 0 && g.StrideB == 0 && g.StrideC == 0 {
		blas.Sgemm(g.TransA, g.TransB, g.M, g.N, g.K, g.Alpha, a, g.LDA, b, g.LDB, g.Beta, c, g.LDC)
	} else {
		blas.SgemmBatched(g.TransA, g.TransB, g.Batch, g.M, g.N, g.K, g.Alpha, a, int(g.StrideA), g.LDA, b, int(g.StrideB), g.LDB, g.Beta, c, int(g.StrideC), g.LDC)
	}
	d.Gemms++
	return nil
}

var _ Accel = (*EmuDevice)(nil)
