package shard

import (
	"fmt"
	"sync"
	"testing"
)

// BenchmarkRingCopyBound is the ceiling of a ring all-reduce whose chunks
// go through shared slots, on this machine: n goroutines (one per rank,
// with GOMAXPROCS the machine's cores) do at once the memory work each
// rank does in AllReduceLoopback, and nothing else. Per rank and step, the
// reduce-scatter copies a chunk of S/n into a slot and sums one out of a
// slot into its buffer; the all-gather copies one into a slot and one out.
// No transport, no wake-ups, no waiting on a peer: the bus bandwidth it
// reports (as AllReduceLoopback's) is what the slot design could reach at
// best, beside Memcpy's single copy.
func BenchmarkRingCopyBound(b *testing.B) {
	bucket := Options{}.withDefaults().BucketElems
	for _, n := range []int{2, 4} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("ranks=%d/MiB=%d", n, size>>20), func(b *testing.B) {
				type rankMem struct {
					x, peer []float32
					slots   [][]float32
				}
				ranks := make([]rankMem, n)
				for r := range ranks {
					ranks[r].x = make([]float32, size/4)
					ranks[r].peer = make([]float32, size/4) // what the left rank sends
					for i := range ranks[r].x {
						ranks[r].x[i], ranks[r].peer[i] = float32(i), float32(r)
					}
					for range 8 {
						ranks[r].slots = append(ranks[r].slots, make([]float32, 1<<20))
					}
				}
				work := func(m *rankMem) {
					k := 0
					slot := func() []float32 { k++; return m.slots[k%len(m.slots)] }
					elems := len(m.x)
					for s := 0; s < n-1; s++ {
						for lo := 0; lo < elems; lo += bucket {
							seg, peer := m.x[lo:min(lo+bucket, elems)], m.peer[lo:min(lo+bucket, elems)]
							slo, shi := chunk(len(seg), n, s)
							rlo, rhi := chunk(len(seg), n, s+1)
							copy(slot(), seg[slo:shi])         // the chunk this rank sends
							addTo(seg[rlo:rhi], peer[rlo:rhi]) // stands for the sum out of the left rank's slot
						}
					}
					for s := 0; s < n-1; s++ {
						for lo := 0; lo < elems; lo += bucket {
							seg := m.x[lo:min(lo+bucket, elems)]
							slo, shi := chunk(len(seg), n, s)
							rlo, rhi := chunk(len(seg), n, s+1)
							out := slot()
							copy(out, seg[slo:shi])
							copy(seg[rlo:rhi], out[:rhi-rlo]) // stands for the copy out of the left rank's slot
						}
					}
				}
				timeRanks(b, n, size, func(r int) { work(&ranks[r]) })
			})
		}
	}
}

// BenchmarkSharedCopyBound is RingCopyBound for shared buffers: n
// goroutines (one per rank) do at once the memory work each rank does in
// an all-reduce on shared buffers, and nothing else. Per bucket, a rank
// sums its chunk of every rank's buffer into its own (one read per buffer
// and element, one store), which the others then read through their views;
// no two ranks touch the same chunk, as in the real all-reduce, whose
// signalling this leaves out. BenchmarkInPlaceCopyBound is the same with
// the sum stored into every rank's buffer (no views), and
// BenchmarkReadBound reads every chunk once and stores nothing: no
// all-reduce that gives each rank the sum of every rank's buffer can do
// less memory work than that.
func BenchmarkSharedCopyBound(b *testing.B) {
	benchCopyBound(b, func(dst []float32, srcs [][]float32) { sumInto(dst, srcs) })
}

func BenchmarkInPlaceCopyBound(b *testing.B) { benchCopyBound(b, sumSpread) }

func BenchmarkReadBound(b *testing.B) {
	benchCopyBound(b, func(dst []float32, srcs [][]float32) {
		var tmp [sumBlock]float32
		for lo := 0; lo < len(dst); lo += sumBlock {
			hi := min(lo+sumBlock, len(dst))
			t := tmp[:hi-lo]
			addTo(t, dst[lo:hi])
			for _, src := range srcs {
				addTo(t, src[lo:hi])
			}
		}
		if tmp[0] == 1.5 { // keep the sums live
			dst[0] = tmp[1]
		}
	})
}

// benchCopyBound times, per rank and bucket, sum(own chunk, the other
// ranks' chunks) on n goroutines.
func benchCopyBound(b *testing.B, sum func(dst []float32, srcs [][]float32)) {
	bucket := Options{}.withDefaults().BucketElems
	for _, n := range []int{2, 4} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("ranks=%d/MiB=%d", n, size>>20), func(b *testing.B) {
				bufs := make([][]float32, n)
				for r := range n {
					bufs[r] = make([]float32, size/4)
					for i := range bufs[r] {
						bufs[r][i] = float32(r)
					}
				}
				work := func(r int) {
					srcs := make([][]float32, n-1)
					for lo := 0; lo < len(bufs[r]); lo += bucket {
						m := min(bucket, len(bufs[r])-lo)
						clo, chi := chunk(m, n, r)
						for i := 1; i < n; i++ {
							srcs[i-1] = bufs[mod(r+i, n)][lo+clo : lo+chi]
						}
						sum(bufs[r][lo+clo:lo+chi], srcs)
					}
				}
				timeRanks(b, n, size, work)
			})
		}
	}
}

// timeRanks times work run by n goroutines at once, one per rank (rank r
// calls work(r)), once untimed to fault every page in, and reports the bus
// bandwidth of an all-reduce of size bytes done in that time.
func timeRanks(b *testing.B, n, size int, work func(r int)) {
	all := func() {
		var wg sync.WaitGroup
		for r := range n {
			wg.Add(1)
			go func() { defer wg.Done(); work(r) }()
		}
		wg.Wait()
	}
	all()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		all()
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(size)/sec/1e9*2*float64(n-1)/float64(n), "busGB/s")
}
