package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
)

// TestDeviceBackendKVCache appends chunks of several sequences to their
// caches (WriteKV) and attends over them (CachedAttention) on the device
// backend and on the CPU backend: the caches are the CPU's bit for bit and
// the outputs within 1e-5. Sequences differ in cache length (one empty
// before the write) and chunk length (one writes nothing). On the
// emulated device each call is one launch reading the caches where they
// are: no device copy, whatever the number of sequences.
func TestDeviceBackendKVCache(t *testing.T) {
	const heads, kvHeads, headDim = 4, 2, 16
	kd := kvHeads * headDim
	cached := []int32{5, 0, 12, 3, 7} // keys before the write
	chunk := []int32{1, 3, 0, 2, 1}   // new rows per sequence
	capRows := 20
	rng := rand.New(rand.NewPCG(3, 4))
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	rows, at, lens := []int32{0}, make([]int32, len(cached)), make([]int32, len(cached))
	for i, n := range chunk {
		rows = append(rows, rows[i]+n)
		at[i], lens[i] = cached[i], cached[i]+n
	}
	nrows := int(rows[len(chunk)])
	kInit, vInit := make([][]float32, len(cached)), make([][]float32, len(cached))
	for i := range cached {
		kInit[i], vInit[i] = fill(capRows*kd), fill(capRows*kd)
	}
	newK, newV, q := fill(nrows*kd), fill(nrows*kd), fill(nrows*heads*headDim)

	run := func(b backend.Backend) (out []float32, ks, vs [][]float32) {
		kc, vc := make([]backend.Tensor, len(cached)), make([]backend.Tensor, len(cached))
		for i := range cached {
			kc[i], vc[i] = b.Alloc(capRows*kd), b.Alloc(capRows*kd)
			b.Upload(kc[i], kInit[i])
			b.Upload(vc[i], vInit[i])
		}
		k, v, qt, o := b.Alloc(nrows*kd), b.Alloc(nrows*kd), b.Alloc(len(q)), b.Alloc(len(q))
		b.Upload(k, newK)
		b.Upload(v, newV)
		b.Upload(qt, q)
		var emu *EmuDevice
		fullRing := false
		if db, ok := b.(*DeviceBackend); ok {
			emu, _ = db.D.(*EmuDevice)
			fullRing = db.side.size == 0
		}
		var launches, copies, async int
		if emu != nil {
			launches, copies, async = emu.Launches, emu.Copies, emu.AsyncUploads
		}
		b.WriteKV(kc, at, k, rows, kd)
		b.WriteKV(vc, at, v, rows, kd)
		b.CachedAttention(o, qt, kc, vc, rows, lens, heads, kvHeads, headDim)
		if emu != nil {
			if l, c := emu.Launches-launches, emu.Copies-copies; l != 3 || c != 0 {
				t.Errorf("two WriteKV and a CachedAttention over %d sequences: %d launches and %d device copies, want 3 and 0", len(cached), l, c)
			}
			// Their side inputs (3 tables each, 4 for the attention) queue
			// from the page-locked ring.
			if n := emu.AsyncUploads - async; fullRing && n != 10 {
				t.Errorf("%d side inputs queued from page-locked memory, want 10", n)
			}
		}
		out = make([]float32, len(q))
		b.Download(out, o)
		for i := range cached {
			ks, vs = append(ks, make([]float32, capRows*kd)), append(vs, make([]float32, capRows*kd))
			b.Download(ks[i], kc[i])
			b.Download(vs[i], vc[i])
		}
		return out, ks, vs
	}
	wantOut, wantK, wantV := run(cpu.New())
	check := func(t *testing.T, b *DeviceBackend) {
		t.Helper()
		out, ks, vs := run(b)
		if err := b.Err(); err != nil {
			t.Fatal(err)
		}
		for i := range cached {
			near(t, "keys", ks[i], wantK[i], tol{})
			near(t, "values", vs[i], wantV[i], tol{})
		}
		near(t, "attention", out, wantOut, tol{abs: 1e-5})
	}
	for name, d := range accels(t) {
		t.Run(name, func(t *testing.T) {
			b := NewDeviceBackend(d, F32)
			b.Block = 32
			defer b.A.Release()
			check(t, b)
		})
	}
	// A ring of 128 bytes wraps within these calls: each wrap waits for
	// the queue, and the results do not change. (On the emulated GPU,
	// queued copies read the ring when they run, as on a GPU: reusing a
	// slot without the wait changes the results.)
	for name, d := range accels(t) {
		t.Run(name+"/small-ring", func(t *testing.T) {
			b := NewDeviceBackend(d, F32)
			b.Block = 32
			b.side.size = 128
			defer b.A.Release()
			check(t, b)
			if b.side.Waits == 0 {
				t.Error("a 128-byte side-input ring never wrapped")
			}
		})
	}
}
