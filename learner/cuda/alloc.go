package cuda

import (
	"errors"
	"fmt"
	"slices"
)

// RawMemory is what an Allocator takes memory from (an Accel).
type RawMemory interface {
	Malloc(bytes int64) (Ptr, error)
	MemFree(p Ptr) error
}

// Allocator is a caching allocator over device memory: freed blocks are
// kept by size and handed out again, so a training step's many
// same-shaped temporaries cost no device allocation after the first step.
//
// Sizes round up to 512 bytes below 1 MiB and to 64 KiB from there. A
// request takes the smallest cached block of its rounded size or up to a
// quarter larger (a block is never split, so at most a fifth of it is
// wasted); failing that, a new one from the device. When the device is
// out of memory, every cached block is returned to it and the allocation
// tried once more. Blocks are not coalesced: a workload whose shapes keep
// changing grows the cache until Trim or an out-of-memory trim.
//
// An Allocator is used by one goroutine at a time. Blocks freed while
// queued operations still read them are safe to hand out again because the
// device runs operations in order (see Accel).
type Allocator struct {
	raw   RawMemory
	free  map[int64][]Ptr // cached blocks by size
	sizes []int64         // sizes with cached blocks, ascending
	live  map[Ptr]int64
	st    AllocStats
}

// AllocStats counts an Allocator's bytes and calls.
type AllocStats struct {
	InUse, Cached, Peak int64 // bytes handed out, kept for reuse, most ever from the device
	DeviceAllocs        int   // Malloc calls that succeeded
	DeviceFrees         int   // MemFree calls (trims)
	Reuses              int   // requests served from the cache
	OOMTrims            int   // out-of-memory trims that preceded a retry
}

// NewAllocator returns an empty cache over raw.
func NewAllocator(raw RawMemory) *Allocator {
	return &Allocator{raw: raw, free: map[int64][]Ptr{}, live: map[Ptr]int64{}}
}

// RoundSize is the block size a request of n bytes takes.
func RoundSize(n int64) int64 {
	const small, smallStep, largeStep = 1 << 20, 512, 64 << 10
	if n <= 0 {
		return smallStep
	}
	step := int64(smallStep)
	if n >= small {
		step = largeStep
	}
	return (n + step - 1) / step * step
}

// maxReuse is the largest cached block a request of rounded size r takes.
func maxReuse(r int64) int64 { return r + r/4 }

// Stats returns the counters.
func (a *Allocator) Stats() AllocStats { return a.st }

// Alloc returns a block of at least n bytes with unspecified contents.
func (a *Allocator) Alloc(n int64) (Ptr, error) {
	if n < 0 || n > 1<<40 {
		return 0, fmt.Errorf("allocate %d bytes: out of range", n)
	}
	r := RoundSize(n)
	if p, size, ok := a.takeCached(r); ok {
		a.st.Reuses++
		a.hand(p, size)
		return p, nil
	}
	return a.fresh(r)
}

// AllocLasting is Alloc for a block kept in use for long (optimizer
// state, bf16 copies of weights): it comes from the device, not the
// cache, so the cached blocks stay for the temporaries that reuse them
// every step. Free returns it to the cache as any block.
func (a *Allocator) AllocLasting(n int64) (Ptr, error) {
	if n < 0 || n > 1<<40 {
		return 0, fmt.Errorf("allocate %d bytes: out of range", n)
	}
	return a.fresh(RoundSize(n))
}

// fresh takes a block of r bytes from the device, trimming the cache and
// retrying once when the device is out of memory.
func (a *Allocator) fresh(r int64) (Ptr, error) {
	p, err := a.raw.Malloc(r)
	if errors.Is(err, ErrOutOfMemory) && a.st.Cached > 0 {
		a.st.OOMTrims++
		if terr := a.Trim(); terr != nil {
			return 0, fmt.Errorf("allocate %d bytes: %w; trimming the cache: %v", r, err, terr)
		}
		p, err = a.raw.Malloc(r)
	}
	if err != nil {
		return 0, fmt.Errorf("allocate %d bytes (%d in use, %d cached): %w", r, a.st.InUse, a.st.Cached, err)
	}
	a.st.DeviceAllocs++
	a.hand(p, r)
	a.st.Peak = max(a.st.Peak, a.st.InUse+a.st.Cached)
	return p, nil
}

func (a *Allocator) hand(p Ptr, size int64) {
	a.live[p] = size
	a.st.InUse += size
}

// takeCached pops the smallest cached block in [r, maxReuse(r)].
func (a *Allocator) takeCached(r int64) (Ptr, int64, bool) {
	i, _ := slices.BinarySearch(a.sizes, r)
	if i == len(a.sizes) || a.sizes[i] > maxReuse(r) {
		return 0, 0, false
	}
	size := a.sizes[i]
	list := a.free[size]
	p := list[len(list)-1]
	if len(list) == 1 {
		delete(a.free, size)
		a.sizes = slices.Delete(a.sizes, i, i+1)
	} else {
		a.free[size] = list[:len(list)-1]
	}
	a.st.Cached -= size
	return p, size, true
}

// Free returns p's block to the cache.
func (a *Allocator) Free(p Ptr) error {
	size, ok := a.live[p]
	if !ok {
		return fmt.Errorf("free %#x: not a block this allocator handed out (freed twice?)", uint64(p))
	}
	delete(a.live, p)
	a.st.InUse -= size
	a.st.Cached += size
	if _, has := a.free[size]; !has {
		i, _ := slices.BinarySearch(a.sizes, size)
		a.sizes = slices.Insert(a.sizes, i, size)
	}
	a.free[size] = append(a.free[size], p)
	return nil
}

// Trim returns every cached block to the device.
func (a *Allocator) Trim() error {
	var errs []error
	for _, size := range a.sizes {
		for _, p := range a.free[size] {
			if err := a.raw.MemFree(p); err != nil {
				errs = append(errs, err)
			}
			a.st.DeviceFrees++
		}
		a.st.Cached -= size * int64(len(a.free[size]))
	}
	clear(a.free)
	a.sizes = a.sizes[:0]
	return errors.Join(errs...)
}

// Release trims the cache and frees every block still handed out.
func (a *Allocator) Release() error {
	err := a.Trim()
	for p, size := range a.live {
		err = errors.Join(err, a.raw.MemFree(p))
		a.st.DeviceFrees++
		a.st.InUse -= size
	}
	clear(a.live)
	return err
}
