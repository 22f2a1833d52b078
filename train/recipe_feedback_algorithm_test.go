package train

import (
	"context"
	"github.com/rlnode/rlnode/recipes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
)

// loadFromRecipe loads a recipe and maps it onto the driver: the error
// is validation's or the driver mapping's, whichever comes first.
func loadFromRecipe(t *testing.T, recipe string, sets []string) (Config, error) {
	t.Helper()
	l, err := recipes.Load(recipe, sets)
	if err != nil {
		return Config{}, err
	}
	return FromRecipe(l, t.TempDir())
}

// algorithm.mlmt.feedback_algorithm and feedback_lr give MLMT's feedback
// policy its own algorithm and learning rate (default: the solver's);
// the wrong combinations are refused naming the key.
func TestFromRecipeFeedbackAlgorithm(t *testing.T) {
	ppoSolver := []string{"algorithm.name=ppo", "models.policy.value_head=true"}
	for _, c := range []struct {
		name, recipe string
		sets         []string
		solver, fb   string
		lr, fbLR     float64
	}{
		{"default", "mlmt_math", nil, learner.GRPO, learner.GRPO, 0, 5e-4},
		{"solver-ppo-feedback-grpo", "mlmt_math", append(ppoSolver, "algorithm.mlmt.feedback_algorithm=grpo"), learner.PPO, learner.GRPO, 0, 5e-4},
		{"solver-grpo-feedback-ppo", "mlmt_math", []string{"algorithm.mlmt.feedback_algorithm=ppo", "models.feedback.value_head=true"}, learner.GRPO, learner.PPO, 0, 5e-4},
		{"alias", "mlmt_math", []string{"algorithm.mlmt.feedback_algorithm=dr_grpo"}, learner.GRPO, learner.DrGRPO, 0, 5e-4},
		{"lr", "mlmt_math", []string{"algorithm.lr=1e-4", "algorithm.mlmt.feedback_lr=3e-4"}, learner.GRPO, learner.GRPO, 1e-4, 3e-4},
		{"feedback lr defaults to lr", "rl_guided_score", []string{"algorithm.lr=2e-4", "algorithm.mlmt.feedback_lr=null"}, learner.GRPO, learner.GRPO, 2e-4, 2e-4},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := loadFromRecipe(t, c.recipe, c.sets)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Learner.Algorithm != c.solver || cfg.Feedback == nil || cfg.Feedback.Algorithm != c.fb {
				t.Fatalf("solver %q, feedback %+v; want %q and %q", cfg.Learner.Algorithm, cfg.Feedback, c.solver, c.fb)
			}
			wantLR := c.fbLR // mlmt_math sets algorithm.mlmt.feedback_lr 5e-4
			if (c.lr != 0 && cfg.Learner.LR != c.lr) || cfg.Feedback.LR != wantLR {
				t.Errorf("lr %g, feedback lr %g; want %g and %g", cfg.Learner.LR, cfg.Feedback.LR, c.lr, wantLR)
			}
		})
	}
	for _, c := range []struct {
		name, recipe string
		sets         []string
		want         string
	}{
		{"ppo without critic", "mlmt_math", []string{"algorithm.mlmt.feedback_algorithm=ppo"}, "models.feedback.value_head"},
		{"critic without ppo", "mlmt_math", append(ppoSolver, "models.feedback.value_head=true", "algorithm.mlmt.feedback_algorithm=grpo"), "models.feedback.value_head"},
		{"ppo without models.feedback", "mlmt_math", []string{"algorithm.mlmt.feedback_algorithm=ppo", "models.feedback=null"}, "models.feedback"},
		{"unknown", "mlmt_math", []string{"algorithm.mlmt.feedback_algorithm=dpo"}, "algorithm.mlmt.feedback_algorithm"},
		{"bad lr", "mlmt_math", []string{"algorithm.mlmt.feedback_lr=-1"}, "algorithm.mlmt.feedback_lr"},
		{"single-turn", "quickstart", []string{"algorithm.mlmt.feedback_algorithm=grpo"}, "algorithm.mlmt"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadFromRecipe(t, c.recipe, c.sets)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one naming %s", err, c.want)
			}
		})
	}
	// The static variant of a recipe is the recipe with static feedback:
	// the feedback policy's settings are ignored there.
	if _, err := loadFromRecipe(t, "mlmt_math_static", []string{"algorithm.mlmt.feedback_algorithm=ppo", "algorithm.mlmt.feedback_lr=1e-3"}); err != nil {
		t.Errorf("static feedback with a feedback algorithm: %v", err)
	}
}

// mlmt_math with the solver on PPO and the feedback policy on GRPO runs
// from the recipe: the solver's critic metrics at RL steps, none for the
// feedback policy.
func TestFeedbackAlgorithmRecipeRuns(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sets := []string{"models.policy.init.hidden_size=32", "models.policy.init.intermediate_size=64", "models.policy.init.layers=1",
		"models.feedback.init.hidden_size=32", "models.feedback.init.intermediate_size=64", "models.feedback.init.layers=1",
		"sft.steps=2", "sft.batch_size=8", "schedule.steps=2", "schedule.eval_every=2", "eval.held_out=8",
		"algorithm.batch_prompts=4", "algorithm.group_size=4",
		"algorithm.name=ppo", "models.policy.value_head=true", "algorithm.mlmt.feedback_algorithm=grpo", "algorithm.mlmt.feedback_lr=5e-4"}
	cfg, out := loadRun(t, "mlmt_math", sets)
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	rl := 0
	for _, line := range strings.Split(strings.TrimSpace(string(js)), "\n") {
		if !strings.Contains(line, `"phase":"rl"`) {
			continue
		}
		rl++
		if !strings.Contains(line, `"value_loss"`) || strings.Contains(line, `"feedback_value_loss"`) || !strings.Contains(line, `"feedback_lr":0.0005`) {
			t.Errorf("RL step: want the solver's value_loss, no feedback_value_loss, feedback_lr 0.0005: %s", line)
		}
	}
	if rl != 2 {
		t.Errorf("%d RL steps logged, want 2", rl)
	}
}
