package learner

import (
	"math"
	"strings"
	"testing"
)

func valueBaselineConfig(vb ValueBaseline) Config {
	c := tinyConfig(GRPO)
	c.LR, c.MinLR = 3e-3, 3e-3
	c.ValueBaseline = &vb
	return c
}

// The value at each sequence's last token learns its reward: over repeated
// Train calls on one batch the value loss falls and Stats.Values (before
// each step) approach the rewards.
func TestValueBaselineLearns(t *testing.T) {
	for _, stop := range []bool{false, true} {
		l := newLearner(t, valueBaselineConfig(ValueBaseline{LossCoef: 1, StopTrunkGradient: stop}))
		b := groupBatch()
		var first, last Stats
		for i := range 60 {
			st, err := l.Train(b)
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = st
			}
			last = st
		}
		if len(last.Values) != len(b.Rewards) {
			t.Fatalf("stop %v: %d values for %d sequences", stop, len(last.Values), len(b.Rewards))
		}
		var sq float64
		for i, v := range last.Values {
			sq += (v - b.Rewards[i]) * (v - b.Rewards[i]) / float64(len(b.Rewards))
		}
		t.Logf("stop %v: value loss %.4g → %.4g; mean (V − R)² before the last step %.4g", stop, first.ValueLoss, last.ValueLoss, sq)
		if !(last.ValueLoss < first.ValueLoss/2) {
			t.Errorf("stop %v: value loss %g → %g: want it halved", stop, first.ValueLoss, last.ValueLoss)
		}
		if !(math.Abs(sq-last.ValueLoss) < 0.05) {
			t.Errorf("stop %v: Stats.Values give (V − R)² %g, the step's value loss is %g", stop, sq, last.ValueLoss)
		}
	}
}

// StopTrunkGradient with ValueOnly trains the head alone: the policy's
// weights stay as they were; without StopTrunkGradient the value loss
// moves the trunk.
func TestValueBaselineStopTrunkGradient(t *testing.T) {
	for _, stop := range []bool{false, true} {
		l := newLearner(t, valueBaselineConfig(ValueBaseline{LossCoef: 1, StopTrunkGradient: stop, ValueOnly: true}))
		before := l.PolicyWeights()
		head := append([]float32(nil), l.Model().Weights()["v_head.summary.weight"]...)
		for range 3 {
			if _, err := l.Train(groupBatch()); err != nil {
				t.Fatal(err)
			}
		}
		d := maxDiff(before, l.PolicyWeights())
		if stop && d != 0 {
			t.Errorf("stop: the policy's weights moved by %g", d)
		}
		if !stop && d == 0 {
			t.Error("no stop: the value loss left the trunk unchanged")
		}
		if maxDiff(map[string][]float32{"h": head}, map[string][]float32{"h": l.Model().Weights()["v_head.summary.weight"]}) == 0 {
			t.Errorf("stop %v: the value head did not train", stop)
		}
	}
}

// With Shaping the policy steps as GRPO on R + c·V, V the values before
// the step (Stats.Values); the head's own gradient stays off the trunk
// here so that the two policies see the same gradient.
func TestValueBaselineShaping(t *testing.T) {
	const c = 0.5
	shaped := valueBaselineConfig(ValueBaseline{LossCoef: 1, Shaping: c, StopTrunkGradient: true})
	shaped.MaxGradNorm = 0 // the head's gradient would count in the global norm
	plain := tinyConfig(GRPO)
	plain.LR, plain.MinLR, plain.MaxGradNorm = shaped.LR, shaped.MinLR, 0
	a, p := newLearner(t, shaped), newLearner(t, plain)
	if d := maxDiff(a.PolicyWeights(), p.PolicyWeights()); d != 0 {
		t.Fatalf("the two learners start apart (%g)", d)
	}
	b := groupBatch()
	st, err := a.Train(b)
	if err != nil {
		t.Fatal(err)
	}
	pb := groupBatch()
	for i := range pb.Rewards {
		pb.Rewards[i] += c * st.Values[i]
	}
	if _, err := p.Train(pb); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(a.PolicyWeights(), p.PolicyWeights()); d > 1e-6 {
		t.Errorf("shaped learner and GRPO on R + c·V differ by %g", d)
	}
	// And it differs from GRPO on R alone.
	q := newLearner(t, plain)
	if _, err := q.Train(groupBatch()); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(a.PolicyWeights(), q.PolicyWeights()); d == 0 {
		t.Error("shaping changed nothing")
	}
}

func TestValueBaselineValidated(t *testing.T) {
	for _, c := range []struct {
		alg  string
		vb   ValueBaseline
		want string
	}{
		{PPO, ValueBaseline{LossCoef: 1}, "other than ppo"},
		{RWSFT, ValueBaseline{LossCoef: 1}, "other than ppo"},
		{GRPO, ValueBaseline{}, "loss_coef 0"},
		{GRPO, ValueBaseline{LossCoef: 1, Shaping: math.NaN()}, "shaping NaN"},
	} {
		cfg := tinyConfig(c.alg)
		cfg.ValueBaseline = &c.vb
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %+v: error %v, want %q", c.alg, c.vb, err, c.want)
		}
	}
}

// A learner loading a checkpoint keeps its head detached from the trunk.
func TestValueBaselineStopTrunkGradientSurvivesLoad(t *testing.T) {
	c := valueBaselineConfig(ValueBaseline{LossCoef: 1, StopTrunkGradient: true})
	l := newLearner(t, c)
	if _, err := l.Train(groupBatch()); err != nil {
		t.Fatal(err)
	}
	dir := savedTo(t, l)
	l2 := loaded(t, c, dir)
	if !l2.Model().Value.DetachTrunk {
		t.Error("the loaded model's value head trains the trunk")
	}
}
