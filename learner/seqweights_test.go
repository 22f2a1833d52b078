package learner

import (
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/rl"
)

// A PG weight of 0 on a group is the same step as that group's rewards
// all equal (GRPO advantage 0): the same tokens count in the norm, none of
// them pushes the policy.
func TestPGWeightsZeroAGroup(t *testing.T) {
	c := tinyConfig(GRPO)
	c.Loss.KLCoef, c.Loss.KL = 0.1, rl.K3
	weighted, flat := groupBatch(), groupBatch()
	weighted.PGWeights = []float64{1, 1, 1, 1, 0, 0, 0, 0}
	for i := 4; i < 8; i++ {
		flat.Rewards[i] = 0
	}
	var after []map[string][]float32
	for _, b := range []Batch{weighted, flat} {
		l := newLearner(t, c)
		if _, err := l.Train(b); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Train(b); err != nil { // a second step: the KL to the reference is non-zero
			t.Fatal(err)
		}
		after = append(after, l.PolicyWeights())
	}
	if d := maxDiff(after[0], after[1]); d > 1e-6 {
		t.Errorf("PG weight 0 vs advantages 0: weights differ by %g", d)
	}
	// A KL weight changes the step once the policy has left the reference.
	heavy := groupBatch()
	heavy.KLWeights = []float64{10, 10, 10, 10, 10, 10, 10, 10}
	l := newLearner(t, c)
	for range 2 {
		if _, err := l.Train(heavy); err != nil {
			t.Fatal(err)
		}
	}
	plain := newLearner(t, c)
	for range 2 {
		if _, err := plain.Train(groupBatch()); err != nil {
			t.Fatal(err)
		}
	}
	if d := maxDiff(l.PolicyWeights(), plain.PolicyWeights()); d == 0 {
		t.Error("KL weight 10: the same weights as weight 1")
	}
}

func TestSeqWeightsRefused(t *testing.T) {
	for _, tc := range []struct {
		alg  string
		edit func(*Batch)
		want string
	}{
		{GRPO, func(b *Batch) { b.PGWeights = []float64{1} }, "pg_weights: 1 values for 8 sequences"},
		{GRPO, func(b *Batch) { b.KLWeights = []float64{1, 1, 1, 1, 1, 1, 1, -1} }, "kl_weights[7] is -1"},
		{SFT, func(b *Batch) { b.PGWeights = []float64{1, 1, 1, 1, 1, 1, 1, 1} }, "only policy-gradient algorithms"},
	} {
		l := newLearner(t, tinyConfig(tc.alg))
		b := groupBatch()
		tc.edit(&b)
		_, err := l.Train(b)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.alg, err, tc.want)
		}
	}
}
