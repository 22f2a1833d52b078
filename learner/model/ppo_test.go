package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/optim"
	"github.com/rlnode/rlnode/learner/rl"
)

// ppoMicro is one micro-batch of a PPO batch with what the rollout phase
// fixed: old logprobs and values, GAE advantages (whitened over the whole
// batch) and returns, per sequence.
type ppoMicro struct {
	bt                                     *Batch
	mask, oldLogp, oldValues, adv, returns [][]float32
}

// ppoBatch runs the rollout side of PPO on fixed sequences: a forward pass
// for old logprobs and values, outcome scores as token rewards, rl.GAE and
// rl.MaskedWhiten. It returns the micro-batches and the batch's Norm.
func ppoBatch(t *testing.T, m *Model, seqs []Sequence, outcome []float64, split int) ([]*ppoMicro, rl.Norm) {
	t.Helper()
	var micro []*ppoMicro
	var norm rl.Norm
	var allAdv, allMask [][]float32
	for _, part := range []struct {
		seqs   []Sequence
		scores []float64
	}{{seqs[:split], outcome[:split]}, {seqs[split:], outcome[split:]}} {
		bt, err := NewBatch(part.seqs, 12, true, m.Config.VocabSize)
		if err != nil {
			t.Fatal(err)
		}
		s := scores(t, m, bt)
		mb := &ppoMicro{bt: bt, mask: bt.Split(ones(len(s.Values))), oldLogp: bt.Split(s.LogProbs), oldValues: bt.Split(s.Values)}
		rewards, err := rl.TokenRewards(part.scores, nil, mb.mask, 0)
		if err != nil {
			t.Fatal(err)
		}
		if mb.adv, mb.returns, err = rl.GAE(rewards, mb.oldValues, mb.mask, 1, 0.95); err != nil {
			t.Fatal(err)
		}
		norm = norm.Add(rl.CountNorm(mb.mask))
		allAdv, allMask = append(allAdv, mb.adv...), append(allMask, mb.mask...)
		micro = append(micro, mb)
	}
	white, err := rl.MaskedWhiten(allAdv, allMask)
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for _, mb := range micro {
		mb.adv = white[off : off+len(mb.mask)]
		off += len(mb.mask)
	}
	return micro, norm
}

// ppoLosses records one step's policy and value losses.
type ppoLosses struct{ policy, value float64 }

// ppoObjective is PPO's loss with a shared critic: rl.PolicyLoss (clip
// 0.2/0.2, token-mean) plus vfCoef times rl.ValueLoss (clip 0.5, verl's
// cliprange_value default), both normalized over the whole batch.
func ppoObjective(micro []*ppoMicro, norm rl.Norm, vfCoef float64, rec *ppoLosses) ActorCriticObjective {
	return func(i int, bt *Batch, s Scores) (float64, ScoreGrads, error) {
		mb := micro[i]
		pl, err := rl.PolicyLoss(rl.PPOConfig(), rl.PolicyBatch{LogProbs: bt.Split(s.LogProbs),
			OldLogProbs: mb.oldLogp, Advantages: mb.adv, Mask: mb.mask}, norm)
		if err != nil {
			return 0, ScoreGrads{}, err
		}
		vl, err := rl.ValueLoss(rl.ValueBatch{Values: bt.Split(s.Values), OldValues: mb.oldValues,
			Returns: mb.returns, Mask: mb.mask}, 0.5, rl.TokenMean, norm)
		if err != nil {
			return 0, ScoreGrads{}, err
		}
		dl, err := bt.Join(pl.DLogProbs)
		if err != nil {
			return 0, ScoreGrads{}, err
		}
		dv, err := bt.Join(vl.DValues)
		if err != nil {
			return 0, ScoreGrads{}, err
		}
		for k := range dv {
			dv[k] *= float32(vfCoef)
		}
		rec.policy += pl.Loss
		rec.value += vl.Loss
		return pl.Loss + vfCoef*vl.Loss, ScoreGrads{LogProbs: dl, Values: dv}, nil
	}
}

