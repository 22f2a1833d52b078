package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
)

// TestBF16WeightCopies: with bf16 products, a weight the fused AdamW
// updated keeps a bf16 copy that its products read; every other kind of
// write to the weight (an upload, a write through a view, a device copy,
// a free and a new tensor at the same address) makes the next product see
// the new values, as the CPU backend with bf16-rounded operands does.
func TestBF16WeightCopies(t *testing.T) {
	const m, k, n = 5, 24, 7
	for name, d := range accels(t) {
		t.Run(name, func(t *testing.T) {
			b := NewDeviceBackend(d, BF16)
			b.Block = 32
			rng := rand.New(rand.NewPCG(8, 9))
			x := b.Alloc(m * k)
			xs := randn(rng, m*k, 1)
			b.Upload(x, xs)
			w := b.Alloc(k * n)
			ws := randn(rng, k*n, 1)
			b.Upload(w, ws)
			out := b.Alloc(m * n)
			// check compares x·w on the device with the CPU backend's
			// product of the bf16-rounded operands.
			check := func(what string) {
				t.Helper()
				b.MatMul(false, false, m, n, k, 1, x, w, 0, out)
				got := make([]float32, m*n)
				b.Download(got, out)
				cb := cpu.New()
				ct := cb.Alloc(m * n)
				bf16GEMM{cb}.MatMul(false, false, m, n, k, 1, cpu.Tensor(clone(xs)), cpu.Tensor(clone(ws)), 0, ct)
				near(t, what, got, ct.(cpu.Tensor), tol{rel: 1e-5, abs: 1e-6})
			}
			check("before any copy")
			// One AdamW step with lr 0: the weights stay, the copy is made.
			g, mm, v := b.Alloc(k*n), b.Alloc(k*n), b.Alloc(k*n)
			b.Upload(g, randn(rng, k*n, 1))
			must(t, b.AdamW([]backend.AdamWTensors{{W: w, G: g, M: mm, V: v}}, backend.AdamWCoef{GradScale: 1, Decay: 1, Beta1: 0.9, Beta2: 0.99,
				OneMinusB1: 0.1, OneMinusB2: 0.01, BC2Sqrt: 0.1, Eps: 1e-8}))
			casts, reuses := b.Casts, b.KeptReuses
			check("from the copy AdamW wrote")
			// The weight's copy and the activation's kept cast: no cast.
			if b.Casts != casts || b.KeptReuses != reuses+1 {
				t.Errorf("product after AdamW: %d casts and %d kept casts read, want 0 and 1 (the activation's)", b.Casts-casts, b.KeptReuses-reuses)
			}
			ws = randn(rng, k*n, 1)
			b.Upload(w, ws)
			check("after an upload")
			for i := 10; i < 20; i++ {
				ws[i] *= 3
			}
			b.Scale(b.View(w, 10, 10), 3)
			check("after a write through a view")
			src := b.Alloc(k * n)
			ws = randn(rng, k*n, 1)
			b.Upload(src, ws)
			b.Copy(w, src)
			check("after a device copy")
			// AdamW on part of the weight (a ZeRO-1 rank's slice) writes
			// no copy of its own and leaves the weight's stale.
			gv, mv, vv := b.Alloc(30), b.Alloc(30), b.Alloc(30)
			b.Upload(gv, randn(rng, 30, 1))
			must(t, b.AdamW([]backend.AdamWTensors{{W: b.View(w, 40, 30), G: gv, M: mv, V: vv}}, backend.AdamWCoef{GradScale: 1, Decay: 1, Beta1: 0.9, Beta2: 0.99,
				OneMinusB1: 0.1, OneMinusB2: 0.01, BC2Sqrt: 0.1, Eps: 1e-8, StepSize: 0.05}))
			before := clone(ws)
			b.Download(ws, w)
			for i := range ws {
				if moved := ws[i] != before[i]; moved != (i >= 40 && i < 70) {
					t.Fatalf("AdamW on elements [40, 70): element %d moved %v", i, moved)
				}
			}
			if len(b.shadows) != 1 || b.shadows[0].base != p(w) || b.shadows[0].bytes != 4*k*n {
				t.Fatalf("AdamW on a view: %d bf16 copies, want the weight's only", len(b.shadows))
			}
			check("after AdamW on a view")
			casts, reuses = b.Casts, b.KeptReuses
			check("again, from the refreshed copy")
			if b.Casts != casts || b.KeptReuses != reuses+1 {
				t.Errorf("second product of an unchanged weight: %d casts and %d kept casts read, want 0 and 1", b.Casts-casts, b.KeptReuses-reuses)
			}
			if len(b.shadows) != 1 {
				t.Fatalf("%d bf16 copies, want 1", len(b.shadows))
			}
			b.Free(w)
			if len(b.shadows) != 0 {
				t.Fatalf("freeing the weight left %d bf16 copies", len(b.shadows))
			}
			w = b.Alloc(k * n)
			ws = randn(rng, k*n, 1)
			b.Upload(w, ws)
			check("a new tensor where the weight was")
			must(t, b.Sync())
		})
	}
}
