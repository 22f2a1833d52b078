package shard

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
)

// Tolerance of the equivalence tests: N ranks sum the same float32
// gradients in another order than one learner does, and AdamW divides by
// √v, so weights after a few steps agree to about 1e-6; 2e-5 leaves room
// without hiding a wrong slice or a missed rank (those give 1e-3 and more).
const equivTol = 2e-5

// N in-process ranks reach the weights of one learner on the same batches,
// under both ZeRO stages and with PPO mini-batches.
func TestEquivalenceInProcess(t *testing.T) {
	for _, alg := range []string{learner.GRPO, learner.PPO} {
		for _, stage := range []int{0, 1} {
			for _, n := range []int{1, 2, 4} {
				t.Run(fmt.Sprintf("%s_stage%d_ranks%d", alg, stage, n), func(t *testing.T) {
					c := tinyConfig(alg, n, stage)
					if alg == learner.PPO {
						c.MiniBatches = 2
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