// A few PPO updates on one fixed batch, through two micro-batches, with
// the value head on the policy's trunk: the value loss and the policy's
// clipped surrogate both fall, for full-parameter training and for LoRA
// (adapters plus head).
func TestPPOStepWithValueHead(t *testing.T) {
	for _, lora := range []bool{false, true} {
		t.Run(fmt.Sprintf("lora=%v", lora), func(t *testing.T) {
			m, err := New(tinyConfig(Qwen2), cpu.New())
			if err != nil {
				t.Fatal(err)
			}
			m.InitRandom(1)
			if err := m.AddValueHead(2); err != nil {
				t.Fatal(err)
			}
			if lora {
				if err := m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, TargetModules: allModules, Seed: 3}); err != nil {
					t.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(6, 6))
			seqs := randomSequences(rng, 8, 32)
			// The outcome score: the share of response tokens below 16.
			outcome := make([]float64, len(seqs))
			for i, s := range seqs {
				for _, tok := range s.Response {
					if tok < 16 {
						outcome[i] += 1 / float64(len(s.Response))
					}
				}
			}
			micro, norm := ppoBatch(t, m, seqs, outcome, 3)
			batches := []*Batch{micro[0].bt, micro[1].bt}
			tr := &Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0), MaxGradNorm: 1}
			var steps []ppoLosses
			for k := 0; k < 8; k++ {
				var rec ppoLosses
				st, err := tr.StepActorCritic(batches, 5e-3, ppoObjective(micro, norm, 0.5, &rec))
				if err != nil {
					t.Fatal(err)
				}
				if d := st.Loss - (rec.policy + 0.5*rec.value); d > 1e-9 || d < -1e-9 {
					t.Fatalf("step %d: loss %v, want policy %v + 0.5·value %v", st.Step, st.Loss, rec.policy, rec.value)
				}
				steps = append(steps, rec)
			}
			first, last := steps[0], steps[len(steps)-1]
			t.Logf("value loss %.4f → %.4f, policy loss %.4f → %.4f", first.value, last.value, first.policy, last.policy)
			if !(last.value < 0.5*first.value) {
				t.Errorf("value loss %v → %v after %d steps: the critic is not learning", first.value, last.value, len(steps))
			}
			if !(last.policy < first.policy-0.05) {
				t.Errorf("policy loss %v → %v after %d steps: the policy is not improving", first.policy, last.policy, len(steps))
			}
		})
	}
}

func TestStepActorCriticErrors(t *testing.T) {
	m := tinyModel(t, tinyConfig(Llama), 1)
	bt, _ := NewBatch(randomSequences(rand.New(rand.NewPCG(4, 4)), 3, 32), 0, false, 32)
	tr := &Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0)}
	// Without a head the objective sees no values and may not return
	// value gradients.
	_, err := tr.StepActorCritic([]*Batch{bt}, 1e-3, func(_ int, _ *Batch, s Scores) (float64, ScoreGrads, error) {
		if s.Values != nil {
			t.Errorf("values %v from a model without a value head", s.Values)
		}
		return 1, ScoreGrads{Values: make([]float32, len(s.LogProbs))}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "train step 1: micro-batch 0: backward: dLoss/dValue given but the model has no value head") {
		t.Errorf("value gradients without a head: %v", err)
	}
	if err := m.AddValueHead(1); err != nil {
		t.Fatal(err)
	}
	before := m.Weights()
	_, err = tr.StepActorCritic([]*Batch{bt}, 1e-3, func(_ int, _ *Batch, s Scores) (float64, ScoreGrads, error) {
		d := make([]float32, len(s.Values))
		d[0] = float32(math.Inf(1))
		return 1, ScoreGrads{Values: d}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "train step 1: micro-batch 0: backward: dValues is not finite") {
		t.Errorf("infinite dValues: %v", err)
	}
	for name, w := range m.Weights() {
		if d := maxDiff(w, before[name]); d != 0 {
			t.Errorf("%s changed by %g after a refused step", name, d)
		}
	}
}
