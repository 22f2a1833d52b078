package train

import (
	"github.com/rlnode/rlnode/recipes"
	"testing"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/rl"
)

// algorithm ppo's settings reach the learner under their schema names.
func TestFromRecipePPO(t *testing.T) {
	l, err := recipes.Load("quickstart", []string{"algorithm.name=ppo", "models.policy.value_head=true",
		"algorithm.gamma=0.99", "algorithm.lambda=0.9", "algorithm.value_coef=0.25", "algorithm.value_clip=0.1",
		"algorithm.epochs=2", "algorithm.mini_batches=4", "algorithm.kl_coef=0.01", "algorithm.kl_estimator=k1",
		"placement.learner_shards=2"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FromRecipe(l, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lc := cfg.Learner
	for _, c := range []struct {
		field     string
		got, want any
	}{
		{"algorithm.name", lc.Algorithm, learner.PPO},
		{"algorithm.gamma", lc.Gamma, 0.99},
		{"algorithm.lambda", lc.Lambda, 0.9},
		{"algorithm.value_coef", lc.VFCoef, 0.25},
		{"algorithm.value_clip", lc.ValueClip, 0.1},
		{"algorithm.epochs", lc.Epochs, 2},
		{"algorithm.mini_batches", lc.MiniBatches, 4},
		{"algorithm.kl_coef", lc.Loss.KLCoef, 0.01},
		{"algorithm.kl_estimator", lc.Loss.KL, rl.K1},
		{"placement.learner_shards", lc.Shards, 2},
	} {
		if c.got != c.want {
			t.Errorf("%s: learner has %v, want %v", c.field, c.got, c.want)
		}
	}
	lc.Model = cfg.Model // the driver sets it
	if err := lc.Validate(); err != nil {
		t.Errorf("learner config: %v", err)
	}
}
