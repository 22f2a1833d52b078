package recipes

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The RL schedule runs after an SFT warm-up, in optimizer steps: epochs ×
// mini_batches per RL step, for algorithm.warmup and schedule.steps alike.
func TestDriverConfigScheduleAfterWarmup(t *testing.T) {
	for _, c := range []struct {
		sets          []string
		warmup, total int
		lr, minLR     float64
	}{
		{[]string{"algorithm.schedule=cosine", "algorithm.warmup=5", "algorithm.min_lr=1e-6", "schedule.steps=40"}, 5, 40, 1e-4, 1e-6},
		{[]string{"algorithm.schedule=cosine", "algorithm.warmup=5", "algorithm.min_lr=1e-6", "schedule.steps=40", "algorithm.mini_batches=2", "algorithm.epochs=3"}, 30, 240, 1e-4, 1e-6},
		{[]string{"algorithm.warmup=4", "algorithm.mini_batches=2"}, 8, 0, 1e-4, 1e-4},
	} {
		l, err := Load("quickstart", append([]string{"algorithm.lr=1e-4"}, c.sets...))
		if err != nil {
			t.Fatalf("%v: %v", c.sets, err)
		}
		if l.SFT.Steps == 0 {
			t.Fatal("quickstart has no SFT warm-up: the test needs one")
		}
		got, err := l.DriverConfig(t.TempDir())
		if err != nil {
			t.Fatalf("%v: %v", c.sets, err)
		}
		lc := got.Learner
		if lc.WarmupSteps != c.warmup || lc.TotalSteps != c.total || lc.LR != c.lr || lc.MinLR != c.minLR {
			t.Errorf("%v: learner warmup %d total %d lr %v min %v, want %d %d %v %v", c.sets, lc.WarmupSteps, lc.TotalSteps, lc.LR, lc.MinLR, c.warmup, c.total, c.lr, c.minLR)
		}
		if got.WarmupLR != l.SFT.LR {
			t.Errorf("%v: SFT lr %v, want sft.lr %v", c.sets, got.WarmupLR, l.SFT.LR)
		}
	}
}

// models.reference.path becomes the solver learner's reference (not the
// feedback policy's); a random reference is refused naming the field.
func TestDriverConfigReferenceModel(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Load("mlmt_math", []string{"algorithm.kl_coef=0.05", "models.reference.path=" + dir})
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.DriverConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got.Learner.RefModelDir != dir {
		t.Errorf("learner reference %q, want %q", got.Learner.RefModelDir, dir)
	}
	if got.Feedback == nil {
		t.Fatal("mlmt_math has no feedback policy: the test needs one")
	}
	l, err = Load("quickstart", []string{"algorithm.kl_coef=0.05", "models.reference.init={}"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.DriverConfig(t.TempDir())
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "models.reference.init:") {
		t.Errorf("a random reference: %v, want ErrUnsupported naming models.reference.init", err)
	}
}

// algorithm.kl_in_reward reaches PPO's learner, and is refused with
// another algorithm or without kl_coef.
func TestKLInRewardRecipe(t *testing.T) {
	ppo := []string{"algorithm.name=ppo", "models.policy.value_head=true"}
	l, err := Load("quickstart", append(ppo, "algorithm.kl_coef=0.05", "algorithm.kl_in_reward=true"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.DriverConfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !got.Learner.KLInReward || got.Learner.Loss.KLCoef != 0.05 {
		t.Errorf("learner kl_in_reward %v kl_coef %v, want true 0.05", got.Learner.KLInReward, got.Learner.Loss.KLCoef)
	}
	lc := got.Learner
	lc.Model = got.Model
	if err := lc.Validate(); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		sets []string
		want string
	}{
		{[]string{"algorithm.kl_coef=0.05", "algorithm.kl_in_reward=true"}, `algorithm.kl_in_reward: true: only algorithm ppo takes a per-token reward (its GAE); algorithm.name is "grpo"`},
		{append(ppo, "algorithm.kl_in_reward=true"), "algorithm.kl_in_reward: true, but algorithm.kl_coef is 0"},
	} {
		if _, err := Load("quickstart", c.sets); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.sets, err, c.want)
		}
	}
}

// checkpoint.optimizer false runs: the learner leaves the optimizer state
// out of its checkpoints.
func TestDriverConfigCheckpointWithoutOptimizer(t *testing.T) {
	for _, keep := range []bool{true, false} {
		l, err := Load("quickstart", []string{"checkpoint.optimizer=" + map[bool]string{true: "true", false: "false"}[keep]})
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.DriverConfig(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if got.Learner.OmitOptimizer == keep {
			t.Errorf("checkpoint.optimizer %v: learner omit_optimizer %v", keep, got.Learner.OmitOptimizer)
		}
	}
}
