package shard

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
)

// A ZeRO-1 group saving without optimizer state writes no shard files; a
// group restarted from the checkpoint starts AdamW afresh and its ranks
// match one learner that loaded the same checkpoint.
func TestCheckpointWithoutOptimizerShards(t *testing.T) {
	c := tinyConfig(learner.GRPO, 2, 1)
	c.OmitOptimizer = true
	ranks := memGroup(t, c, Options{BucketElems: 333, Timeout: 20 * time.Second})
	for k := range 2 {
		if _, errs := trainAll(ranks, groupBatch(k)); errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
	}
	dir := t.TempDir()
	saveAll(t, ranks, dir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if m, _ := filepath.Match("optimizer*", e.Name()); m {
			t.Errorf("%s written by a group saving without optimizer state", e.Name())
		}
	}
	single := c
	single.Shards = 0
	one := newLearner(t, single)
	if err := one.Load(dir); err != nil {
		t.Fatal(err)
	}
	ranks = restartGroup(t, c, 2, dir)
	for k := 2; k < 4; k++ {
		b := groupBatch(k)
		if _, err := one.Train(b); err != nil {
			t.Fatal(err)
		}
		if _, errs := trainAll(ranks, b); errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
	}
	for r, rk := range ranks {
		if d, at := maxDiff(rk.Learner().Model().Weights(), one.Model().Weights()); d > equivTol {
			t.Errorf("rank %d: weights differ by %g at %s", r, d, at)
		}
	}
}
