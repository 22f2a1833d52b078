package train

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
)

// The planner alternates the levels: of every high + low RL steps the
// first high train the feedback policy only; without a ratio both train.
func TestPlanUpdateRatio(t *testing.T) {
	for _, c := range []struct {
		ratio [2]int
		want  string // per RL step: h (high only), l (low only), b (both)
	}{
		{[2]int{}, "bbbbbbb"},
		{[2]int{1, 1}, "hlhlhlh"},
		{[2]int{1, 3}, "hlllhll"},
		{[2]int{2, 1}, "hhlhhlh"},
	} {
		sc := Schedule{WarmupSteps: 1, Steps: 7, UpdateRatio: c.ratio}
		var got strings.Builder
		for s := (State{}); ; {
			p := Plan(sc, s)
			if p.Done {
				break
			}
			if p.Phase == PhaseRL {
				switch {
				case p.TrainHigh && p.TrainLow:
					got.WriteByte('b')
				case p.TrainHigh:
					got.WriteByte('h')
				case p.TrainLow:
					got.WriteByte('l')
				default:
					got.WriteByte('-')
				}
			}
			s = After(s, p)
		}
		if got.String() != c.want {
			t.Errorf("ratio %v: %s, want %s", c.ratio, got.String(), c.want)
		}
	}
}

func TestTextualACConfig(t *testing.T) {
	l, err := recipes.Load("textual_ac", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FromRecipe(l, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TextualAC == nil || *cfg.TextualAC != (rl.ContextRewardConfig{ConfidenceCoef: 0.1, DependenceCoef: 0.05}) || cfg.UpdateRatio != [2]int{1, 15} {
		t.Fatalf("textual_ac %+v, update ratio %v", cfg.TextualAC, cfg.UpdateRatio)
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.RefineTemplate = "{{.Question}} {{.Attempt}} {{.Feedback}}" }, "refine_template"},
		{func(c *Config) { c.FeedbackTemplate = "{{.Question}} {{.Attempt}}" }, "feedback_template"},
		{func(c *Config) { c.MaxStaleness = 1 }, "max_staleness"},
		{func(c *Config) { c.TextualAC = &rl.ContextRewardConfig{DependenceCoef: -1} }, "want finite and ≥ 0"},
		{func(c *Config) { c.UpdateRatio = [2]int{0, 2} }, "update_ratio 0:2: want both ≥ 1"},
		{func(c *Config) { c.Feedback.Train = false }, "needs episode mlmt with both trained"},
		{func(c *Config) { c.BiLevel = &BiLevel{ValueLossCoef: 1}; c.UpdateRatio = [2]int{} }, "textual_ac: not with bi_level"},
	} {
		c2 := cfg
		fb := *cfg.Feedback
		c2.Feedback = &fb
		c.edit(&c2)
		if _, err := c2.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

// A shrunk textual_ac runs: alternating 1:2, the context generator's turns
// rewarded with the measured terms added, context_kl and
// context_confidence logged every RL step.
func TestTextualACRuns(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tiny := []string{"sft.steps=2", "sft.batch_size=8", "schedule.steps=3", "schedule.eval_every=3", "eval.held_out=8",
		"algorithm.batch_prompts=4", "algorithm.group_size=4", "algorithm.mlmt.update_ratio=1:2",
		"algorithm.textual_ac.confidence_coef=0.5", "algorithm.textual_ac.dependence_coef=0.5"}
	for _, role := range []string{"policy", "feedback"} {
		tiny = append(tiny, "models."+role+".init.hidden_size=32", "models."+role+".init.intermediate_size=64", "models."+role+".init.layers=1")
	}
	cfg, out := loadRun(t, "textual_ac", tiny)
	var shaped, contexts int
	cfg.Episodes = func(step int, turns []data.Turn) {
		for _, tn := range turns {
			if tn.Turn != 1 {
				continue
			}
			contexts++
			if tn.Reward != tn.FinalReward {
				shaped++
			}
		}
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.FinalTurns.Problems != 8 {
		t.Errorf("%d problems evaluated, want 8", res.FinalTurns.Problems)
	}
	if contexts != 3*4*4 || shaped != contexts {
		t.Errorf("%d of %d context turns rewarded apart from the final reward; want all of %d", shaped, contexts, 3*4*4)
	}
	var trained []string
	for _, m := range readMetrics(t, filepath.Join(out, "metrics.jsonl")) {
		if m["phase"] != "rl" {
			continue
		}
		tr, _ := m["trained"].(string)
		trained = append(trained, tr)
		_, kl := m["context_kl"].(float64)
		conf, ok := m["context_confidence"].(float64)
		if !kl || !ok || conf >= 0 {
			t.Errorf("RL step: context_kl %v, context_confidence %v; want both, confidence < 0", m["context_kl"], m["context_confidence"])
		}
	}
	if want := []string{"feedback", "solver", "solver"}; !slices.Equal(trained, want) {
		t.Errorf("trained %v, want %v", trained, want)
	}
}

// textual_ac_shared runs one model in both roles: one learner (no
// feedback checkpoint), the warm-up's batch holding both roles' targets,
// the alternating steps training the rows of their role only; its
// checkpoint evaluates with the one model in both roles.
func TestTextualACSharedRuns(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, out := loadRun(t, "textual_ac_shared", []string{"models.policy.init.hidden_size=32", "models.policy.init.intermediate_size=64",
		"models.policy.init.layers=1", "sft.steps=2", "sft.batch_size=8", "schedule.steps=3", "schedule.eval_every=3",
		"eval.held_out=8", "algorithm.batch_prompts=4", "algorithm.group_size=4", "algorithm.mlmt.update_ratio=1:2"})
	if !cfg.SharedWeights {
		t.Fatal("shared_weights did not map")
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int
	var trained []string
	for _, m := range readMetrics(t, filepath.Join(out, "metrics.jsonl")) {
		n, _ := m["seqs"].(float64)
		tr, _ := m["trained"].(string)
		seqs, trained = append(seqs, int(n)), append(trained, tr)
	}
	// Warm-up: 8 problems × (first answer, context, answer with it); RL:
	// 4 × 4 episodes, the context rows (16) on the feedback step, the
	// solver's two turns (32) on the others.
	if want := []int{24, 24, 16, 32, 32}; !slices.Equal(seqs, want) {
		t.Errorf("sequences per step %v, want %v", seqs, want)
	}
	if want := []string{"", "", "feedback", "solver", "solver"}; !slices.Equal(trained, want) {
		t.Errorf("trained %v, want %v", trained, want)
	}
	if _, err := os.Stat(filepath.Join(res.LastCheckpointDir, FeedbackDir)); !os.IsNotExist(err) {
		t.Errorf("a shared-weights checkpoint has a feedback policy: %v", err)
	}
	te, err := EvaluateCheckpoint(ctx, cfg, res.LastCheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	if te.Problems != 8 || te.Final != res.FinalTurns.Final || te.Turn1 != res.FinalTurns.Turn1 {
		t.Errorf("checkpoint evaluation %+v, the run's %+v", te, res.FinalTurns)
	}
}
