//go:build linux

package shard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
	"golang.org/x/sys/unix"
)

// collective is what a rank does in sharedRounds: all-reduce, or
// reduce-scatter, doubling the owned chunks (an optimizer step's stand-in)
// and all-gather, as a ZeRO-1 step does.
type collective string

const (
	allReduceRound collective = "all-reduce"
	zeroRound      collective = "reduce-scatter+all-gather"
)

// sharedRounds runs rounds collectives of kind on n in-process ranks over
// buffers of size elements (bucket 7, 3 buckets in flight), shared or
// through the transport, each round on fresh inputs, and returns every
// rank's result of every round.
func sharedRounds(t *testing.T, n, size, rounds int, kind collective, shared bool) [][][]float32 {
	return sharedRoundsIn(t, n, size, 7, rounds, kind, shared, false)
}

// sharedRoundsIn is sharedRounds in buckets of bucket elements; with view
// the shared ranks read every result through their views (view.go),
// releasing it once read and waiting for the others' release before
// writing their buffers again.
func sharedRoundsIn(t *testing.T, n, size, bucket, rounds int, kind collective, shared, view bool) [][][]float32 {
	t.Helper()
	ts := memTransports(n, shared)
	out := make([][][]float32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = func() error {
				g := &ring{t: ts[i], bucket: bucket, inFlight: 3}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				x := make([]float32, size)
				if shared {
					buf, err := g.setupShared(ctx, 1, size)
					if err != nil {
						return err
					}
					if buf == nil {
						return errors.New("no shared buffers")
					}
					defer g.shm.close()
					x = buf
				}
				if view && !g.viewing() {
					return errors.New("shared buffers without a view")
				}
				rng := rand.New(rand.NewPCG(uint64(i), uint64(size)))
				for round := range rounds {
					if view && round > 0 {
						if err := g.shm.awaitReleased(ctx, Tag{Epoch: 1, Op: uint64(4*round - 2)}); err != nil {
							return err
						}
					}
					for k := range x {
						x[k] = float32(rng.NormFloat64()) * float32(round+1)
					}
					op := uint64(4 * round)
					switch {
					case view && kind == allReduceRound:
						err := g.forBuckets(size, func(b uint32, lo, hi int) error {
							return g.allReduceBucketToView(ctx, 1, op, b, x[lo:hi])
						})
						if err != nil {
							return err
						}
						out[i] = append(out[i], append([]float32(nil), g.shm.view.data...))
						g.shm.release(op + 2)
						continue
					case view:
						if err := g.reduceScatter(ctx, 1, op, x); err != nil {
							return err
						}
						for _, rg := range g.owned(size, i) {
							for k := rg[0]; k < rg[1]; k++ {
								x[k] *= 2
							}
						}
						if err := g.allGatherToView(ctx, 1, op+2, x); err != nil {
							return err
						}
						out[i] = append(out[i], append([]float32(nil), g.shm.view.data...))
						g.shm.release(op + 2)
						continue
					case kind == allReduceRound:
						if err := g.allReduce(ctx, 1, op, x); err != nil {
							return err
						}
					default:
						if err := g.reduceScatter(ctx, 1, op, x); err != nil {
							return err
						}
						for _, rg := range g.owned(size, i) {
							for k := rg[0]; k < rg[1]; k++ {
								x[k] *= 2
							}
						}
						if err := g.allGather(ctx, 1, op+2, x); err != nil {
							return err
						}
					}
					out[i] = append(out[i], append([]float32(nil), x...))
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

// Collectives over shared buffers give every rank the bits the ring gives
// it through the transport, round after round (a rank writes its buffer
// again only once no peer reads it).
func TestSharedCollectivesSameBitsAsRing(t *testing.T) {
	for _, kind := range []collective{allReduceRound, zeroRound} {
		for _, n := range []int{2, 3, 4} {
			for _, size := range []int{5, 7, 29, 100} {
				if size < n {
					continue
				}
				t.Run(fmt.Sprintf("%s_ranks%d_len%d", kind, n, size), func(t *testing.T) {
					sameRounds(t, sharedRounds(t, n, size, 4, kind, true), sharedRounds(t, n, size, 4, kind, false), "shared")
				})
			}
		}
	}
}

// sameRounds fails unless got (by rank, round) has want's bits.
func sameRounds(t *testing.T, got, want [][][]float32, how string) {
	t.Helper()
	for r := range want {
		for round := range want[r] {
			for i, v := range want[r][round] {
				if got[r][round][i] != v {
					t.Fatalf("rank %d round %d element %d: %v %s, %v through the transport", r, round, i, got[r][round][i], how, v)
				}
			}
		}
	}
}

// Results read through views have the ring's bits too, round after round,
// in buckets that cut pages between owners (copied) and buckets whose
// chunks are whole pages (mapped).
func TestSharedViewsSameBitsAsRing(t *testing.T) {
	for _, kind := range []collective{allReduceRound, zeroRound} {
		for _, n := range []int{2, 3, 4} {
			for _, c := range []struct{ size, bucket int }{{29, 7}, {5000, 3000}, {3 * 8192, 8192}, {20000, 4096}} {
				t.Run(fmt.Sprintf("%s_ranks%d_len%d_bucket%d", kind, n, c.size, c.bucket), func(t *testing.T) {
					want := sharedRoundsIn(t, n, c.size, c.bucket, 3, kind, false, false)
					sameRounds(t, sharedRoundsIn(t, n, c.size, c.bucket, 3, kind, true, true), want, "through the view")
				})
			}
		}
	}
}

// When one rank cannot share, no rank does, and every rank says why in the
// same words.
func TestSharedFallbackSaysWhy(t *testing.T) {
	ts := memTransports(3, true)
	ts[2].(*memTransport).shared = false
	gs := make([]*ring, 3)
	bufs := make([][]float32, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[i] = &ring{t: ts[i], bucket: 7, inFlight: 1}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			bufs[i], errs[i] = gs[i].setupShared(ctx, 1, 30)
		}()
	}
	wg.Wait()
	for i := range gs {
		if errs[i] != nil || bufs[i] != nil || gs[i].shm != nil {
			t.Fatalf("rank %d: buffer %v, shared %v, error %v; want the transport", i, bufs[i] != nil, gs[i].shm != nil, errs[i])
		}
		if want := "rank 2 (in process): its node's same-host path is off"; gs[i].notShared != want {
			t.Errorf("rank %d says %q, want %q", i, gs[i].notShared, want)
		}
	}
}

// Ranks whose buffers are shared read results through views whose pages
// are their peers' (chunks of whole pages), and both ZeRO stages train to
// the transport's bits. Where a rank cannot make a view, every rank shares
// buffers without one and says why.
func TestSharedViewsInRanks(t *testing.T) {
	for _, c := range []struct {
		name      string
		stage     int
		failView  bool
		wantViews bool
	}{{"stage0", 0, false, true}, {"stage1", 1, false, true}, {"stage0_no_view", 0, true, false}} {
		t.Run(c.name, func(t *testing.T) {
			conf := tinyConfig(learner.GRPO, 2, c.stage)
			o := Options{BucketElems: 4096, Timeout: 20 * time.Second}
			if c.failView {
				saved := testNewView
				testNewView = func(s *shmGroup, total int) (*view, error) {
					if s.rank == 1 {
						return nil, errors.New("no room for a view")
					}
					return saved(s, total)
				}
				t.Cleanup(func() { testNewView = saved })
			}
			plain := memGroupOf(t, conf, o, false)
			shared := memGroupOf(t, conf, o, true)
			for r, rk := range shared {
				if !rk.Shared() || rk.ring.viewing() != c.wantViews {
					t.Fatalf("rank %d: shared %v, viewing %v; want true, %v", r, rk.Shared(), rk.ring.viewing(), c.wantViews)
				}
			}
			if c.failView {
				want := "shared memory, results written into every rank's buffer (no views: rank 1 (in process): no room for a view)"
				for r, rk := range shared {
					if got := rk.Gradients(); got != want {
						t.Errorf("rank %d: gradients %q, want %q", r, got, want)
					}
				}
			} else if runs, _ := viewLayout(shared[0].total, o.BucketElems, 2, os.Getpagesize()/4); len(runs) < 2 {
				t.Fatalf("%d elements in buckets of %d: %d mapped runs, want some of each rank's", shared[0].total, o.BucketElems, len(runs))
			}
			for step := range 4 {
				for _, g := range [][]*Rank{plain, shared} {
					if _, errs := trainAll(g, groupBatch(step)); errs[0] != nil || errs[1] != nil {
						t.Fatalf("step %d: %v", step, errs)
					}
				}
			}
			want := plain[0].Learner().Model().Weights()
			for r, rk := range shared {
				if d, at := maxDiff(rk.Learner().Model().Weights(), want); d != 0 {
					t.Errorf("rank %d: weights differ from the transport's by %g at %s", r, d, at)
				}
			}
		})
	}
}

// A rank slow to read its view holds the others back from writing their
// buffers: ranks stepping on their own (no collective between one update
// and the next gradients, as a caller of the sharding hooks may) each get
// the sum of that step's gradients.
func TestSharedViewReleaseHoldsWriters(t *testing.T) {
	conf := tinyConfig(learner.SFT, 2, 0)
	conf.MaxGradNorm = 0
	ranks := memGroupOf(t, conf, Options{BucketElems: 4096, Timeout: 20 * time.Second}, true)
	if !ranks[0].ring.viewing() {
		t.Fatal("no views")
	}
	grad := func(rank, step, i int) float32 { return float32((rank+1)*1000+step*10) + float32(i%7) }
	saved := testBeforeRead
	testBeforeRead = func(rank int) {
		if rank == 1 {
			time.Sleep(30 * time.Millisecond)
		}
	}
	t.Cleanup(func() { testBeforeRead = saved })
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for rank, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[rank] = func() error {
				for step := range 4 {
					params := rk.Learner().TrainableParams()
					for _, p := range params {
						for i := range p.Grad {
							p.Grad[i] = grad(rank, step, i)
						}
					}
					if _, err := rk.update(step, params, 1e-6); err != nil {
						return fmt.Errorf("step %d: %w", step, err)
					}
					for _, p := range params {
						for i, g := range p.Grad {
							if want := grad(0, step, i) + grad(1, step, i); g != want {
								return fmt.Errorf("step %d: %s gradient %d is %v, want the sum %v", step, p.Name, i, g, want)
							}
						}
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// A view's whole pages are read-only mappings of their owners' segments.
func TestViewsAreReadOnlyMappingsOfSegments(t *testing.T) {
	ts := memTransports(2, true)
	gs := make([]*ring, 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[i] = &ring{t: ts[i], bucket: 8192, inFlight: 1}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, errs[i] = gs[i].setupShared(ctx, 1, 3*8192)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil || !gs[i].viewing() {
			t.Fatalf("rank %d: %v, viewing %v", i, err, gs[i].viewing())
		}
		defer gs[i].shm.close()
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	v := gs[0].shm.view
	runs, _ := viewLayout(len(v.data), 8192, 2, os.Getpagesize()/4)
	if len(runs) != 6 {
		t.Fatalf("%d mapped runs, want 6 (3 buckets, 2 owners)", len(runs))
	}
	for _, r := range runs {
		addr := uint64(uintptr(unsafe.Pointer(&v.data[r.lo])))
		var line string
		for _, l := range strings.Split(string(maps), "\n") {
			var lo, hi uint64
			if _, err := fmt.Sscanf(l, "%x-%x", &lo, &hi); err == nil && lo <= addr && addr < hi {
				line = l
			}
		}
		if f := strings.Fields(line); len(f) < 6 || f[1] != "r--s" || !strings.Contains(line, "memfd:"+sharedMemName) {
			t.Errorf("view of elements [%d, %d) (rank %d's): mapping %q, want a read-only shared mapping of its segment", r.lo, r.hi, r.owner, line)
		}
	}
}

// segmentsMapped counts the distinct shared gradient segments process pid
// maps.
func segmentsMapped(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.Contains(line, "memfd:"+sharedMemName) {
			inodes[f[4]] = true
		}
	}
	return len(inodes)
}

// Ranks on shared buffers train to the very bits of ranks whose chunks go
// through the transport, under both ZeRO stages, and through a LoRA switch
// (the layout shrinks into the same segments); closed, they map nothing.
func TestSharedEquivalenceInProcess(t *testing.T) {
	before := segmentsMapped(t, os.Getpid())
	for _, stage := range []int{0, 1} {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("stage%d_ranks%d", stage, n), func(t *testing.T) {
				c := tinyConfig(learner.SFT, n, stage)
				c.LoRA = &model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "o_proj"}, Seed: 9}
				o := Options{BucketElems: 333, Timeout: 20 * time.Second}
				plain := memGroupOf(t, c, o, false)
				shared := memGroupOf(t, c, o, true)
				for r := range n {
					if plain[r].Shared() || !shared[r].Shared() || !shared[r].ring.viewing() {
						t.Fatalf("rank %d: shared %v and %v (viewing %v), want false and true (true)", r, plain[r].Shared(), shared[r].Shared(), shared[r].ring.viewing())
					}
					if got, want := plain[r].Gradients(), "transport: rank 0 (in process): its node's same-host path is off"; got != want {
						t.Errorf("rank %d without shared memory: gradients %q, want %q", r, got, want)
					}
					if got := shared[r].Gradients(); got != "shared memory" {
						t.Errorf("rank %d: gradients %q, want shared memory", r, got)
					}
				}
				if got := segmentsMapped(t, os.Getpid()); got != before+n {
					t.Errorf("%d segments mapped, want %d (one per rank)", got, before+n)
				}
				for step := range 4 {
					if step == 2 {
						switchAll(t, plain, learner.GRPO)
						switchAll(t, shared, learner.GRPO)
					}
					for _, g := range [][]*Rank{plain, shared} {
						_, errs := trainAll(g, groupBatch(step))
						for r, err := range errs {
							if err != nil {
								t.Fatalf("step %d rank %d: %v", step, r, err)
							}
						}
					}
				}
				want := plain[0].Learner().Model().Weights()
				for r := range n {
					got := shared[r].Learner().Model().Weights()
					for name, w := range want {
						for i := range w {
							if got[name][i] != w[i] {
								t.Fatalf("rank %d: %s[%d] is %v shared, %v through the transport", r, name, i, got[name][i], w[i])
							}
						}
					}
				}
				for _, r := range shared {
					r.Close()
				}
				if got := segmentsMapped(t, os.Getpid()); got != before {
					t.Errorf("%d segments mapped after closing the ranks, want %d", got, before)
				}
			})
		}
	}
}

// A rank whose peer never comes names it when the collective's deadline
// passes, and an abort ends a wait on shared buffers with its cause.
func TestSharedCollectiveFailures(t *testing.T) {
	setup := func(t *testing.T, n int) []*ring {
		ts := memTransports(n, true)
		gs := make([]*ring, n)
		var wg sync.WaitGroup
		for i := range ts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				gs[i] = &ring{t: ts[i], bucket: 4, inFlight: 2}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if buf, err := gs[i].setupShared(ctx, 5, 12); err != nil || buf == nil {
					t.Errorf("rank %d: set-up: %v", i, err)
				}
			}()
		}
		wg.Wait()
		t.Cleanup(func() {
			for _, g := range gs {
				g.shm.close()
			}
		})
		if t.Failed() {
			t.FailNow()
		}
		return gs
	}
	t.Run("silent rank", func(t *testing.T) {
		gs := setup(t, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = gs[i].allReduce(ctx, 5, 0, gs[i].shm.bufs[i])
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "rank 2 (in process) sent nothing") || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("rank %d: %v; want a timeout naming rank 2", i, err)
			}
		}
	})
	t.Run("view not released", func(t *testing.T) {
		gs := setup(t, 2)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := gs[0].shm.awaitReleased(ctx, Tag{Epoch: 5, Op: 9})
		if err == nil || !strings.Contains(err.Error(), "rank 1 (in process) has not released its view of collective 9") || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want a timeout naming rank 1 and the view", err)
		}
		gs[1].shm.release(9)
		if err := gs[0].shm.awaitReleased(context.Background(), Tag{Epoch: 5, Op: 9}); err != nil {
			t.Errorf("after the release: %v", err)
		}
	})
	t.Run("abort", func(t *testing.T) {
		gs := setup(t, 2)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done <- gs[0].allReduce(ctx, 5, 0, gs[0].shm.bufs[0])
		}()
		gs[1].t.Abort(5, errors.New("loss is NaN"))
		wantAborted(t, done, "loss is NaN")
	})
}

