package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/rlnode/rlnode/learner/backend"
)

// HostAllocator is an Accel that gives page-locked host memory: copies
// between it and the device run straight from it (a GPU's copy engine
// reads and writes it at bus speed, with no staging copy through a driver
// buffer as ordinary, pageable memory needs).
type HostAllocator interface {
	// HostAlloc returns bytes of page-locked host memory, contents
	// unspecified.
	HostAlloc(bytes int64) ([]byte, error)
	// HostFree releases what HostAlloc returned.
	HostFree(b []byte) error
}

var _ backend.PinnedHost = (*DeviceBackend)(nil)

// HostBuffer returns n zeroed float32s of page-locked host memory from
// the device (cuMemAllocHost on a GPU), or nil where the device has none
// or can give no more: ordinary memory serves then. FreeHostBuffer or
// Close frees it; it must not be used after Close.
func (b *DeviceBackend) HostBuffer(n int) []float32 {
	h, ok := b.D.(HostAllocator)
	if !ok || n <= 0 || !b.ok() {
		return nil
	}
	mem, err := h.HostAlloc(4 * int64(n))
	if err != nil || len(mem) != 4*n {
		return nil
	}
	if b.pinned == nil {
		b.pinned = map[*byte][]byte{}
	}
	b.pinned[unsafe.SliceData(mem)] = mem
	x := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(mem))), n)
	clear(x)
	return x
}

// FreeHostBuffer frees what HostBuffer returned; for any other slice it
// does nothing.
func (b *DeviceBackend) FreeHostBuffer(x []float32) {
	if len(x) == 0 {
		return
	}
	key := (*byte)(unsafe.Pointer(unsafe.SliceData(x)))
	mem, ok := b.pinned[key]
	if !ok {
		return
	}
	delete(b.pinned, key)
	b.fail(b.D.(HostAllocator).HostFree(mem))
}

// PinnedBuffers is how many HostBuffer buffers are held.
func (b *DeviceBackend) PinnedBuffers() int { return len(b.pinned) }

// freePinned frees every host buffer still held (Close).
func (b *DeviceBackend) freePinned() error {
	var errs []error
	for key, mem := range b.pinned {
		if err := b.D.(HostAllocator).HostFree(mem); err != nil {
			errs = append(errs, fmt.Errorf("cuda backend: free a host buffer of %d bytes: %w", len(mem), err))
		}
		delete(b.pinned, key)
	}
	return errors.Join(errs...)
}

// HostAlloc gives ordinary host memory (there is no bus to pin it for);
// copies between it and the device are counted in PinnedBytes, so tests
// see which transfers a GPU would run from page-locked memory.
func (d *EmuDevice) HostAlloc(bytes int64) ([]byte, error) {
	if bytes <= 0 || bytes > 1<<40 {
		return nil, fmt.Errorf("emulated device: host alloc %d bytes: out of range", bytes)
	}
	mem := make([]uint64, (bytes+7)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(mem))), bytes)
	if d.pinned == nil {
		d.pinned = map[*byte][]byte{}
	}
	d.pinned[unsafe.SliceData(b)] = b
	return b, nil
}

// HostFree releases what HostAlloc returned; anything else is an error.
func (d *EmuDevice) HostFree(b []byte) error {
	key := unsafe.SliceData(b)
	if got, ok := d.pinned[key]; !ok || len(got) != len(b) {
		return fmt.Errorf("emulated device: host free of %d bytes that HostAlloc did not return", len(b))
	}
	delete(d.pinned, key)
	return nil
}

// countPinned adds len(h) to PinnedBytes where h lies in a HostAlloc
// buffer.
func (d *EmuDevice) countPinned(h []byte) {
	if len(h) == 0 || len(d.pinned) == 0 {
		return
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(h)))
	for key, mem := range d.pinned {
		base := uintptr(unsafe.Pointer(key))
		if lo >= base && lo+uintptr(len(h)) <= base+uintptr(len(mem)) {
			d.PinnedBytes += int64(len(h))
			return
		}
	}
}

// HostAlloc is cuMemAllocHost in the GPU's context.
func (g *GPU) HostAlloc(bytes int64) ([]byte, error) {
	if bytes <= 0 || bytes > 1<<40 {
		return nil, fmt.Errorf("host alloc %d bytes: out of range", bytes)
	}
	var p unsafe.Pointer
	err := g.on(func() error {
		return g.drvErr(fmt.Sprintf("cuMemAllocHost(%d)", bytes), g.dev.drv.cuMemAllocHost(&p, uint64(bytes)))
	})
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("cuMemAllocHost(%d) on GPU %d returned no memory", bytes, g.dev.Info.Index)
	}
	return unsafe.Slice((*byte)(p), bytes), nil
}

// HostFree is cuMemFreeHost.
func (g *GPU) HostFree(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return g.on(func() error {
		return g.drvErr("cuMemFreeHost", g.dev.drv.cuMemFreeHost(unsafe.Pointer(unsafe.SliceData(b))))
	})
}
