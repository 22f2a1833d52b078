package cuda

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/rlnode/rlnode/learner/backend"
)

// keptCast is a bf16 cast of a matrix-product operand that is not a
// weight (an activation, a gradient), kept for the products that read the
// same elements again: a layer's input is read by its forward product and
// again by its weight's gradient, an output's gradient by the input's
// gradient and the weight's. Reusing the cast gives the same bits as
// casting again. Any write that overlaps the operand, or freeing it, drops
// the cast; running short of device memory drops them all, and no more
// are kept. A tensor widened
// from bf16 storage (FromBF16) lends that storage as its cast: widening
// and casting back gives the stored bits.
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
	b.keptBytes += 2 * ext
	return c
}

// dropKept frees the kept casts overlapping [at, at+bytes) of fp32
// elements.
func (b *DeviceBackend) dropKept(at Ptr, bytes int64) {
	keep := b.kept[:0]
	for _, k := range b.kept {
		if k.base < at+Ptr(bytes) && at < k.base+Ptr(4*k.ext) {
			b.freeKept(k)
			continue
		}
		keep = append(keep, k)
	}
	clear(b.kept[len(keep):])
	b.kept = keep
}

// freeKept frees k's copy unless it is borrowed.
func (b *DeviceBackend) freeKept(k keptCast) {
	if !k.borrowed {
		b.fail(b.A.Free(k.copy))
		b.keptBytes -= 2 * k.ext
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
	keep := b.kept[:0]
	for _, k := range b.kept {
		if !(k.borrowed && k.copy < at+Ptr(bytes) && at < k.copy+Ptr(2*k.ext)) {
			keep = append(keep, k)
		}
	}
	clear(b.kept[len(keep):])
	b.kept = keep
}

// stopKeeping frees every kept cast and keeps no more; it reports whether
// there was any.
func (b *DeviceBackend) stopKeeping() bool {
	b.keepOff = true
	if len(b.kept) == 0 {
		return false
	}
	for _, k := range b.kept {
		b.freeKept(k)
	}
	clear(b.kept)
	b.kept = b.kept[:0]
	b.keptBytes = 0
	return true
}

// alloc is the allocator's Alloc (or AllocLasting), retried once after
// freeing the kept casts when the device is out of memory: they are a
// cache, and never cost a tensor its room.
func (b *DeviceBackend) alloc(n int64, lasting bool) (Ptr, error) {
	get := b.A.Alloc
	if lasting {
		get = b.A.AllocLasting
	}
	ptr, err := get(n)
	if errors.Is(err, ErrOutOfMemory) && b.stopKeeping() {
		ptr, err = get(n)
	}
	return ptr, err
}

// checkKeptCast casts k's operand again and compares it with the kept
// copy: a write that did not drop the copy (a missing wrote) shows up as
// a difference. For tests (RLNODE_CUDA_CHECK_KEPT=1): it waits for the
// device twice per reuse.
func (b *DeviceBackend) checkKeptCast(k keptCast) {
	if !b.ok() {
		return
	}
	fresh, err := b.A.Alloc(2 * k.ext)
	if err != nil {
		b.fail(fmt.Errorf("cuda backend: checking a kept bf16 cast: %w", err))
		return
	}
	defer func() { b.fail(b.A.Free(fresh)) }()
	b.elems("cast_f32_bf16", int(k.ext), fresh, k.base, k.ext)
	got, want := make([]byte, 2*k.ext), make([]byte, 2*k.ext)
	b.fail(b.D.ToHost(got, k.copy))
	b.fail(b.D.ToHost(want, fresh))
	if b.ok() && !bytes.Equal(got, want) {
		b.fail(fmt.Errorf("cuda backend: the kept bf16 cast of %d elements at %#x is stale: the operand was written without dropping it", k.ext, k.base))
	}
}
