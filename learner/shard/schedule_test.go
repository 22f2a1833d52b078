package shard

import (
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
)

// Every rank computes the same learning rate as one learner across an SFT
// warm-up and the RL schedule after it (warm-up, cosine), also after a
// restart from a checkpoint written in the RL phase.
func TestScheduleAcrossWarmupEqualsOneLearner(t *testing.T) {
	c := tinyConfig(learner.GRPO, 2, 1)
	c.LR, c.MinLR, c.WarmupSteps, c.TotalSteps = 1e-3, 1e-4, 2, 5
	single := c
	single.Shards = 0
	ref := newLearner(t, single)
	ranks := memGroup(t, c, Options{BucketElems: 333, Timeout: 20 * time.Second})
	setAll := func(rs []*Rank, alg string, lr float64) {
		for _, rk := range rs {
			if err := rk.Learner().SetAlgorithm(alg, lr); err != nil {
				t.Fatal(err)
			}
		}
	}
	step := func(rs []*Rank, k int) {
		t.Helper()
		b := groupBatch(k)
		want, err := ref.Train(b)
		if err != nil {
			t.Fatal(err)
		}
		got, errs := trainAll(rs, b)
		for r := range rs {
			if errs[r] != nil {
				t.Fatalf("step %d rank %d: %v", k, r, errs[r])
			}
			if got[r].LR != want.LR || got[r].Step != want.Step {
				t.Fatalf("step %d rank %d: lr %v step %d, one learner's lr %v step %d", k, r, got[r].LR, got[r].Step, want.LR, want.Step)
			}
		}
	}
	if err := ref.SetAlgorithm(learner.SFT, 2e-3); err != nil {
		t.Fatal(err)
	}
	setAll(ranks, learner.SFT, 2e-3)
	for k := range 2 {
		step(ranks, k)
	}
	if err := ref.SetAlgorithm(learner.GRPO, 1e-3); err != nil {
		t.Fatal(err)
	}
	setAll(ranks, learner.GRPO, 1e-3)
	for k := 2; k < 4; k++ {
		step(ranks, k)
	}
	dir := t.TempDir()
	saveAll(t, ranks, dir)
	ranks = restartGroup(t, c, 2, dir)
	setAll(ranks, learner.GRPO, 1e-3)
	for k := 4; k < 9; k++ {
		step(ranks, k)
	}
	// RL steps 0..6 of the schedule ran: the last is past its end.
	if lr := ref.Step(); lr != 9 {
		t.Fatalf("one learner at step %d, want 9", lr)
	}
	w := ref.Model().Weights()
	for r, rk := range ranks {
		if d, at := maxDiff(rk.Learner().Model().Weights(), w); d > equivTol {
			t.Errorf("rank %d: weights differ by %g at %s (tolerance %g)", r, d, at, equivTol)
		}
	}
}
