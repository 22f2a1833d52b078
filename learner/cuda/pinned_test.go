package cuda

import (
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
)

// TestHostBuffers: the backend's page-locked host buffers (cuMemAllocHost
// on a GPU, ordinary memory counted as such on the emulated device) come
// zeroed, carry uploads and downloads like any slice, are freed one by
// one or all at Close, and freeing a slice that is not one does nothing.
func TestHostBuffers(t *testing.T) {
	for name, d := range accels(t) {
		t.Run(name, func(t *testing.T) {
			d := ownAccel(t, d)
			b := NewDeviceBackend(d, F32)
			emu, _ := d.(*EmuDevice)
			const n = 1000
			x := b.HostBuffer(n)
			if len(x) != n {
				t.Fatalf("HostBuffer(%d) gave %d elements", n, len(x))
			}
			for i, v := range x {
				if v != 0 {
					t.Fatalf("HostBuffer: element %d is %v, want 0", i, v)
				}
			}
			want := randn(rand.New(rand.NewPCG(1, 2)), n, 1)
			copy(x, want)
			dev := b.Alloc(n)
			var before int64
			if emu != nil {
				before = emu.PinnedBytes
			}
			b.Upload(dev, x)
			y := b.HostBuffer(n)
			b.Download(y, dev)
			must(t, b.Sync())
			if !slices.Equal(y, want) {
				t.Fatal("a download into a host buffer differs from the upload from another")
			}
			if emu != nil && emu.PinnedBytes-before != 8*n {
				t.Errorf("%d bytes counted through page-locked buffers, want %d", emu.PinnedBytes-before, 8*n)
			}
			plain := make([]float32, n)
			b.FreeHostBuffer(plain) // not a host buffer: nothing happens
			b.FreeHostBuffer(nil)
			if b.PinnedBuffers() != 2 {
				t.Fatalf("%d host buffers held, want 2", b.PinnedBuffers())
			}
			b.FreeHostBuffer(x)
			if b.PinnedBuffers() != 1 || b.Err() != nil {
				t.Fatalf("after one free: %d host buffers held, error %v", b.PinnedBuffers(), b.Err())
			}
			if b.HostBuffer(0) != nil || b.HostBuffer(-1) != nil {
				t.Error("HostBuffer of no elements gave a buffer")
			}
			// Memory of the caller's, pinned for a while (a buffer shared
			// with other processes).
			own := make([]float32, 3000)
			if !b.PinHostBuffer(own) {
				t.Fatal("PinHostBuffer refused ordinary memory")
			}
			if b.PinHostBuffer(own) {
				t.Error("PinHostBuffer pinned the same buffer twice")
			}
			if emu != nil {
				before = emu.PinnedBytes
			}
			b.Download(own[100:100+n], dev)
			must(t, b.Sync())
			if !slices.Equal(own[100:100+n], want) {
				t.Fatal("a download into a pinned buffer differs from the upload")
			}
			if emu != nil && emu.PinnedBytes-before != 4*n {
				t.Errorf("%d bytes counted through the pinned buffer, want %d", emu.PinnedBytes-before, 4*n)
			}
			if b.PinnedBuffers() != 2 {
				t.Fatalf("%d host buffers held, want 2", b.PinnedBuffers())
			}
			b.UnpinHostBuffer(own)
			b.UnpinHostBuffer(own) // no longer pinned: nothing happens
			if b.PinnedBuffers() != 1 || b.Err() != nil {
				t.Fatalf("after unpinning: %d host buffers held, error %v", b.PinnedBuffers(), b.Err())
			}
			if !b.PinHostBuffer(own) {
				t.Fatal("PinHostBuffer refused a buffer pinned and unpinned before")
			}
			must(t, b.Close())
			if b.PinnedBuffers() != 0 {
				t.Errorf("Close left %d host buffers", b.PinnedBuffers())
			}
		})
	}
}

