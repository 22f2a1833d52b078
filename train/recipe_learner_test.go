package train

import (
	"errors"
	"github.com/rlnode/rlnode/recipes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
)

// The RL schedule runs after an SFT warm-up, in optimizer steps: epochs ×
// mini_batches per RL step, for algorithm.warmup and schedule.steps alike.
func TestFromRecipeScheduleAfterWarmup(t *testing.T) {
	for _, c := range []struct {
		sets          []string
		warmup, total int
		lr, minLR     float64
	}{
		{[]string{"algorithm.schedule=cosine", "algorithm.warmup=5", "algorithm.min_lr=1e-6", "schedule.steps=40"}, 5, 40, 1e-4, 1e-6},
		{[]string{"algorithm.schedule=cosine", "algorithm.warmup=5", "algorithm.min_lr=1e-6", "schedule.steps=40", "algorithm.mini_batches=2", "algorithm.epochs=3"}, 30, 240, 1e-4, 1e-6},
		{[]string{"algorithm.warmup=4", "algorithm.mini_batches=2"}, 8, 0, 1e-4, 1e-4},
	} {
		l, err := recipes.Load("quickstart", append([]string{"algorithm.lr=1e-4"}, c.sets...))
		if err != nil {
			t.Fatalf("%v: %v", c.sets, err)
		}
		if l.SFT.Steps == 0 {
			t.Fatal("quickstart has no SFT warm-up: the test needs one")
		}
		got, err := FromRecipe(l, t.TempDir())
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

// writeCheckpoint writes a random model of cfg with the built-in tokenizer
// of tokVocab tokens into a new directory.
func writeCheckpoint(t *testing.T, cfg model.Config, tokVocab int) string {
	t.Helper()
	dir := t.TempDir()
	m, err := model.New(cfg, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	m.InitRandom(7)
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.BuiltinSized(tokVocab)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.Save(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// quickstartModel is the quickstart recipe's random model's config.
func quickstartModel(t *testing.T) *model.Config {
	t.Helper()
	l, err := recipes.Load("quickstart", nil)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := modelConfig(l.Models.Policy.Init)
	if err != nil {
		t.Fatal(err)
	}
	return mc
}

// models.reference.path becomes the solver learner's reference, checked
// before any actor starts: another vocabulary or tokenizer is an error
// naming the field and both models; a random reference is refused naming
// the field.
func TestFromRecipeReferenceModel(t *testing.T) {
	mc := quickstartModel(t)
	good := writeCheckpoint(t, *mc, mc.VocabSize)
	wide := *mc
	wide.VocabSize += 32
	for _, c := range []struct {
		dir  string
		want []string
	}{
		{good, nil},
		{writeCheckpoint(t, wide, wide.VocabSize), []string{"models.reference.path", "vocab_size 800", "the policy initialized from scratch"}},
		{writeCheckpoint(t, *mc, mc.VocabSize-10), []string{"models.reference.path", "different tokenizers"}},
	} {
		l, err := recipes.Load("quickstart", []string{"algorithm.kl_coef=0.05", "models.reference.path=" + c.dir})
		if err != nil {
			t.Fatal(err)
		}
		got, err := FromRecipe(l, t.TempDir())
		if c.want == nil {
			if err != nil || got.Learner.RefModelDir != c.dir {
				t.Errorf("learner reference %q (%v), want %q", got.Learner.RefModelDir, err, c.dir)
			}
			continue
		}
		for _, w := range append(c.want, c.dir) {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("reference %s: %v, want an error naming %q", c.dir, err, w)
			}
		}
	}
	l, err := recipes.Load("quickstart", []string{"algorithm.kl_coef=0.05", "models.reference.init={}"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = FromRecipe(l, t.TempDir())
	if !errors.Is(err, recipes.ErrInvalid) || !strings.Contains(err.Error(), "models.reference.init:") {
		t.Errorf("a random reference: %v, want ErrInvalid naming models.reference.init", err)
	}
}

// algorithm.kl_in_reward reaches PPO's learner, and is refused with
// another algorithm or without kl_coef.
func TestKLInRewardRecipe(t *testing.T) {
	ppo := []string{"algorithm.name=ppo", "models.policy.value_head=true"}
	l, err := recipes.Load("quickstart", append(ppo, "algorithm.kl_coef=0.05", "algorithm.kl_in_reward=true"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := FromRecipe(l, t.TempDir())
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
		if _, err := recipes.Load("quickstart", c.sets); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.sets, err, c.want)
		}
	}
}

// checkpoint.optimizer false runs: the learner leaves the optimizer state
// out of its checkpoints.
func TestFromRecipeCheckpointWithoutOptimizer(t *testing.T) {
	for _, keep := range []bool{true, false} {
		l, err := recipes.Load("quickstart", []string{"checkpoint.optimizer=" + map[bool]string{true: "true", false: "false"}[keep]})
		if err != nil {
			t.Fatal(err)
		}
		got, err := FromRecipe(l, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if got.Learner.OmitOptimizer == keep {
			t.Errorf("checkpoint.optimizer %v: learner omit_optimizer %v", keep, got.Learner.OmitOptimizer)
		}
	}
}

// models.policy.lora.rank above the smaller dimension of a targeted matrix
// of a model read from its folder is refused by Check at the rank's field
// (recipes checks models.policy.init's): rank 100000000 ended in the Go
// runtime's out-of-memory crash once the adapters started.
func TestCheckLoRARankAgainstModelFolder(t *testing.T) {
	mc := quickstartModel(t)
	dir := writeCheckpoint(t, *mc, mc.VocabSize)
	for _, c := range []struct {
		rank string
		want string
	}{
		{"64", ""},
		{"65", "models.policy.lora.rank: learner: model " + filepath.Join(dir, "config.json") + ": lora: r 65 exceeds k_proj's smaller dimension 64 (128 inputs, 64 outputs)"},
	} {
		l, err := recipes.Load("quickstart", []string{"models.policy.init=null", "models.policy.path=" + dir, "models.policy.lora.rank=" + c.rank})
		if err != nil {
			t.Fatalf("rank %s: %v", c.rank, err)
		}
		err = Check(l)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("rank %s: %v", c.rank, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("rank %s: Check: %v\nwant %q", c.rank, err, c.want)
		}
	}
}
