package train

import (
	"github.com/rlnode/rlnode/recipes"
	"slices"
	"testing"
)

// models.policy.lora and models.feedback.lora reach the driver's learner
// configurations (seeded per policy), with weight_sync lora on native and
// vllm engines.
func TestFromRecipeLoRA(t *testing.T) {
	l, err := recipes.Load("quickstart", []string{"models.policy.lora={rank: 4, alpha: 8, targets: [q_proj, v_proj]}", "placement.learner_shards=2"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FromRecipe(l, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lo := cfg.Learner.LoRA
	if lo == nil || lo.Rank != 4 || lo.Alpha != 8 || !slices.Equal(lo.TargetModules, []string{"q_proj", "v_proj"}) || lo.Seed != l.Recipe.Seed {
		t.Errorf("learner lora = %+v", lo)
	}
	if cfg.Learner.Shards != 2 {
		t.Errorf("shards %d", cfg.Learner.Shards)
	}

	l, err = recipes.Load("mlmt_math", []string{"models.feedback.lora={rank: 2}"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = FromRecipe(l, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Learner.LoRA != nil {
		t.Errorf("solver lora %+v, want none", cfg.Learner.LoRA)
	}
	if f := cfg.Feedback; f == nil || f.LoRA == nil || f.LoRA.Rank != 2 || f.LoRA.Seed != l.Recipe.Seed+1 {
		t.Errorf("feedback %+v", f)
	}

	l, err = recipes.Load("quickstart", []string{"deterministic=false", "models.policy.lora={rank: 4}", "engines.policy.kind=vllm",
		`engines.policy.vllm={servers: ["http://127.0.0.1:8000"], model: m}`})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = FromRecipe(l, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if cfg.VLLM == nil || cfg.Learner.LoRA == nil {
		t.Errorf("vllm %+v lora %+v", cfg.VLLM, cfg.Learner.LoRA)
	}
}
