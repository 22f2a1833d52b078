package shard

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/rl"
)

func saveAll(t *testing.T, ranks []*Rank, dir string) {
	t.Helper()
	for r, rk := range ranks {
		if err := rk.Save(dir); err != nil {
			t.Fatalf("save rank %d: %v", r, err)
		}
	}
}

// restartGroup builds n new learners and restarts them from dir.
func restartGroup(t *testing.T, c learner.Config, n int, dir string) []*Rank {
	t.Helper()
	c.Shards = n
	ts := MemTransports(n)
	ranks := make([]*Rank, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ranks {
		l := newLearner(t, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ranks[i], errs[i] = Restart(l, ts[i], 2, Options{BucketElems: 100, Timeout: 20 * time.Second}, dir)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("restart rank %d of %d: %v", i, n, err)
		}
	}
	return ranks
}

// A rank restarting from a checkpoint gives up the load once its context
// is done (a rank actor asked to stop): Restart loaded on, deaf to it.
func TestRestartContextStops(t *testing.T) {
	c := tinyConfig(learner.GRPO, 1, 0)
	dir := filepath.Join(t.TempDir(), "ck")
	if err := newLearner(t, c).Save(dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := RestartContext(ctx, newLearner(t, c), MemTransports(1)[0], 2, Options{Timeout: 20 * time.Second}, dir)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RestartContext stopped: %v, want context.Canceled", err)
	}
}

// A checkpoint written by 2 ZeRO-1 ranks (with a KL reference) loads into
// 1, 3 and 4 ranks of either stage and into an unsharded learner, and one
// more step lands where training straight through does.
func TestReshardCheckpoint(t *testing.T) {
	c := tinyConfig(learner.GRPO, 2, 1)
	c.Loss.KLCoef, c.Loss.KL = 0.05, rl.K3 // the frozen reference travels too
	single := c
	single.Shards = 0
	straight := newLearner(t, single)
	ranks := memGroup(t, c, Options{BucketElems: 100, Timeout: 20 * time.Second})
	for step := range 2 {
		if _, err := straight.Train(groupBatch(step)); err != nil {
			t.Fatal(err)
		}
		if _, errs := trainAll(ranks, groupBatch(step)); errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
	}
	dir := t.TempDir()
	saveAll(t, ranks, dir)
	for _, f := range []string{learner.ShardOptimizerFile(0, 2), learner.ShardOptimizerFile(1, 2), "model.safetensors", learner.ReferenceFile, learner.StateFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("checkpoint lacks %s: %v", f, err)
		}
	}
	if _, err := straight.Train(groupBatch(2)); err != nil {
		t.Fatal(err)
	}
	want := straight.Model().Weights()

	plain := newLearner(t, single)
	if err := plain.Load(dir); err != nil {
		t.Fatalf("unsharded load of a 2-shard checkpoint: %v", err)
	}
	if _, err := plain.Train(groupBatch(2)); err != nil {
		t.Fatal(err)
	}
	if d, at := maxDiff(plain.Model().Weights(), want); d > equivTol {
		t.Errorf("unsharded learner from the 2-shard checkpoint: weights differ by %g at %s", d, at)
	}
	for _, n := range []int{1, 3, 4} {
		for _, stage := range []int{0, 1} {
			c.ZeROStage = stage
			rs := restartGroup(t, c, n, dir)
			_, errs := trainAll(rs, groupBatch(2))
			for r, err := range errs {
				if err != nil {
					t.Fatalf("%d ranks, rank %d: %v", n, r, err)
				}
			}
			for r, rk := range rs {
				if rk.Learner().Step() != 3 {
					t.Errorf("%d ranks stage %d, rank %d at step %d, want 3", n, stage, r, rk.Learner().Step())
				}
				if d, at := maxDiff(rk.Learner().Model().Weights(), want); d > equivTol {
					t.Errorf("%d ranks stage %d, rank %d: weights differ by %g at %s", n, stage, r, d, at)
				}
			}
		}
	}
	// Saving with 4 ZeRO-1 ranks replaces the 2-shard files.
	c.ZeROStage = 1
	rs := restartGroup(t, c, 4, dir)
	saveAll(t, rs, dir)
	if _, err := os.Stat(filepath.Join(dir, learner.ShardOptimizerFile(0, 2))); err == nil {
		t.Errorf("stale 2-shard optimizer file left beside the 4-shard ones")
	}
	if err := newLearner(t, single).Load(dir); err != nil {
		t.Errorf("load of the 4-shard checkpoint: %v", err)
	}
}

func TestCheckpointShardErrors(t *testing.T) {
	c := tinyConfig(learner.GRPO, 2, 1)
	ranks := memGroup(t, c, Options{BucketElems: 100, Timeout: 20 * time.Second})
	if _, errs := trainAll(ranks, groupBatch(0)); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	single := c
	single.Shards = 0
	for _, tc := range []struct {
		name    string
		corrupt func(dir string) error
		want    string
	}{
		{"missing shard", func(dir string) error { return os.Remove(filepath.Join(dir, learner.ShardOptimizerFile(1, 2))) }, "optimizer-00002-of-00002.safetensors missing"},
		{"two shard counts", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, learner.ShardOptimizerFile(0, 3)), nil, 0o644)
		}, "of 2 and of 3 shards"},
		{"overlap", func(dir string) error {
			// Rank 0's file again as rank 1's: every element twice.
			b, err := os.ReadFile(filepath.Join(dir, learner.ShardOptimizerFile(0, 2)))
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, learner.ShardOptimizerFile(1, 2)), b, 0o644)
		}, "also in another shard"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			saveAll(t, ranks, dir)
			if err := tc.corrupt(dir); err != nil {
				t.Fatal(err)
			}
			err := newLearner(t, single).Load(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("load: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}
