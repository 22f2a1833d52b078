package cuda

import "fmt"

// AsyncUploader is an Accel that queues a copy from page-locked host
// memory (HostAlloc's) to the device without waiting for the work queued
// before it, as a copy from pageable memory must. The source must stay
// unchanged until the copy has run: until a Sync, or any call that waits
// for the queue.
type AsyncUploader interface {
	ToDeviceAsync(dst Ptr, src []byte) error
}

// sideRingBytes is the staging ring's size: about 2,000 decode-step
// uploads between the waits that recycle it.
const sideRingBytes = 256 << 10

// sideRing stages an op's integer side inputs (positions, row cuts, cache
// address tables) in page-locked memory, so their uploads queue behind
// the kernels instead of waiting for them. A slot is reused only after
// the device has caught up: when the ring wraps, the backend waits for the
// queue first.
type sideRing struct {
	buf  []byte // page-locked; nil until first use
	off  int
	none bool // the device cannot stage: plain uploads
	// Waits counts the waits for the queue that recycled the ring.
	Waits int
	size  int // ring bytes; sideRingBytes when 0
}

// sideInput uploads raw into a temporary: queued from the staging ring
// where the device can, else a plain (waiting) upload.
func (b *DeviceBackend) sideInput(raw []byte) Ptr {
	ptr := b.temp(int64(max(len(raw), 4)))
	if !b.ok() || len(raw) == 0 {
		return ptr
	}
	if a, ok := b.D.(AsyncUploader); ok {
		if slot := b.stage(len(raw)); slot != nil {
			copy(slot, raw)
			b.fail(a.ToDeviceAsync(ptr, slot))
			return ptr
		}
	}
	b.fail(b.D.ToDevice(ptr, raw))
	return ptr
}

// stage returns n bytes of the staging ring, waiting for the queue when
// it wraps, or nil where the device gives no page-locked memory or n is
// more than a quarter of the ring.
func (b *DeviceBackend) stage(n int) []byte {
	r := &b.side
	size := r.size
	if size == 0 {
		size = sideRingBytes
	}
	if r.none || n > size/4 {
		return nil
	}
	if r.buf == nil {
		h, ok := b.D.(HostAllocator)
		if !ok {
			r.none = true
			return nil
		}
		mem, err := h.HostAlloc(int64(size))
		if err != nil || len(mem) != size {
			r.none = true
			return nil
		}
		r.buf = mem
	}
	if r.off+n > len(r.buf) {
		// Every queued copy out of the ring runs before this returns.
		if b.fail(b.D.Sync()); !b.ok() {
			return nil
		}
		r.off = 0
		r.Waits++
	}
	slot := r.buf[r.off : r.off+n : r.off+n]
	r.off += (n + 7) &^ 7
	return slot
}

// freeSide frees the staging ring (Close).
func (b *DeviceBackend) freeSide() error {
	r := &b.side
	if r.buf == nil {
		return nil
	}
	mem := r.buf
	r.buf, r.off = nil, 0
	if err := b.D.(HostAllocator).HostFree(mem); err != nil {
		return fmt.Errorf("cuda backend: free the side-input ring of %d bytes: %w", len(mem), err)
	}
	return nil
}