// A segment is this user's alone (0600), sealed against resizing, and its
// descriptor is closed once set up; a peer refuses one whose token or size
// is not what was offered.
func TestSharedSegmentChecks(t *testing.T) {
	seg, err := newSharedSegment(100, 7)
	if err != nil {
		t.Skipf("no shared segments here: %v", err)
	}
	defer seg.release()
	var st unix.Stat_t
	if err := unix.Fstat(seg.fd, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o777 != 0o600 {
		t.Errorf("segment mode %o, want 600", st.Mode&0o777)
	}
	if seals, err := unix.FcntlInt(uintptr(seg.fd), unix.F_GET_SEALS, 0); err != nil || seals&sharedSeals != sharedSeals {
		t.Errorf("seals %#x (%v), want %#x", seals, err, sharedSeals)
	}
	if err := unix.Ftruncate(seg.fd, 1<<12); err == nil {
		t.Error("a sealed segment shrank")
	}
	m, err := mapPeerSegment(seg.offer)
	if err != nil {
		t.Fatalf("the offered segment: %v", err)
	}
	m.close()
	for _, tc := range []struct {
		name string
		edit func(o *offer)
	}{
		{"token", func(o *offer) { o.token[3]++ }},
		{"size", func(o *offer) { o.segBytes += 4096 }},
		{"elements", func(o *offer) { o.floats++ }},
		{"descriptor", func(o *offer) { o.fd = 0 }},
	} {
		o := seg.offer
		tc.edit(&o)
		if m, err := mapPeerSegment(o); err == nil {
			m.close()
			t.Errorf("a segment offered with another %s was mapped", tc.name)
		}
	}
	if got := decodeOffer(seg.offer.encode()); got != seg.offer {
		t.Errorf("offer %+v came back as %+v", seg.offer, got)
	}
	seg.closeFD()
	fds, _ := filepath.Glob("/proc/self/fd/*")
	for _, f := range fds {
		if l, err := os.Readlink(f); err == nil && strings.Contains(l, "memfd:"+sharedMemName) {
			t.Errorf("descriptor %s of a segment still open after closeFD", l)
		}
	}
}
