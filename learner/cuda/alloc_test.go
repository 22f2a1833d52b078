package cuda

import (
	"errors"
	"testing"
)

func TestRoundSize(t *testing.T) {
	for _, c := range []struct{ in, want int64 }{
		{0, 512}, {1, 512}, {512, 512}, {513, 1024}, {1<<20 - 1, 1 << 20}, {1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 64<<10}, {3 << 20, 3 << 20},
	} {
		if got := RoundSize(c.in); got != c.want {
			t.Errorf("RoundSize(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestAllocator plays sequences of allocations and frees on an emulated
// device of bounded memory and checks, after each, which block was handed
// out and the allocator's counters.
func TestAllocator(t *testing.T) {
	type op struct {
		alloc string // name the block; "" frees free
		size  int64
		free  string
		trim  bool
		// Checks after the op.
		same     string // the block just allocated is the one freed as same
		fresh    bool   // it came from the device
		err      bool   // the allocation fails (out of memory)
		inUse    int64
		cached   int64
		devAlloc int
	}
	const K = 1024
	cases := []struct {
		name     string
		capacity int64
		ops      []op
	}{
		{"a freed block is reused for the same size", 0, []op{
			{alloc: "a", size: 1000, fresh: true, inUse: K, devAlloc: 1},
			{free: "a", cached: K, devAlloc: 1},
			{alloc: "b", size: 1024, same: "a", inUse: K, devAlloc: 1},
		}},
		{"up to a quarter larger is reused, more is not", 0, []op{
			{alloc: "a", size: 10 * K, fresh: true, inUse: 10 * K, devAlloc: 1},
			{free: "a", cached: 10 * K, devAlloc: 1},
			{alloc: "b", size: 7*K + 1, fresh: true, inUse: 7*K + 512, cached: 10 * K, devAlloc: 2}, // 10K > 1.25·7.5K
			{alloc: "c", size: 9 * K, same: "a", inUse: 7*K + 512 + 10*K, devAlloc: 2},              // 10K ≤ 1.25·9K
		}},
		{"a smaller request never takes a much larger block", 0, []op{
			{alloc: "big", size: 4 << 20, fresh: true, inUse: 4 << 20, devAlloc: 1},
			{free: "big", cached: 4 << 20, devAlloc: 1},
			{alloc: "small", size: 512, fresh: true, inUse: 512, cached: 4 << 20, devAlloc: 2},
		}},
		{"the smallest fitting block is taken", 0, []op{
			{alloc: "a", size: 1200, fresh: true, inUse: 1536, devAlloc: 1},
			{alloc: "b", size: 1024, fresh: true, inUse: 1536 + K, devAlloc: 2},
			{free: "a", inUse: K, cached: 1536, devAlloc: 2},
			{free: "b", cached: 1536 + K, devAlloc: 2},
			{alloc: "c", size: 1000, same: "b", inUse: K, cached: 1536, devAlloc: 2},
			{alloc: "d", size: 1000, fresh: true, inUse: 2 * K, cached: 1536, devAlloc: 3}, // 1536 > 1.25·1024
			{alloc: "e", size: 1300, same: "a", inUse: 2*K + 1536, devAlloc: 3},
		}},
		{"out of memory trims the cache and retries", 8 * K, []op{
			{alloc: "a", size: 4 * K, fresh: true, inUse: 4 * K, devAlloc: 1},
			{alloc: "b", size: 2 * K, fresh: true, inUse: 6 * K, devAlloc: 2},
			{free: "b", inUse: 4 * K, cached: 2 * K, devAlloc: 2},
			{alloc: "c", size: 4 * K, fresh: true, inUse: 8 * K, devAlloc: 3}, // 2K cached + 4K + 4K > 8K: trimmed first
		}},
		{"out of memory with nothing cached fails", 8 * K, []op{
			{alloc: "a", size: 6 * K, fresh: true, inUse: 6 * K, devAlloc: 1},
			{alloc: "b", size: 4 * K, err: true, inUse: 6 * K, devAlloc: 1},
			{free: "a", cached: 6 * K, devAlloc: 1},
			{trim: true, devAlloc: 1},
			{alloc: "c", size: 8 * K, fresh: true, inUse: 8 * K, devAlloc: 2},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev, err := OpenEmuDevice("")
			must(t, err)
			dev.Capacity = c.capacity
			a := NewAllocator(dev)
			blocks, freed := map[string]Ptr{}, map[string]Ptr{}
			for i, o := range c.ops {
				before := a.Stats().DeviceAllocs
				switch {
				case o.alloc != "":
					p, err := a.Alloc(o.size)
					if o.err {
						if !errors.Is(err, ErrOutOfMemory) {
							t.Fatalf("op %d: allocating %d: %v, want out of memory", i, o.size, err)
						}
						break
					}
					must(t, err)
					blocks[o.alloc] = p
					if o.fresh != (a.Stats().DeviceAllocs > before) {
						t.Errorf("op %d: %s from the device: %v, want %v", i, o.alloc, !o.fresh, o.fresh)
					}
					if o.same != "" && p != freed[o.same] {
						t.Errorf("op %d: %s is not %s's block", i, o.alloc, o.same)
					}
					// The block is usable memory of the size asked.
					must(t, dev.Zero(p, o.size))
				case o.free != "":
					must(t, a.Free(blocks[o.free]))
					freed[o.free] = blocks[o.free]
				case o.trim:
					must(t, a.Trim())
				}
				st := a.Stats()
				if st.InUse != o.inUse || st.Cached != o.cached || st.DeviceAllocs != o.devAlloc {
					t.Errorf("op %d: in use %d, cached %d, device allocations %d; want %d, %d, %d", i, st.InUse, st.Cached, st.DeviceAllocs, o.inUse, o.cached, o.devAlloc)
				}
			}
			must(t, a.Release())
			if dev.used != 0 {
				t.Errorf("after Release the device holds %d bytes", dev.used)
			}
		})
	}
}

func TestAllocatorRefusesForeignAndDoubleFree(t *testing.T) {
	dev, err := OpenEmuDevice("")
	must(t, err)
	a := NewAllocator(dev)
	p, err := a.Alloc(100)
	must(t, err)
	must(t, a.Free(p))
	if err := a.Free(p); err == nil {
		t.Error("a double free was accepted")
	}
	if err := a.Free(p + 4); err == nil {
		t.Error("freeing an interior address was accepted")
	}
	if _, err := a.Alloc(-1); err == nil {
		t.Error("a negative size was accepted")
	}
}

// TestAllocLastingLeavesTheCache: a lasting block comes from the device
// even where a cached block fits, and the cached block still serves the
// next ordinary request; freed, the lasting block joins the cache.
func TestAllocLastingLeavesTheCache(t *testing.T) {
	dev, err := OpenEmuDevice("")
	must(t, err)
	a := NewAllocator(dev)
	tmp, err := a.Alloc(4096)
	must(t, err)
	must(t, a.Free(tmp))
	keep, err := a.AllocLasting(4096)
	must(t, err)
	if keep == tmp {
		t.Fatal("the lasting block took the cached one")
	}
	if st := a.Stats(); st.DeviceAllocs != 2 || st.Reuses != 0 || st.Cached != 4096 {
		t.Fatalf("after AllocLasting: %+v, want 2 device allocations, the 4096-byte block still cached", st)
	}
	again, err := a.Alloc(4000)
	must(t, err)
	if again != tmp {
		t.Errorf("the cached block was not reused: got %#x, cached %#x", again, tmp)
	}
	must(t, a.Free(keep))
	if st := a.Stats(); st.Cached != 4096 || st.InUse != 4096 {
		t.Errorf("after freeing the lasting block: %+v", st)
	}
	if _, err := a.AllocLasting(-1); err == nil {
		t.Error("a negative size was accepted")
	}
}
