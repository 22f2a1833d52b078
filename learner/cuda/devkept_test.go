package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
)

// TestKeptCasts: with bf16 products, an operand's cast is made once and
// read by every product that reads the same elements until the operand is
// written or freed (the products equal the CPU backend's with bf16
// operands, and RLNODE_CUDA_CHECK_KEPT=1, set for this package's tests,
// compares every reused cast with a fresh one); a write drops the cast, so
// the next product casts again; and when the device runs short, the kept
// casts give their room back before an allocation fails.
func TestKeptCasts(t *testing.T) {
	d := emuDevice(t)
	if d == nil {
		skipOrFail(t, "no C++ compiler for the emulated device")
	}
	b := NewDeviceBackend(d, BF16)
	b.Block = 32
	if !b.checkKept {
		t.Error("RLNODE_CUDA_CHECK_KEPT=1 is not set for this package's tests")
	}
	ref := bf16GEMM{cpu.New()}
	rng := rand.New(rand.NewPCG(3, 4))
	const m, k, n = 5, 24, 7
	vals := func(c int) []float32 {
		v := make([]float32, c)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}
	xv, w1, w2 := vals(m*k), vals(k*n), vals(k*n)
	x, wa, wb := b.Alloc(m*k), b.Alloc(k*n), b.Alloc(k*n)
	b.Upload(x, xv)
	b.Upload(wa, w1)
	b.Upload(wb, w2)
	step := 0
	product := func(w *Tensor, wv []float32, casts, reuses int) {
		t.Helper()
		step++
		o := b.Alloc(m * n)
		b.MatMul(false, false, m, n, k, 1, x, w, 0, o)
		got := make([]float32, m*n)
		b.Download(got, o)
		b.Free(o)
		must(t, b.Sync())
		want := make([]float32, m*n)
		ref.MatMul(false, false, m, n, k, 1, cpu.Tensor(xv), cpu.Tensor(wv), 0, cpu.Tensor(want))
		near(t, fmt.Sprintf("product %d", step), got, want, tol{rel: 1e-5, abs: 1e-6})
		if b.Casts != casts || b.KeptReuses != reuses {
			t.Fatalf("after product %d: %d casts and %d reuses, want %d and %d", step, b.Casts, b.KeptReuses, casts, reuses)
		}
	}
	product(wa.(*Tensor), w1, 2, 0) // x and wa cast
	product(wb.(*Tensor), w2, 3, 1) // x reused, wb cast
	product(wa.(*Tensor), w1, 3, 3) // both reused
	// A write to x drops its cast: the next product casts it again.
	xv = vals(m * k)
	b.Upload(x, xv)
	product(wa.(*Tensor), w1, 4, 4)
	// So does a write to part of it, through a view.
	xv[3] = 0.5
	b.Upload(b.View(x, 3, 1), xv[3:4])
	product(wa.(*Tensor), w1, 5, 5)
	if len(b.kept) != 3 || b.keptBytes != 2*(m*k+2*k*n) {
		t.Fatalf("%d kept casts of %d bytes, want 3 of %d", len(b.kept), b.keptBytes, 2*(m*k+2*k*n))
	}
	// An operand widened from bf16 storage borrows it as its cast: no
	// cast until the storage is written or freed, then one.
	st, z := b.AllocBF16(m*k), b.Alloc(m*k)
	b.ToBF16(st, x)
	xv = roundBF16(xv)
	b.Upload(x, make([]float32, m*k)) // zeros, then the rounded values again
	b.FromBF16(x, st)
	product(wa.(*Tensor), w1, 5, 7) // x's borrowed cast and wa's kept one
	b.ToBF16(st, z)                 // the storage changes: x casts again
	product(wa.(*Tensor), w1, 6, 8)
	b.ToBF16(st, x)
	b.FromBF16(x, st)
	b.Free(st) // so does freeing it
	product(wa.(*Tensor), w1, 7, 9)
	b.Free(z)
	if len(b.kept) != 3 {
		t.Fatalf("%d kept casts, want x's, wa's and wb's", len(b.kept))
	}
	// Freeing an operand frees its cast.
	b.Free(wb)
	if len(b.kept) != 2 {
		t.Fatalf("%d kept casts after freeing wb, want 2", len(b.kept))
	}
	// With no room left on the device, an allocation takes the kept
	// casts' room rather than failing.
	must(t, b.A.Trim())
	d.Capacity = d.Used()
	y := b.Alloc(16)
	if err := b.Err(); err != nil {
		t.Fatalf("an allocation with the kept casts' room to take: %v", err)
	}
	if len(b.kept) != 0 || b.keptBytes != 0 {
		t.Fatalf("%d kept casts of %d bytes after running short, want none", len(b.kept), b.keptBytes)
	}
	b.Free(y)
	// Having run short, the backend keeps no more casts: each product
	// casts its operands into temporaries, as before kept casts.
	d.Capacity = 0
	product(wa.(*Tensor), w1, 9, 9)
	product(wa.(*Tensor), w1, 11, 9)
	if len(b.kept) != 0 {
		t.Fatalf("%d kept casts after running short, want none", len(b.kept))
	}

	// A cast whose room came only from emptying the allocator's cache is
	// not kept either, nor any after it.
	c := NewDeviceBackend(d, BF16)
	c.Block = 32
	cx, cw, co := c.Alloc(m*k), c.Alloc(k*n), c.Alloc(m*n)
	c.Upload(cx, xv)
	c.Upload(cw, w1)
	// A cached block far larger than a cast (the allocator reuses a
	// block of at most 1.25 times the request), and the device full:
	// the cast's room comes from returning that block to the device.
	c.Free(c.Alloc(4096))
	d.Capacity = d.Used()
	c.MatMul(false, false, m, n, k, 1, cx, cw, 0, co)
	must(t, c.Sync())
	if st := c.A.Stats(); st.OOMTrims == 0 || !c.keepOff || len(c.kept) != 0 {
		t.Fatalf("a cast made room for by emptying the cache: %d trims, keeping off %v, %d kept casts; want a trim, off, none", st.OOMTrims, c.keepOff, len(c.kept))
	}
	d.Capacity = 0
}
