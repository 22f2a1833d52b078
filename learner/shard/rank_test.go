package shard

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/rl"
)

// Tolerance of the equivalence tests: N ranks sum the same float32
// gradients in another order than one learner does, and AdamW divides by
// √v, so weights after a few steps agree to about 1e-6; 2e-5 leaves room
// without hiding a wrong slice or a missed rank (those give 1e-3 and more).
const equivTol = 2e-5

// N in-process ranks reach the weights of one learner on the same batches,
// under both ZeRO stages: GRPO, PPO with a value head and two mini-batches,
// GRPO with KL to the frozen reference and two mini-batches, and SFT.
func TestEquivalenceInProcess(t *testing.T) {
	for _, alg := range []string{learner.GRPO, learner.PPO, "grpo+kl", learner.SFT} {
		for _, stage := range []int{0, 1} {
			for _, n := range []int{1, 2, 4} {
				t.Run(fmt.Sprintf("%s_stage%d_ranks%d", alg, stage, n), func(t *testing.T) {
					c := tinyConfig(strings.TrimSuffix(alg, "+kl"), n, stage)
					switch alg {
					case learner.PPO:
						c.MiniBatches = 2
					case "grpo+kl":
						c.Loss.KLCoef, c.Loss.KL, c.MiniBatches = 0.05, rl.K3, 2
					}
					single := c
					single.Shards = 0
					ref := newLearner(t, single)
					init := ref.Model().Weights()
					ranks := memGroup(t, c, Options{BucketElems: 333, Timeout: 20 * time.Second})
					for step := range 3 {
						b := groupBatch(step)
						want, err := ref.Train(b)
						if err != nil {
							t.Fatal(err)
						}
						got, errs := trainAll(ranks, b)
						for r, err := range errs {
							if err != nil {
								t.Fatalf("step %d rank %d: %v", step, r, err)
							}
						}
						for r := range ranks {
							if got[r].Step != want.Step || math.Abs(got[r].Loss-want.Loss) > 1e-5 || got[r].Tokens != want.Tokens ||
								math.Abs(got[r].GradNorm-want.GradNorm) > 1e-4*want.GradNorm || math.Abs(got[r].Entropy-want.Entropy) > 1e-5 {
								t.Fatalf("step %d rank %d stats %+v\nwant %+v", step, r, got[r], want)
							}
						}
					}
					w := ref.Model().Weights()
					if moved, _ := maxDiff(w, init); moved < 100*equivTol {
						t.Fatalf("the weights moved by only %g: the test would not see a wrong update", moved)
					}
					for r, rk := range ranks {
						d, at := maxDiff(rk.Learner().Model().Weights(), w)
						if d > equivTol {
							t.Errorf("rank %d: weights differ by %g at %s (tolerance %g)", r, d, at, equivTol)
						}
						t.Logf("rank %d: max weight difference %g", r, d)
					}
				})
			}
		}
	}
}

// ZeRO-1 keeps on each rank the moments of its slice only: the ranks'
// moment counts add up to the model's parameter count.
func TestZeRO1KeepsItsSlice(t *testing.T) {
	c := tinyConfig(learner.GRPO, 4, 1)
	ranks := memGroup(t, c, Options{BucketElems: 100, Timeout: 20 * time.Second})
	if _, errs := trainAll(ranks, groupBatch(0)); errs[0] != nil {
		t.Fatal(errs)
	}
	total := 0
	for _, p := range ranks[0].Learner().TrainableParams() {
		total += len(p.Data)
	}
	sum := 0
	for r, rk := range ranks {
		n := 0
		for _, tn := range rk.zopt.State().Tensors {
			n += len(tn.Data)
		}
		if len(rk.Learner().Optimizer().State().Tensors) != 0 {
			t.Errorf("rank %d: the learner's own AdamW still holds state", r)
		}
		if n/2 > total/4+100 {
			t.Errorf("rank %d keeps %d moments of %d parameters, want about a quarter", r, n/2, total)
		}
		sum += n / 2
	}
	if sum != total {
		t.Errorf("ranks keep moments of %d elements, the model has %d", sum, total)
	}
}

func TestJoinRefusesDifferentWeights(t *testing.T) {
	c := tinyConfig(learner.GRPO, 2, 1)
	ts := MemTransports(2)
	errs := make([]error, 2)
	done := make(chan struct{})
	for i := range 2 {
		ci := c
		ci.Seed = uint64(10 + i)
		l := newLearner(t, ci)
		go func() {
			_, errs[i] = Join(l, ts[i], 1, Options{Timeout: 20 * time.Second})
			done <- struct{}{}
		}()
	}
	<-done
	<-done
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "holds other weights") {
			t.Errorf("rank %d: %v; want a refusal naming the different weights", i, err)
		}
	}
}

// A step that fails on one rank alone fails the others at once through
// the abort, not at their timeout, and the group then refuses to train:
// its slice's loss is NaN, or (two mini-batches) its pre-pass's old log
// probabilities are, which the batch's checks refuse before any step.
func TestLocalFailureAbortsGroup(t *testing.T) {
	for _, tc := range []struct {
		name        string
		miniBatches int
		want        string
	}{{"loss", 1, "NaN"}, {"pre-pass", 2, "old log probs[2][0] is NaN"}} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig(learner.GRPO, 2, 1)
			c.MiniBatches = tc.miniBatches
			ranks := memGroup(t, c, Options{Timeout: 10 * time.Minute})
			errs := trainPoisoned(t, ranks)
			if errs[1] == nil || !strings.Contains(errs[1].Error(), tc.want) {
				t.Errorf("rank 1: %v; want %q", errs[1], tc.want)
			}
			if !errors.Is(errs[0], ErrAborted) || !strings.Contains(errs[0].Error(), "NaN") {
				t.Errorf("rank 0: %v; want ErrAborted carrying rank 1's cause", errs[0])
			}
			if _, errs := trainAll(ranks, groupBatch(1)); !errors.Is(errs[0], ErrGroupFailed) {
				t.Errorf("train after the failure: %v; want ErrGroupFailed", errs[0])
			}
		})
	}
}

// trainPoisoned makes rank 1's weights NaN (after the join's check) and
// trains every rank on one batch: rank 1's step fails, and rank 0 must not
// wait for it past 2 minutes.
func trainPoisoned(t *testing.T, ranks []*Rank) []error {
	t.Helper()
	p := ranks[1].Learner().TrainableParams()
	for i := range p[0].Data {
		p[0].Data[i] = float32(math.NaN())
	}
	done := make(chan []error, 1)
	go func() { _, errs := trainAll(ranks, groupBatch(0)); done <- errs }()
	select {
	case errs := <-done:
		return errs
	case <-time.After(2 * time.Minute):
		t.Fatal("rank 0 still waits for rank 1, whose step failed")
		return nil
	}
}
