package shard

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
)

// LoRA on N ranks: an SFT step trains every weight, then the switch to
// GRPO starts the adapters on every rank (the ranks lay out their ring
// and ZeRO-1 slices again, for the adapters only) and the ranks reach one
// learner's adapters, under both ZeRO stages; the base stays frozen and a
// ZeRO-1 checkpoint holds moments of adapter tensors only.
func TestLoRAEquivalenceInProcess(t *testing.T) {
	for _, stage := range []int{0, 1} {
		t.Run(fmt.Sprintf("stage%d", stage), func(t *testing.T) {
			c := tinyConfig(learner.SFT, 2, stage)
			c.LoRA = &model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "o_proj", "up_proj"}, Seed: 9}
			single := c
			single.Shards = 0
			ref := newLearner(t, single)
			ranks := memGroup(t, c, Options{BucketElems: 100, Timeout: 20 * time.Second})
			step := func(b learner.Batch) {
				t.Helper()
				if _, err := ref.Train(b); err != nil {
					t.Fatal(err)
				}
				_, errs := trainAll(ranks, b)
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
			}
			step(groupBatch(0))
			base := ref.PolicyWeights()
			if err := ref.SetAlgorithm(learner.GRPO, 0); err != nil {
				t.Fatal(err)
			}
			switchAll(t, ranks, learner.GRPO)
			for k := 1; k <= 3; k++ {
				step(groupBatch(k))
			}
			want := ref.AdapterWeights()
			if len(want) != 12 {
				t.Fatalf("%d adapter tensors, want 12", len(want))
			}
			for r, rk := range ranks {
				if d, at := maxDiff(want, rk.Learner().AdapterWeights()); d > equivTol {
					t.Errorf("rank %d: adapters differ from one learner's by %g at %s", r, d, at)
				}
				if d, at := maxDiff(base, rk.Learner().BaseWeights()); d > equivTol {
					t.Errorf("rank %d: base differs from the post-SFT weights by %g at %s", r, d, at)
				}
				if !slices.Equal(rk.names, sortedKeysInOrder(rk.Learner())) {
					t.Errorf("rank %d: ring lays out %v", r, rk.names)
				}
			}
			if d, _ := maxDiff(ref.PolicyWeights(), base); d == 0 {
				t.Error("the adapters did not move the policy")
			}
			dir := t.TempDir()
			saveAll(t, ranks, dir)
			sizes := map[string]int{}
			for _, p := range ref.TrainableParams() {
				sizes[p.Name] = len(p.Data)
			}
			st, _, err := learner.ReadOptimizerState(dir, sizes)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Tensors) != 2*len(want) {
				t.Errorf("checkpoint optimizer state has %d tensors, want %d", len(st.Tensors), 2*len(want))
			}
			for _, x := range st.Tensors {
				if !strings.Contains(x.Name, "lora_") {
					t.Errorf("checkpoint optimizer state for %s", x.Name)
				}
			}
			// The checkpoint resumes into one learner.
			one := newLearner(t, single)
			if err := one.SetAlgorithm(learner.GRPO, 0); err != nil {
				t.Fatal(err)
			}
			if err := one.Load(dir); err != nil {
				t.Fatal(err)
			}
			if d, at := maxDiff(want, one.AdapterWeights()); d > equivTol {
				t.Errorf("resumed adapters differ by %g at %s", d, at)
			}
		})
	}
}

func sortedKeysInOrder(l *learner.Learner) []string {
	var out []string
	for _, p := range l.TrainableParams() {
		out = append(out, p.Name)
	}
	return out
}
