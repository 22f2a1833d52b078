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
		})
	}
}
