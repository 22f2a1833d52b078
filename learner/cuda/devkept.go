package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// keptCast is a bf16 cast of a matrix-product operand that is not a
// weight (an activation, a gradient), kept for the products that read the
// same elements again: a layer's input is read by its forward product and
// again by its weight's gradient, an output's gradient by the input's
// gradient and the weight's. Reusing the cast gives the same bits as
// casting again. Any write that overlaps the operand, or freeing it, drops
// the cast; running short of device memory drops them all, and no more
// are kept. A tensor widened from bf16 storage (FromBF16) lends that
// storage as its cast: widening and casting back gives the stored bits.
type keptCast struct {
	base     Ptr   // the operand's first element
	ext      int64 // its elements
	copy     Ptr   // ext bf16 values
	borrowed bool  // copy is a bf16 tensor's storage, not the cast's own
}

// keptOperand returns the kept cast of ext elements at at, or 0.
func (b *DeviceBackend) keptOperand(at Ptr, ext int64) Ptr {
	for _, k := range b.kept {
		if k.base == at && k.ext == ext {
			b.KeptReuses++
			if b.checkKept {
				b.checkKeptCast(k)
			}
			return k.copy
		}
	}
	return 0
}

// keepOperand casts ext elements at t into a new kept copy and returns it;
// 0 when casts are no longer kept (the caller casts into a temporary).
// Once the device has run short of memory (an allocation failed, or had
// to empty the allocator's cache first), no more casts are kept: near
// the device's capacity they would cost more than they save.
func (b *DeviceBackend) keepOperand(t backend.Tensor, ext int64) Ptr {
	if b.keepOff {
		return 0
	}
	at := p(t)
	trims := b.A.Stats().OOMTrims
	c, err := b.A.Alloc(2 * ext)
	if err != nil || b.A.Stats().OOMTrims != trims {
		if err == nil {
			b.fail(b.A.Free(c))
		}
		b.stopKeeping()
		return 0
	}
	b.dropKept(at, 4*ext) // an older cast of an overlapping range
	b.elems("cast_f32_bf16", int(ext), c, at, ext)
	b.Casts++
	b.kept = append(b.kept, keptCast{base: at, ext: ext, copy: c})
	return c
}

// dropKept frees the kept casts overlapping [at, at+bytes) of fp32
// elements.
func (b *DeviceBackend) dropKept(at Ptr, bytes int64) {
	b.dropKeptIf(func(k keptCast) bool { return k.base < at+Ptr(bytes) && at < k.base+Ptr(4*k.ext) })
}

// dropKeptIf frees the kept casts for which drop holds.
func (b *DeviceBackend) dropKeptIf(drop func(keptCast) bool) {
	keep := b.kept[:0]
	for _, k := range b.kept {
		if drop(k) {
			b.freeKept(k)
			continue
		}
		keep = append(keep, k)
	}
	clear(b.kept[len(keep):])
	b.kept = keep
}

// keptBytes is the device memory the kept casts hold (borrowed ones hold
// none of their own).
func (b *DeviceBackend) keptBytes() int64 {
	var n int64
	for _, k := range b.kept {
		if !k.borrowed {
			n += 2 * k.ext
		}
	}
	return n
}

// freeKept frees k's copy unless it is borrowed. The copy a product
// holds as its first operand (gemm) is freed with the op's temporaries,
// after the product is queued.
func (b *DeviceBackend) freeKept(k keptCast) {
	switch {
	case k.borrowed:
	case k.copy == b.held:
		b.temps = append(b.temps, k.copy)
	default:
		b.fail(b.A.Free(k.copy))
	}
}

// lendCast makes bf16 tensor src's storage the kept cast of dst, which
// FromBF16 has just widened from it.
func (b *DeviceBackend) lendCast(dst, src *Tensor) {
	if b.GEMM != BF16 || dst.n == 0 || !b.ok() {
		return
	}
	b.dropKept(dst.p, 4*int64(dst.n))
	b.kept = append(b.kept, keptCast{base: dst.p, ext: int64(dst.n), copy: src.p, borrowed: true})
}

// dropBorrowers drops the kept casts borrowing bf16 storage in [at,
// at+bytes): it is being written or freed.
func (b *DeviceBackend) dropBorrowers(at Ptr, bytes int64) {
	b.dropKeptIf(func(k keptCast) bool { return k.borrowed && k.copy < at+Ptr(bytes) && at < k.copy+Ptr(2*k.ext) })
}

// stopKeeping frees every kept cast and keeps no more; it reports whether
// there was any.
func (b *DeviceBackend) stopKeeping() bool {
	b.keepOff = true
	had := len(b.kept) > 0
	b.dropKeptIf(func(keptCast) bool { return true })
	return had
}

// alloc is the allocator's Alloc (or AllocLasting), retried once after
// freeing the kept casts when the device is out of memory: they are a
// cache, and never cost a tensor its room. An allocation that had to
// empty the allocator's cache stops the keeping too.
func (b *DeviceBackend) alloc(n int64, lasting bool) (Ptr, error) {
	get := b.A.Alloc
	if lasting {
		get = b.A.AllocLasting
	}
	trims := b.A.Stats().OOMTrims
	ptr, err := get(n)
	switch {
	case errors.Is(err, ErrOutOfMemory) && b.stopKeeping():
		ptr, err = get(n)
	case err == nil && b.A.Stats().OOMTrims != trims:
		b.stopKeeping() // room came only from emptying the cache
	}
	return ptr, err
}

// checkKeptCast compares k's copy with the operand's elements cast on
// the host (safetensors.F32ToBF16, cast_f32_bf16's rounding): a write that did not drop the
// copy (a missing wrote) shows up as a difference. For tests
// (RLNODE_CUDA_CHECK_KEPT=1): it waits for the device at every reuse, and
// allocates nothing on it, so it leaves the allocator as it finds it.
func (b *DeviceBackend) checkKeptCast(k keptCast) {
	if !b.ok() {
		return
	}
	f32, got := make([]byte, 4*k.ext), make([]byte, 2*k.ext)
	b.fail(b.D.ToHost(f32, k.base))
	b.fail(b.D.ToHost(got, k.copy))
	if !b.ok() {
		return
	}
	for i := range k.ext {
		want := safetensors.F32ToBF16(math.Float32frombits(binary.LittleEndian.Uint32(f32[4*i:])))
		if binary.LittleEndian.Uint16(got[2*i:]) != want {
			b.fail(fmt.Errorf("cuda backend: the kept bf16 cast of %d elements at %#x is stale at element %d: the operand was written without dropping it", k.ext, k.base, i))
			return
		}
	}
}
