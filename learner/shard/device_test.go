package shard

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/learner/cuda/cudatest"
)

// TestDeviceRanksEqualOneLearner: two data-parallel ranks, each on its
// own (emulated) GPU, reduce their gradients over the ring through host
// copies, step with the fused AdamW on their devices and reach the
// weights of one learner on one such GPU. (ZeRO-1 takes the same path from the
// gradients on; the in-process tests on the CPU cover it.)
func TestDeviceRanksEqualOneLearner(t *testing.T) {
	newBackend := cudatest.EmuBackend(t)
	for _, stage := range []int{0} {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			c := tinyConfig(learner.GRPO, 2, stage)
			c.Backend = newBackend
			single := c
			single.Shards = 0
			ref := newLearner(t, single)
			if _, ok := ref.Model().B.(*cuda.DeviceBackend); !ok {
				t.Fatalf("the learner runs on %T, not the device backend", ref.Model().B)
			}
			init := ref.Model().Weights()
			ranks := memGroup(t, c, Options{BucketElems: 333, Timeout: 60 * time.Second})
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
					if got[r].Step != want.Step || got[r].Tokens != want.Tokens || abs(got[r].GradNorm-want.GradNorm) > 1e-4*want.GradNorm {
						t.Fatalf("step %d rank %d stats %+v\nwant %+v", step, r, got[r], want)
					}
				}
			}
			w := ref.Model().Weights()
			if moved, _ := maxDiff(w, init); moved < 100*equivTol {
				t.Fatalf("the weights moved by only %g: the test would not see a wrong update", moved)
			}
			for r, rk := range ranks {
				if _, ok := rk.Learner().Model().B.(*cuda.DeviceBackend); !ok {
					t.Fatalf("rank %d runs on %T", r, rk.Learner().Model().B)
				}
				if n := len(rk.Learner().Optimizer().State().Tensors); n != 0 {
					t.Errorf("rank %d: the host optimizer holds %d moment tensors: the rank stepped on the host", r, n)
				}
				d, at := maxDiff(rk.Learner().Model().Weights(), w)
				if d > equivTol {
					t.Errorf("rank %d: weights differ by %g at %s (tolerance %g)", r, d, at, equivTol)
				}
				t.Logf("rank %d: max weight difference %g", r, d)
			}
		})
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestDeviceOnNode(t *testing.T) {
	nodes := []string{"a", "b", "a", "a", "c"}
	for _, c := range []struct {
		device string
		b      int
		want   string
	}{
		{"cuda", 0, "cuda:0"},
		{"cuda", 2, "cuda:1"},
		{"cuda-bf16", 3, "cuda-bf16:2"},
		{"cuda", 1, "cuda"}, // alone on its node: Slurm's or device 0
		{"cuda", 4, "cuda"},
		{"cuda:1", 3, "cuda:1"}, // the recipe's index stands
		{"cpu", 0, "cpu"},
		{"", 0, ""},
		{"cuda", 9, "cuda"}, // no such bundle
	} {
		if got := deviceOnNode(c.device, nodes, c.b); got != c.want {
			t.Errorf("deviceOnNode(%q, bundle %d) = %q, want %q", c.device, c.b, got, c.want)
		}
	}
}
