package cuda

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestHostBuffers: the backend's page-locked host buffers (cuMemAllocHost
// on a GPU, ordinary memory counted as such on the emulated device) come
// zeroed, carry uploads and downloads like any slice, are freed one by
// one or all at Close, and freeing a slice that is not one does nothing.
func TestHostBuffers(t *testing.T) {
	for name, d := range accels(t) {
		t.Run(name, func(t *testing.T) {
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
			must(t, b.Close())
			if b.PinnedBuffers() != 0 {
				t.Errorf("Close left %d host buffers", b.PinnedBuffers())
			}
		})
	}
}

func TestEmuHostFreeRefusesForeignMemory(t *testing.T) {
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
}
