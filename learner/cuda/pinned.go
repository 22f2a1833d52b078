package cuda

import (
	"errors"
	"fmt"
	"os"
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
	// HostRegister page-locks memory allocated elsewhere until
	// HostUnregister, which must come before that memory goes away.
	HostRegister(b []byte) error
	HostUnregister(b []byte) error
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

// PinHostBuffer page-locks x (memory the caller owns) until
// UnpinHostBuffer or Close; it reports whether the device could.
func (b *DeviceBackend) PinHostBuffer(x []float32) bool {
	h, ok := b.D.(HostAllocator)
	if !ok || len(x) == 0 || !b.ok() {
		return false
	}
	mem := f32Bytes(x)
	if _, dup := b.registered[unsafe.SliceData(mem)]; dup {
		return false
	}
	if err := h.HostRegister(mem); err != nil {
		return false
	}
	if b.registered == nil {
		b.registered = map[*byte][]byte{}
	}
	b.registered[unsafe.SliceData(mem)] = mem
	return true
}

// UnpinHostBuffer undoes PinHostBuffer(x); for any other slice it does
// nothing.
func (b *DeviceBackend) UnpinHostBuffer(x []float32) {
	if len(x) == 0 {
		return
	}
	key := (*byte)(unsafe.Pointer(unsafe.SliceData(x)))
	mem, ok := b.registered[key]
	if !ok {
		return
	}
	delete(b.registered, key)
	b.fail(b.D.(HostAllocator).HostUnregister(mem))
}

// PinnedBuffers is how many HostBuffer buffers are held and buffers
// pinned by PinHostBuffer.
func (b *DeviceBackend) PinnedBuffers() int { return len(b.pinned) + len(b.registered) }

// freePinned frees every host buffer still held and unpins what is still
// pinned (Close).
func (b *DeviceBackend) freePinned() error {
	var errs []error
	for key, mem := range b.pinned {
		if err := b.D.(HostAllocator).HostFree(mem); err != nil {
			errs = append(errs, fmt.Errorf("cuda backend: free a host buffer of %d bytes: %w", len(mem), err))
		}
		delete(b.pinned, key)
	}
	for key, mem := range b.registered {
		if err := b.D.(HostAllocator).HostUnregister(mem); err != nil {
			errs = append(errs, fmt.Errorf("cuda backend: unpin a host buffer of %d bytes: %w", len(mem), err))
		}
		delete(b.registered, key)
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

// HostRegister marks b page-locked: copies through it are counted. A
// range overlapping one already registered is refused, as the driver
// refuses it.
func (d *EmuDevice) HostRegister(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("emulated device: host register of no bytes")
	}
	if d.overlaps(d.registered, b) {
		return fmt.Errorf("emulated device: host register of %d bytes: already registered", len(b))
	}
	if d.registered == nil {
		d.registered = map[*byte][]byte{}
	}
	d.registered[unsafe.SliceData(b)] = b
	return nil
}

// HostUnregister undoes HostRegister(b); anything else is an error.
func (d *EmuDevice) HostUnregister(b []byte) error {
	key := unsafe.SliceData(b)
	if got, ok := d.registered[key]; !ok || len(got) != len(b) {
		return fmt.Errorf("emulated device: host unregister of %d bytes that were not registered", len(b))
	}
	delete(d.registered, key)
	return nil
}

// countPinned adds len(h) to PinnedBytes where h lies in a HostAlloc
// buffer or a registered range.
func (d *EmuDevice) countPinned(h []byte) {
	if len(h) > 0 && (d.within(d.pinned, h) || d.within(d.registered, h)) {
		d.PinnedBytes += int64(len(h))
	}
}

// within says whether h lies inside one of the buffers of m.
func (d *EmuDevice) within(m map[*byte][]byte, h []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(h)))
	for key, mem := range m {
		base := uintptr(unsafe.Pointer(key))
		if lo >= base && lo+uintptr(len(h)) <= base+uintptr(len(mem)) {
			return true
		}
	}
	return false
}

// overlaps says whether h shares a byte with one of the buffers of m.
func (d *EmuDevice) overlaps(m map[*byte][]byte, h []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(h)))
	for key, mem := range m {
		base := uintptr(unsafe.Pointer(key))
		if lo < base+uintptr(len(mem)) && base < lo+uintptr(len(h)) {
			return true
		}
	}
	return false
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

// pageSpan is the whole pages holding b, as cuMemHostRegister takes them.
func pageSpan(b []byte) (unsafe.Pointer, uint64) {
	page := uintptr(os.Getpagesize())
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	base := lo &^ (page - 1)
	end := (lo + uintptr(len(b)) + page - 1) &^ (page - 1)
	return unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), -int(lo-base)), uint64(end - base)
}

// HostRegister is cuMemHostRegister over the whole pages holding b.
func (g *GPU) HostRegister(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("host register of no bytes")
	}
	p, n := pageSpan(b)
	return g.on(func() error {
		return g.drvErr(fmt.Sprintf("cuMemHostRegister(%d)", n), g.dev.drv.cuMemHostRegister(p, n, 0))
	})
}

// HostUnregister is cuMemHostUnregister of what HostRegister(b) pinned.
func (g *GPU) HostUnregister(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	p, _ := pageSpan(b)
	return g.on(func() error { return g.drvErr("cuMemHostUnregister", g.dev.drv.cuMemHostUnregister(p)) })
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
