package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/optim"
)

// meanLogp is -mean(logp): a likelihood objective with its gradient.
func meanLogp(_ int, _ *Batch, logp, _ []float32) (float64, []float32, []float32, error) {
	d := make([]float32, len(logp))
	var s float64
	for i, v := range logp {
		s -= float64(v)
		d[i] = -1 / float32(len(logp))
	}
	return s / float64(len(logp)), d, nil, nil
}

func TestTrainStepLearnsAndReferenceStaysFrozen(t *testing.T) {
	m := tinyModel(t, tinyConfig(Llama), 1)
	ref, err := m.Clone()
	if err != nil {
		t.Fatal(err)
	}
	seqs := randomSequences(rand.New(rand.NewPCG(4, 4)), 4, 32)
	bt, _ := NewBatch(seqs, 16, true, 32)
	tr := &Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0), MaxGradNorm: 1}
	var first, last float64
	for i := 0; i < 20; i++ {
		st, err := tr.Step([]*Batch{bt}, 1e-2, meanLogp)
		if err != nil {
			t.Fatal(err)
		}
		if st.Step != i+1 || !(st.GradNorm > 0) {
			t.Fatalf("stats %+v", st)
		}
		if i == 0 {
			first = st.Loss
		}
		last = st.Loss
	}
	if !(last < first*0.5) {
		t.Errorf("loss %v → %v after 20 steps: not learning", first, last)
	}
	// The reference copy still computes the initial loss.
	refLogp, _, err := ref.Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	loss, _, _, _ := meanLogp(0, bt, refLogp, nil)
	if math.Abs(loss-first) > 1e-5 {
		t.Errorf("reference loss %v, want the initial %v", loss, first)
	}
	if len(ref.TrainableParams()) != 0 {
		t.Errorf("reference has %d trainable params", len(ref.TrainableParams()))
	}
	if err := ref.Backward(make([]float32, len(bt.Outputs)), nil); err != nil {
		t.Errorf("backward through a frozen model: %v", err)
	}
}

func TestTrainStepRefusesNonFinite(t *testing.T) {
	seqs := randomSequences(rand.New(rand.NewPCG(4, 4)), 3, 32)
	cases := []struct {
		name string
		obj  Objective
		want string
	}{
		{"nan loss", func(mb int, _ *Batch, logp, _ []float32) (float64, []float32, []float32, error) {
			if mb == 0 {
				return 1, make([]float32, len(logp)), nil, nil
			}
			return math.NaN(), nil, nil, nil
		}, "train step 1: micro-batch 1: loss is NaN"},
		{"inf dlogp", func(mb int, bt *Batch, logp, _ []float32) (float64, []float32, []float32, error) {
			d := make([]float32, len(logp))
			d[0] = float32(math.Inf(1))
			return 0, d, nil, nil
		}, "train step 1: micro-batch 0: backward: dLoss/dLogProb"},
		{"nan gradient", func(mb int, bt *Batch, logp, _ []float32) (float64, []float32, []float32, error) {
			d := make([]float32, len(logp))
			d[0] = 3e38 // finite, but overflows in the backward pass
			return 0, d, d, nil
		}, `train step 1: gradient of "`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := tinyModel(t, tinyConfig(Qwen2), 2)
			before := m.Weights()
			a, _ := NewBatch(seqs[:1], 0, false, 32)
			b, _ := NewBatch(seqs[1:], 0, false, 32)
			tr := &Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0.01)}
			_, err := tr.Step([]*Batch{a, b}, 1e-3, c.obj)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			for name, w := range m.Weights() {
				for i := range w {
					if w[i] != before[name][i] {
						t.Fatalf("%s changed after a refused step", name)
					}
				}
			}
			if tr.Opt.StepCount() != 0 {
				t.Errorf("optimizer at step %d after a refused step", tr.Opt.StepCount())
			}
			// The next good step is step 1 again and goes through.
			st, err := tr.Step([]*Batch{a, b}, 1e-3, meanLogp)
			if err != nil || st.Step != 1 {
				t.Errorf("step after a refused one: %+v, %v", st, err)
			}
		})
	}
}

// An optimizer step over micro-batches equals the step over one batch
// holding them all, when the objective normalizes by the whole batch (as
// learner/rl's Norm does): gradients add up before clipping, weight decay
// and AdamW see the same numbers.
func TestTrainStepMicroBatchesEqualOneBatch(t *testing.T) {
	seqs := randomSequences(rand.New(rand.NewPCG(8, 8)), 7, 32)
	all, err := NewBatch(seqs, 0, false, 32)
	if err != nil {
		t.Fatal(err)
	}
	var micro []*Batch
	for _, part := range [][]Sequence{seqs[:2], seqs[2:3], seqs[3:]} {
		bt, err := NewBatch(part, 12, true, 32)
		if err != nil {
			t.Fatal(err)
		}
		micro = append(micro, bt)
	}
	// -sum(logp)/T with T the whole batch's response tokens.
	total := float32(len(all.Outputs))
	obj := func(_ int, _ *Batch, logp, _ []float32) (float64, []float32, []float32, error) {
		d := make([]float32, len(logp))
		var s float64
		for i, v := range logp {
			s -= float64(v)
			d[i] = -1 / total
		}
		return s / float64(total), d, nil, nil
	}
	train := func(batches []*Batch) (*Model, []StepStats) {
		m := tinyModel(t, tinyConfig(Qwen2), 6)
		tr := &Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0.1), MaxGradNorm: 0.5}
		var stats []StepStats
		for step := 0; step < 3; step++ {
			st, err := tr.Step(batches, 1e-2, obj)
			if err != nil {
				t.Fatal(err)
			}
			stats = append(stats, st)
		}
		return m, stats
	}
	one, oneStats := train([]*Batch{all})
	acc, accStats := train(micro)
	for i := range oneStats {
		if d := math.Abs(oneStats[i].Loss - accStats[i].Loss); d > 1e-5 {
			t.Errorf("step %d: loss %v over micro-batches, %v in one batch", i+1, accStats[i].Loss, oneStats[i].Loss)
		}
		if d := math.Abs(oneStats[i].GradNorm - accStats[i].GradNorm); d > 1e-5*oneStats[i].GradNorm {
			t.Errorf("step %d: grad norm %v over micro-batches, %v in one batch", i+1, accStats[i].GradNorm, oneStats[i].GradNorm)
		}
	}
	if !(oneStats[0].GradNorm > 0.5) {
		t.Errorf("grad norm %v: clipping at 0.5 never acts, the test checks less than it should", oneStats[0].GradNorm)
	}
	want, got := one.Weights(), acc.Weights()
	for name, w := range want {
		for i := range w {
			if d := math.Abs(float64(got[name][i] - w[i])); d > 1e-5 {
				t.Fatalf("%s[%d] = %v after micro-batch steps, %v after one-batch steps", name, i, got[name][i], w[i])
			}
		}
	}
}
