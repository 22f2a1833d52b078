package learner

import (
	"math"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/actor"
)

// A batch's EntropyCoef replaces Loss.EntropyCoef for that step alone: the
// same step as a learner configured with it, and 0 the same step as no
// bonus at all.
func TestBatchEntropyCoefReplacesConfig(t *testing.T) {
	coef := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name       string
		configured float64  // Loss.EntropyCoef of the learner given the batch field
		sent       *float64 // the batch's
		reference  float64  // Loss.EntropyCoef of a learner given no batch field
	}{
		{"sent replaces configured", 0.01, coef(0.2), 0.2},
		{"sent 0 turns the bonus off", 0.2, coef(0), 0},
		{"absent keeps configured", 0.2, nil, 0.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig(GRPO)
			c.Loss.EntropyCoef = tc.configured
			l := newLearner(t, c)
			b := groupBatch()
			b.EntropyCoef = tc.sent
			if _, err := l.Train(b); err != nil {
				t.Fatal(err)
			}
			c.Loss.EntropyCoef = tc.reference
			ref := newLearner(t, c)
			if _, err := ref.Train(groupBatch()); err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(l.PolicyWeights(), ref.PolicyWeights()); d != 0 {
				t.Errorf("weights differ from a learner configured with entropy coef %v by %g", tc.reference, d)
			}
		})
	}
	// And the coefficient matters: 0.2 is not the step of 0.
	c := tinyConfig(GRPO)
	a, b := newLearner(t, c), newLearner(t, c)
	ba, bb := groupBatch(), groupBatch()
	ba.EntropyCoef, bb.EntropyCoef = coef(0.2), coef(0)
	if _, err := a.Train(ba); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Train(bb); err != nil {
		t.Fatal(err)
	}
	if maxDiff(a.PolicyWeights(), b.PolicyWeights()) == 0 {
		t.Error("entropy coef 0.2 and 0 took the same step")
	}
}

func TestBatchEntropyCoefRefused(t *testing.T) {
	for _, tc := range []struct {
		alg  string
		coef float64
		want string
	}{
		{GRPO, -0.01, "entropy_coef -0.01: want a value in [0, 1]"},
		{GRPO, 1.5, "entropy_coef 1.5: want a value in [0, 1]"},
		{GRPO, math.NaN(), "entropy_coef NaN"},
		{GRPO, math.Inf(1), "entropy_coef +Inf"},
		{SFT, 0.01, "entropy_coef: only policy-gradient algorithms"},
		{RWSFT, 0.01, "entropy_coef: only policy-gradient algorithms"},
	} {
		l := newLearner(t, tinyConfig(tc.alg))
		b := groupBatch()
		b.EntropyCoef = &tc.coef
		_, err := l.Train(b)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s, entropy coef %v: error %v, want %q", tc.alg, tc.coef, err, tc.want)
		}
		if l.step != 0 {
			t.Errorf("%s, entropy coef %v: a refused batch took step %d", tc.alg, tc.coef, l.step)
		}
	}
}

// The coefficient travels with the batch through the actor codec (the
// path to a learner on another node), and an absent one stays absent.
func TestBatchEntropyCoefEncodes(t *testing.T) {
	v := 0.0125
	for _, sent := range []*float64{&v, nil} {
		b := groupBatch()
		b.EntropyCoef = sent
		name, body, err := actor.EncodeMessage(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := actor.DecodeMessage(name, body)
		if err != nil {
			t.Fatal(err)
		}
		gb := got.(Batch)
		switch {
		case sent == nil && gb.EntropyCoef != nil:
			t.Errorf("absent coefficient decoded as %v", *gb.EntropyCoef)
		case sent != nil && (gb.EntropyCoef == nil || *gb.EntropyCoef != *sent):
			t.Errorf("coefficient %v decoded as %v", *sent, gb.EntropyCoef)
		}
	}
}
