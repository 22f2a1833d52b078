package shard

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/optim"
)

// sentTags is a Transport that reports every tag it sends.
type sentTags struct {
	Transport
	sent chan Tag
}

func (s *sentTags) Send(ctx context.Context, to int, tag Tag, p []byte) error {
	err := s.Transport.Send(ctx, to, tag, p)
	select {
	case s.sent <- tag:
	default:
	}
	return err
}

// joinWatched joins n learners over in-process transports that report
// their sends.
func joinWatched(t *testing.T, c learner.Config, o Options) ([]*Rank, []*sentTags) {
	t.Helper()
	ts := MemTransports(c.Shards)
	ranks := make([]*Rank, c.Shards)
	watched := make([]*sentTags, c.Shards)
	errs := make([]error, c.Shards)
	var wg sync.WaitGroup
	for i := range ranks {
		watched[i] = &sentTags{Transport: ts[i], sent: make(chan Tag, 1<<16)}
		l := newLearner(t, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ranks[i], errs[i] = Join(l, watched[i], 1, o)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("join rank %d: %v", i, err)
		}
	}
	return ranks, watched
}

// The gradient buckets are reduced while backward still runs: in the hook
// that reports the last decoder layer's gradients final (before any
// earlier layer's backward), each rank waits until it has sent bucket 0
// of the step's gradient collective, which holds that layer's gradients
// (the flat buffer is in gradient-ready order). The step then ends at the
// unsharded learner's weights.
func TestGradientBucketsOverlapBackward(t *testing.T) {
	for _, stage := range []int{0, 1} {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			c := tinyConfig(learner.GRPO, 2, stage)
			c.MiniBatches = 2
			single := c
			single.Shards = 0
			ref := newLearner(t, single)
			ranks, watched := joinWatched(t, c, Options{BucketElems: 333, Timeout: 20 * time.Second})
			if name := ranks[0].names[ranks[0].order[0]]; !strings.HasPrefix(name, "model.layers.1.") {
				t.Fatalf("flat buffer starts with %s, want the last layer's tensors", name)
			}
			last := ranks[0].order[len(ranks[0].order)-1]
			if ranks[0].offs[last]+ranks[0].sizes[last] != ranks[0].total {
				t.Fatalf("layout: the last tensor does not end the buffer")
			}
			early := make([]int, len(ranks)) // steps whose bucket 0 went out during backward
			hookErr := make([]error, len(ranks))
			for i, r := range ranks {
				first := true
				err := r.l.SetSharding(&learner.Sharding{Rank: i, Ranks: len(ranks), Update: func(step int, ps []*optim.Param, lr float64) (float64, error) {
					first = true
					return r.update(step, ps, lr)
				}, SumStats: r.sumStats, Abort: r.abort, GradsReady: func(step int, ps []*optim.Param, ready []int) {
					op := r.op
					r.gradsReady(step, ps, ready)
					if !first {
						return
					}
					first = false
					timeout := time.After(20 * time.Second)
					for {
						select {
						case tag := <-watched[i].sent:
							if tag.Op == op && tag.Bucket == 0 {
								early[i]++
								return
							}
						case <-timeout:
							hookErr[i] = fmt.Errorf("step %d: bucket 0 not sent while backward runs", step)
							return
						}
					}
				}})
				if err != nil {
					t.Fatal(err)
				}
			}
			for step := range 2 {
				b := groupBatch(step)
				if _, err := ref.Train(b); err != nil {
					t.Fatal(err)
				}
				if _, errs := trainAll(ranks, b); errors.Join(errs...) != nil {
					t.Fatalf("step %d: %v", step, errors.Join(errs...))
				}
			}
			for i := range ranks {
				if hookErr[i] != nil {
					t.Fatalf("rank %d: %v", i, hookErr[i])
				}
				if want := 2 * c.MiniBatches; early[i] != want {
					t.Errorf("rank %d: %d of %d optimizer steps sent bucket 0 during backward", i, early[i], want)
				}
				if d, at := maxDiff(ranks[i].Learner().Model().Weights(), ref.Model().Weights()); d > equivTol {
					t.Errorf("rank %d: weights differ by %g at %s", i, d, at)
				}
			}
		})
	}
}

// A rank whose step fails while the other's buckets are on the wire fails
// that rank's step too (ErrAborted), and no bucket goroutine outlives it.
func TestAbortedBucketsDoNotLeak(t *testing.T) {
	for _, stage := range []int{0, 1} {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			c := tinyConfig(learner.GRPO, 2, stage)
			ranks := memGroup(t, c, Options{BucketElems: 100, Timeout: 10 * time.Minute})
			base := runtime.NumGoroutine()
			errs := trainPoisoned(t, ranks)
			if !errors.Is(errs[0], ErrAborted) || errs[1] == nil {
				t.Fatalf("errors %v; want rank 1's NaN and rank 0 aborted", errs)
			}
			for _, r := range ranks {
				if r.pending != nil {
					t.Errorf("rank %d keeps a gradient reduction after the failed step", r.t.Rank())
				}
			}
			// Every reduction goroutine is waited for before Train
			// returns; give the test's own goroutines a moment to exit.
			deadline := time.Now().Add(10 * time.Second)
			for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := runtime.NumGoroutine(); n > base {
				buf := make([]byte, 1<<16)
				t.Errorf("%d goroutines after the failed step, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}
