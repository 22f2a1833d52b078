package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rlnode/rlnode/learner/optim"
)

// TestGradsReadyOrderAndFinal checks the per-layer backward hook: it fires
// only on the step's last micro-batch, group by group in GradGroups order
// (last layer first, embedding/norm/heads last), covers every trainable
// tensor once, and each gradient it hands over is already the step's
// final one (what Update then gets), tied embeddings included.
func TestGradsReadyOrderAndFinal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		arch  string
		lora  bool
		value bool
		micro int
	}{
		{"llama untied, 1 micro-batch", Llama, false, false, 1},
		{"qwen2 tied, 3 micro-batches", Qwen2, false, false, 3},
		{"lora q/v + value head, 2 micro-batches", Llama, true, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tinyModel(t, tinyConfig(tc.arch), 1)
			if tc.lora {
				if err := m.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj"}, Seed: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.value {
				if err := m.AddValueHead(3); err != nil {
					t.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(5, 5))
			var micro []*Batch
			for range tc.micro {
				bt, err := NewBatch(randomSequences(rng, 3, 32), 16, true, 32)
				if err != nil {
					t.Fatal(err)
				}
				micro = append(micro, bt)
			}
			tr := &Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0)}
			groups := tr.GradGroups()
			var order []int // group index of each call
			snap := map[int][]float32{}
			var calls, badStep int
			tr.GradsReady = func(step int, params []*optim.Param, ready []int) {
				calls++
				if step != tr.step+1 {
					badStep = step
				}
				k := slices.IndexFunc(groups, func(g []int) bool { return slices.Equal(g, ready) })
				order = append(order, k)
				for _, i := range ready {
					snap[i] = slices.Clone(params[i].Grad)
				}
			}
			tr.Update = func(step int, params []*optim.Param, lr float64) (float64, error) {
				if calls != len(groups) {
					return 0, fmt.Errorf("GradsReady called %d times before Update, want %d", calls, len(groups))
				}
				for i, p := range params {
					s, ok := snap[i]
					if !ok {
						return 0, fmt.Errorf("%s never reported ready", p.Name)
					}
					if !slices.Equal(s, p.Grad) {
						return 0, fmt.Errorf("%s: gradient changed after it was reported final", p.Name)
					}
				}
				return 0, nil
			}
			for step := range 2 {
				calls, order = 0, nil
				clear(snap)
				var obj Objective = meanLogp
				var err error
				if tc.value {
					_, err = tr.StepActorCritic(micro, 1e-3, func(i int, bt *Batch, s Scores) (float64, ScoreGrads, error) {
						loss, d, _, err := meanLogp(i, bt, s.LogProbs, nil)
						dv := make([]float32, len(s.Values))
						for j := range dv {
							dv[j] = 0.1
						}
						return loss, ScoreGrads{LogProbs: d, Values: dv}, err
					})
				} else {
					_, err = tr.Step(micro, 1e-3, obj)
				}
				if err != nil {
					t.Fatalf("step %d: %v", step+1, err)
				}
				if badStep != 0 {
					t.Fatalf("step %d: GradsReady told step %d", step+1, badStep)
				}
				want := make([]int, len(groups))
				for k := range want {
					want[k] = k
				}
				if !slices.Equal(order, want) {
					t.Fatalf("step %d: groups reported in order %v, want %v", step+1, order, want)
				}
			}
			// Every trainable tensor in exactly one group; the embedding
			// (tied or not) in the last.
			seen := map[int]bool{}
			for _, g := range groups {
				for _, i := range g {
					if seen[i] {
						t.Fatalf("tensor %d in two groups", i)
					}
					seen[i] = true
				}
			}
			if n := len(m.TrainableParams()); len(seen) != n {
				t.Fatalf("groups cover %d of %d trainable tensors", len(seen), n)
			}
			last := groups[len(groups)-1]
			names := map[string]bool{}
			for _, i := range last {
				names[m.TrainableParams()[i].Name] = true
			}
			if !tc.lora && !names["model.embed_tokens.weight"] {
				t.Errorf("last group %v lacks the embedding", names)
			}
			if tc.value && (!names[ValueHeadWeight] || !names[ValueHeadBias]) {
				t.Errorf("last group %v lacks the value head", names)
			}
		})
	}
}

// TestGradsReadyNeedsUpdate: without Update the hook stays off (the
// local step needs no hand-off).
func TestGradsReadyNeedsUpdate(t *testing.T) {
	m := tinyModel(t, tinyConfig(Llama), 1)
	bt, err := NewBatch(randomSequences(rand.New(rand.NewPCG(1, 1)), 2, 32), 16, true, 32)
	if err != nil {
		t.Fatal(err)
	}
	called := false
	tr := &Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0),
		GradsReady: func(int, []*optim.Param, []int) { called = true }}
	if _, err := tr.Step([]*Batch{bt}, 1e-3, meanLogp); err != nil {
		t.Fatal(err)
	}
	if called {
		t.Error("GradsReady called without Update")
	}
}