// TestEmuHostMemoryRefusesMisuse: the emulated device refuses what the
// driver refuses: freeing memory it did not allocate (or part of it, or
// twice), registering a range that overlaps a registered one,
// unregistering what was not registered.
func TestEmuHostMemoryRefusesMisuse(t *testing.T) {
	d, err := OpenEmuDevice("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.HostAlloc(0); err == nil {
		t.Error("HostAlloc(0) succeeded")
	}
	mem, err := d.HostAlloc(100)
	must(t, err)
	if err := d.HostFree(make([]byte, 100)); err == nil || !strings.Contains(err.Error(), "did not return") {
		t.Errorf("freeing foreign memory: %v", err)
	}
	if err := d.HostFree(mem[:50]); err == nil {
		t.Error("freeing part of a buffer succeeded")
	}
	must(t, d.HostFree(mem))
	if err := d.HostFree(mem); err == nil {
		t.Error("freeing a buffer twice succeeded")
	}
	own := make([]byte, 4096)
	must(t, d.HostRegister(own[1000:2000]))
	if err := d.HostRegister(own[1500:2500]); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("registering an overlapping range: %v", err)
	}
	if err := d.HostUnregister(own[1000:1500]); err == nil {
		t.Error("unregistering part of a range succeeded")
	}
	must(t, d.HostUnregister(own[1000:2000]))
	must(t, d.HostRegister(own[1500:2500]))
}

// TestPageSpan: cuMemHostRegister gets the whole pages holding a buffer.
func TestPageSpan(t *testing.T) {
	page := os.Getpagesize()
	mem := make([]byte, 4*page)
	base := uintptr(unsafe.Pointer(&mem[0]))
	first := int((uintptr(page) - base%uintptr(page)) % uintptr(page)) // mem[first] starts a page
	for _, c := range []struct {
		lo, hi      int // the buffer, from the first page start
		off, length int // the span, from the first page start
	}{
		{0, page, 0, page},
		{0, 1, 0, page},
		{1, page, 0, page},
		{page - 1, page + 1, 0, 2 * page},
		{100, 2*page + 5, 0, 3 * page},
		{page, 2 * page, page, page},
	} {
		b := mem[first+c.lo : first+c.hi]
		p, n := pageSpan(b)
		if got := int(uintptr(p) - base - uintptr(first)); got != c.off || int(n) != c.length {
			t.Errorf("pageSpan of [%d, %d) past a page start: offset %d, %d bytes; want %d, %d", c.lo, c.hi, got, n, c.off, c.length)
		}
	}
}

// TestTrainerHostCopiesPinned: a trainer whose Update hook takes host
// copies (a data-parallel rank) keeps them in page-locked buffers, two a
// trainable tensor, and gives back those of tensors that stop training
// (LoRA's base weights).
func TestTrainerHostCopiesPinned(t *testing.T) {
	_, db := emuBackend(t)
	m := tinyQwen2(t, db, 7)
	bt := stepBatch(t)
	var seen int
	tr := &model.Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0), MaxGradNorm: 1,
		Update: func(_ int, params []*optim.Param, _ float64) (float64, error) {
			seen = len(params)
			return 0, nil // the weights stay as they are
		}}
	if _, err := tr.Step([]*model.Batch{bt}, 1e-3, logpEntropyLoss); err != nil {
		t.Fatal(err)
	}
	if n := len(m.TrainableParams()); seen != n || db.PinnedBuffers() != 2*n {
		t.Fatalf("%d host buffers for %d trainable tensors (Update saw %d), want two each", db.PinnedBuffers(), n, seen)
	}
	if err := m.AddLoRA(model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step([]*model.Batch{bt}, 1e-3, logpEntropyLoss); err != nil {
		t.Fatal(err)
	}
	if n := len(m.TrainableParams()); seen != n || db.PinnedBuffers() != 2*n {
		t.Fatalf("under LoRA: %d host buffers for %d trainable tensors, want two each", db.PinnedBuffers(), n)
	}
	tr.Release()
	if db.PinnedBuffers() != 0 {
		t.Errorf("Release left %d host buffers", db.PinnedBuffers())
	}
	must(t, db.Close())
}
