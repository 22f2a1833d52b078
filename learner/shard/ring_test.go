package shard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// runRanks runs f on every rank of n in-process transports at once.
func runRanks(n int, f func(g *ring) error) []error {
	ts := MemTransports(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(&ring{t: ts[i], bucket: 7, inFlight: 3})
		}()
	}
	wg.Wait()
	return errs
}

func TestAllReduce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		for _, size := range []int{1, 5, 7, 29, 100} {
			if size < n {
				continue
			}
			t.Run(fmt.Sprintf("ranks%d_len%d", n, size), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(n), uint64(size)))
				in := make([][]float32, n)
				want := make([]float64, size)
				for r := range in {
					in[r] = make([]float32, size)
					for i := range in[r] {
						in[r][i] = float32(rng.NormFloat64())
						want[i] += float64(in[r][i])
					}
				}
				out := make([][]float32, n)
				errs := runRanks(n, func(g *ring) error {
					r := g.t.Rank()
					out[r] = append([]float32(nil), in[r]...)
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					return g.allReduce(ctx, 1, 0, out[r])
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				for i := range want {
					if d := float64(out[0][i]) - want[i]; d > 1e-5 || d < -1e-5 {
						t.Fatalf("element %d: %v, want %v", i, out[0][i], want[i])
					}
					for r := 1; r < n; r++ {
						if out[r][i] != out[0][i] {
							t.Fatalf("rank %d element %d: %v, rank 0 has %v (ranks must agree bit for bit)", r, i, out[r][i], out[0][i])
						}
					}
				}
			})
		}
	}
}

func TestReduceScatterOwnedChunks(t *testing.T) {
	const n, size = 3, 20
	errs := runRanks(n, func(g *ring) error {
		x := make([]float32, size)
		for i := range x {
			x[i] = float32(g.t.Rank() + 1)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := g.reduceScatter(ctx, 1, 0, x); err != nil {
			return err
		}
		covered := 0
		for _, rg := range g.owned(size, g.t.Rank()) {
			for i := rg[0]; i < rg[1]; i++ {
				covered++
				if x[i] != 6 {
					return fmt.Errorf("rank %d owns element %d = %v, want 6", g.t.Rank(), i, x[i])
				}
			}
		}
		if covered == 0 {
			return fmt.Errorf("rank %d owns nothing", g.t.Rank())
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Every rank gets the same bits: the vectors are added in rank order.
func TestSum64SameBits(t *testing.T) {
	got := make([][]float64, 4)
	errs := runRanks(4, func(g *ring) error {
		r := g.t.Rank()
		v := []float64{0.1 * float64(r+1), 1e16 * float64(1-2*(r%2)), 1}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		err := g.sum64(ctx, 1, 0, v)
		got[r] = v
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	want := []float64{((0.1 + 0.2) + 0.30000000000000004) + 0.4, 0, 4}
	for r := range got {
		for i := range want {
			if got[r][i] != want[i] {
				t.Errorf("rank %d element %d: %v, want %v (rank-order sum)", r, i, got[r][i], want[i])
			}
		}
	}
}

// A rank that never joins the collective fails it on the others with an
// error naming it, once the timeout is up; an abort fails them at once.
func TestCollectiveFailures(t *testing.T) {
	t.Run("silent rank", func(t *testing.T) {
		ts := MemTransports(3)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := &ring{t: ts[i], bucket: 4, inFlight: 2}
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				errs[i] = g.allReduce(ctx, 1, 0, make([]float32, 12))
			}()
		}
		wg.Wait()
		// Rank 0 waits on rank 2 (its left neighbour), rank 1 on rank 0 or 2.
		if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 2") || !errors.Is(errs[0], context.DeadlineExceeded) {
			t.Errorf("rank 0: %v; want a timeout naming rank 2", errs[0])
		}
		if errs[1] == nil {
			t.Errorf("rank 1: no error")
		}
	})
	t.Run("abort", func(t *testing.T) {
		ts := MemTransports(2)
		done := make(chan error, 1)
		go func() {
			g := &ring{t: ts[0], bucket: 4, inFlight: 1}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done <- g.allReduce(ctx, 5, 0, make([]float32, 8))
		}()
		ts[1].Abort(5, errors.New("loss is NaN"))
		wantAborted(t, done, "loss is NaN")
	})
}

// Messages of an epoch before the current one are dropped, on arrival
// too, so a restarted group never reads a dead epoch's chunk.
func TestInboxForgetsOldEpochs(t *testing.T) {
	in := newInbox()
	in.put(Tag{Epoch: 1, Op: 3}, delivery{data: []byte{1}})
	in.forget(2)
	in.put(Tag{Epoch: 1, Op: 4}, delivery{data: []byte{2}})
	in.put(Tag{Epoch: 2, Op: 0}, delivery{data: []byte{3}})
	in.mu.Lock()
	n := len(in.slots)
	in.mu.Unlock()
	if n != 1 {
		t.Errorf("%d slots after forgetting epoch 1, want only epoch 2's", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := in.take(ctx, Tag{Epoch: 2}, "rank 0")
	if err != nil || len(d.data) != 1 || d.data[0] != 3 {
		t.Errorf("take: %v %v", d.data, err)
	}
}
