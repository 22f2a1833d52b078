package cuda

import (
	"fmt"
	"sort"

	"github.com/rlnode/rlnode/learner/backend"
)

// shadow is a weight's bf16 copy, kept with GEMM BF16 for the weights the
// fused AdamW updates: AdamW writes it beside the fp32 master weights, and
// the matrix products read it instead of casting the weight again. Any
// other write that overlaps the weight marks it stale; the next product
// that reads the weight refreshes it with one cast.
type shadow struct {
	base  Ptr // the weight's address
	bytes int64
	copy  Ptr // n bf16 values
	valid bool
}

// shadowFor returns the bf16 copy AdamW should write for weight w, made
// on first use; 0 when products are fp32 or w is a view (a ZeRO-1 rank's
// slice of a weight: the update marks the weight's copy stale instead).
func (b *DeviceBackend) shadowFor(w backend.Tensor) Ptr {
	d := dt(w)
	if b.GEMM != BF16 || !b.ok() || w.Len() == 0 || d.view {
		return 0
	}
	i := sort.Search(len(b.shadows), func(i int) bool { return b.shadows[i].base >= d.p })
	if i < len(b.shadows) && b.shadows[i].base == d.p && b.shadows[i].bytes == 4*int64(d.n) {
		return b.shadows[i].copy
	}
	// A weight that overlaps an older copy's range replaces it.
	b.dropShadows(d.p, 4*int64(d.n))
	c, err := b.alloc(2*int64(d.n), true)
	if err != nil {
		b.fail(fmt.Errorf("cuda backend: bf16 copy of a weight of %d elements: %w", d.n, err))
		return 0
	}
	i = sort.Search(len(b.shadows), func(i int) bool { return b.shadows[i].base >= d.p })
	b.shadows = append(b.shadows, nil)
	copy(b.shadows[i+1:], b.shadows[i:])
	b.shadows[i] = &shadow{base: d.p, bytes: 4 * int64(d.n), copy: c}
	return c
}

// shadowWritten marks w's copy current (AdamW has just written it).
func (b *DeviceBackend) shadowWritten(w backend.Tensor) {
	if s := b.shadowAt(p(w), 4*int64(w.Len())); s != nil && b.ok() {
		s.valid = true
	}
}

// shadowAt is the copy whose weight holds [at, at+bytes), or nil.
func (b *DeviceBackend) shadowAt(at Ptr, bytes int64) *shadow {
	i := sort.Search(len(b.shadows), func(i int) bool { return b.shadows[i].base > at }) - 1
	if i < 0 {
		return nil
	}
	s := b.shadows[i]
	if at+Ptr(bytes) > s.base+Ptr(s.bytes) {
		return nil
	}
	return s
}

// wrote marks stale every copy whose weight overlaps the tensors, and
// drops the kept casts that overlap them or borrow their storage.
func (b *DeviceBackend) wrote(ts ...backend.Tensor) {
	if len(b.shadows) == 0 && len(b.kept) == 0 {
		return
	}
	for _, t := range ts {
		switch {
		case t == nil || t.Len() == 0:
		case dt(t).bf16: // bf16 storage: the casts that borrow it go
			if len(b.kept) > 0 {
				b.dropBorrowers(p(t), 2*int64(t.Len()))
			}
		default:
			b.wroteRange(p(t), 4*int64(t.Len()))
		}
	}
}

func (b *DeviceBackend) wroteRange(at Ptr, bytes int64) {
	if len(b.kept) > 0 {
		b.dropKept(at, bytes)
	}
	i := sort.Search(len(b.shadows), func(i int) bool { return b.shadows[i].base+Ptr(b.shadows[i].bytes) > at })
	for ; i < len(b.shadows) && b.shadows[i].base < at+Ptr(bytes); i++ {
		b.shadows[i].valid = false
	}
}

// dropShadows frees the copies of weights overlapping [at, at+bytes)
// (the weight is being freed or replaced).
func (b *DeviceBackend) dropShadows(at Ptr, bytes int64) {
	keep := b.shadows[:0]
	for _, s := range b.shadows {
		if s.base < at+Ptr(bytes) && at < s.base+Ptr(s.bytes) {
			b.fail(b.A.Free(s.copy))
			continue
		}
		keep = append(keep, s)
	}
	clear(b.shadows[len(keep):])
	b.shadows = keep
}

// cachedOperand is the bf16 operand of ext elements at t from a weight's
// copy, refreshed first when stale; 0 when t is not a shadowed weight.
func (b *DeviceBackend) cachedOperand(t backend.Tensor, ext int64) Ptr {
	if len(b.shadows) == 0 {
		return 0
	}
	at := p(t)
	s := b.shadowAt(at, 4*ext)
	if s == nil {
		return 0
	}
	if !s.valid {
		n := s.bytes / 4
		b.elems("cast_f32_bf16", int(n), s.copy, s.base, n)
		b.Casts++
		s.valid = b.ok()
	}
	return s.copy + (at-s.base)/2
}
