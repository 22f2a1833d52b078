package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
)

// TestKeptCasts: with bf16 products, an operand's cast is made once and
// read by every product that reads the same elements until the operand is
// written or freed (the products equal the CPU backend's with bf16
// operands, and RLNODE_CUDA_CHECK_KEPT=1, set for this package's tests,
// compares every reused cast with its operand); a write drops the cast, so
// the next product casts again; and when the device runs short, the kept
// casts give their room back before an allocation fails.
func TestKeptCasts(t *testing.T) {
	d := emuDevice(t)
	if d == nil {
		noEmuDevice(t)
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
	if len(b.kept) != 3 || b.keptBytes() != 2*(m*k+2*k*n) {
		t.Fatalf("%d kept casts of %d bytes, want 3 of %d", len(b.kept), b.keptBytes(), 2*(m*k+2*k*n))
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
	if len(b.kept) != 0 || b.keptBytes() != 0 {
		t.Fatalf("%d kept casts of %d bytes after running short, want none", len(b.kept), b.keptBytes())
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

// TestKeptCastsUnderPressure: running short of memory in the middle of a
// product, between its two operands, never lets the second operand's cast
// take the first's block (the product either comes out right or fails
// with out-of-memory); the optimizer's buffers take the kept casts' room;
// and the fused AdamW drops the cast a weight kept before its bf16 copy
// existed.
func TestKeptCastsUnderPressure(t *testing.T) {
	d := emuDevice(t)
	if d == nil {
		noEmuDevice(t)
	}
	defer func() { d.Capacity = 0 }()
	const m, k, n = 64, 64, 8
	rng := rand.New(rand.NewPCG(1, 2))
	fresh := func() *DeviceBackend {
		d.Capacity = 0
		b := NewDeviceBackend(d, BF16)
		b.Block = 32
		t.Cleanup(func() { b.A.Release() })
		return b
	}
	for _, trim := range []bool{false, true} {
		b := fresh()
		av, bv := randn(rng, m*k, 1), randn(rng, m*k, 1)
		a, bb, w := b.Alloc(m*k), b.Alloc(m*k), b.Alloc(k*n)
		c1, c2 := b.Alloc(m*n), b.Alloc(k*k)
		b.Upload(a, av)
		b.Upload(bb, bv)
		b.Upload(w, randn(rng, k*n, 1))
		b.MatMul(false, false, m, n, k, 1, a, w, 0, c1) // keeps a's cast
		must(t, b.Sync())
		must(t, b.A.Trim())
		if trim {
			b.Free(b.Alloc(1 << 16)) // bb's cast will find room by a trim
		}
		d.Capacity = d.Used()
		b.MatMul(true, false, k, k, m, 1, a, bb, 0, c2) // aᵀ·bb
		got := make([]float32, k*k)
		b.Download(got, c2)
		err := b.Sync()
		if err != nil {
			if trim || !errors.Is(err, ErrOutOfMemory) {
				t.Fatalf("trim %v: %v", trim, err)
			}
			continue // no room at all for bb's cast: an honest failure
		}
		want := make([]float32, k*k)
		bf16GEMM{cpu.New()}.MatMul(true, false, k, k, m, 1, cpu.Tensor(clone(av)), cpu.Tensor(clone(bv)), 0, cpu.Tensor(want))
		near(t, fmt.Sprintf("trim %v: aᵀ·bb with the device short between the operands", trim), got, want, tol{rel: 1e-5, abs: 1e-6})
		if !b.keepOff {
			t.Errorf("trim %v: still keeping casts after running short (%+v, casts %d, reuses %d, kept %d)", trim, b.A.Stats(), b.Casts, b.KeptReuses, len(b.kept))
		}
	}

	// The optimizer's first buffers, with the device full of kept casts.
	b := fresh()
	x, w, g, o := b.Alloc(m*k), b.Alloc(k*k), b.Alloc(k*k), b.Alloc(m*k)
	b.Upload(x, randn(rng, m*k, 1))
	b.Upload(w, randn(rng, k*k, 1))
	b.Upload(g, randn(rng, k*k, 1))
	b.MatMul(false, false, m, k, k, 1, x, w, 0, o) // keeps x's and w's casts
	must(t, b.Sync())
	must(t, b.A.Trim())
	d.Capacity = d.Used()
	sums := make([]float64, 1)
	if err := b.SumSquares(sums, []backend.Tensor{g}); err != nil {
		t.Fatalf("the optimizer's buffers with the device full of kept casts: %v", err)
	}
	if len(b.kept) != 0 {
		t.Fatalf("%d kept casts after the optimizer took their room", len(b.kept))
	}

	// A weight's cast kept before AdamW made its copy goes with the step.
	b = fresh()
	w2, g2, m2, v2 := b.Alloc(k*k), b.Alloc(k*k), b.Alloc(k*k), b.Alloc(k*k)
	x2, o2 := b.Alloc(m*k), b.Alloc(m*k)
	b.Upload(w2, randn(rng, k*k, 1))
	b.Upload(g2, randn(rng, k*k, 1))
	b.Upload(x2, randn(rng, m*k, 1))
	b.MatMul(false, false, m, k, k, 1, x2, w2, 0, o2)
	must(t, b.AdamW([]backend.AdamWTensors{{W: w2, G: g2, M: m2, V: v2}}, backend.AdamWCoef{GradScale: 1, Decay: 1, Beta1: 0.9, Beta2: 0.99,
		OneMinusB1: 0.1, OneMinusB2: 0.01, BC2Sqrt: 0.1, Eps: 1e-8, StepSize: 0.01}))
	for _, kc := range b.kept {
		if kc.base == p(w2) {
			t.Fatal("the weight's kept cast outlived AdamW's bf16 copy")
		}
	}
}
