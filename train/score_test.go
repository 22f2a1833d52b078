package train

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
)

// The planner marks the first Stage1Steps RL steps, and none of the
// warm-up.
func TestPlanScoreStages(t *testing.T) {
	sc := Schedule{WarmupSteps: 2, Steps: 5, Stage1Steps: 3}
	var got []bool
	for s := (State{}); ; {
		p := Plan(sc, s)
		if p.Done {
			break
		}
		got = append(got, p.Stage1)
		s = After(s, p)
	}
	want := []bool{false, false, true, true, true, false, false}
	if len(got) != len(want) {
		t.Fatalf("%d steps planned, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d: stage 1 %v, want %v", i+1, got[i], want[i])
		}
	}
}

// scoreTurns are two score episodes (group 0), the second turn's Reward
// shaped with α 10 as the episode writes it.
func scoreTurns() []data.Turn {
	turn := func(ep string, sample int, k int32, r, final float64) data.Turn {
		return data.Turn{EpisodeID: ep, GroupID: 0, Sample: int32(sample), Turn: k, PolicyID: "policy",
			PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3, 4}, LogProbs: []float32{-1, -1}, LossMask: []float32{1, 1},
			Reward: r, FinalReward: final, FinishReason: "stop"}
	}
	return []data.Turn{
		turn("e0", 0, 0, 0, 1), turn("e0", 0, 1, 11, 1), // wrong, then right: 1 + 10·(1 − 0)
		turn("e1", 1, 0, 1, 0), turn("e1", 1, 1, -10, 0), // right, then wrong
	}
}

// Stage I: first attempts KL only at β2/β1, second attempts on r2 with
// weights 1; the batch's rows are in trajectory order (turn 0s, then
// turn 1s of the group).
func TestScoreStage1Batch(t *testing.T) {
	turns := scoreTurns()
	sb, err := BatchFromTrajectories("policy", turns, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := scoreStage1(&sb, turns, "policy", nil, 1, 0.01, 0.1); err != nil {
		t.Fatal(err)
	}
	wantR, wantPG, wantKL := []float64{0, 1, 1, 0}, []float64{0, 0, 1, 1}, []float64{10, 10, 1, 1}
	for i := range wantR {
		if sb.Rewards[i] != wantR[i] || sb.PGWeights[i] != wantPG[i] || !near(sb.KLWeights[i], wantKL[i], 1e-12) {
			t.Errorf("row %d: reward %v, pg %v, kl %v; want %v, %v, %v", i, sb.Rewards[i], sb.PGWeights[i], sb.KLWeights[i], wantR[i], wantPG[i], wantKL[i])
		}
	}
	bad := learner.Batch{Responses: sb.Responses[:1], Rewards: sb.Rewards[:1]}
	if err := scoreStage1(&bad, turns, "policy", nil, 1, 0.01, 0.1); err == nil || !strings.Contains(err.Error(), "4 solver turns for a batch of 1") {
		t.Errorf("a batch of other turns: %v", err)
	}
	three := append(scoreTurns(), scoreTurns()[1])
	three[4].Turn = 2
	sb3, err := BatchFromTrajectories("policy", three, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := scoreStage1(&sb3, three, "policy", nil, 1, 0.01, 0.1); err == nil || !strings.Contains(err.Error(), "solver turn 2") {
		t.Errorf("a third turn: %v", err)
	}
}

// RL-guided SCoRe's stage I: the solver's attempt (turn 0) on the KL
// alone, its refine turn (turn 2) on the unshaped r2; the feedback
// policy's turn 1 is another policy's and not in the solver's batch.
func TestScoreStage1BatchMLMT(t *testing.T) {
	var turns []data.Turn
	for _, tn := range scoreTurns() {
		if tn.Turn == 1 {
			fb := tn
			fb.PolicyID, fb.Reward = "feedback", tn.FinalReward
			turns = append(turns, fb)
			tn.Turn = 2
		}
		turns = append(turns, tn)
	}
	sb, err := BatchFromTrajectories("policy", turns, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := scoreStage1(&sb, turns, "policy", nil, 2, 0.01, 0.1); err != nil {
		t.Fatal(err)
	}
	wantR, wantPG, wantKL := []float64{0, 1, 1, 0}, []float64{0, 0, 1, 1}, []float64{10, 10, 1, 1}
	for i := range wantR {
		if sb.Rewards[i] != wantR[i] || sb.PGWeights[i] != wantPG[i] || !near(sb.KLWeights[i], wantKL[i], 1e-12) {
			t.Errorf("row %d: reward %v, pg %v, kl %v; want %v, %v, %v", i, sb.Rewards[i], sb.PGWeights[i], sb.KLWeights[i], wantR[i], wantPG[i], wantKL[i])
		}
	}
	sb1, _ := BatchFromTrajectories("policy", turns, nil)
	if err := scoreStage1(&sb1, turns, "policy", nil, 1, 0.01, 0.1); err == nil || !strings.Contains(err.Error(), "solver turn 2 (want the attempts 0 and 1)") {
		t.Errorf("an mlmt batch read as score's: %v", err)
	}
}

func near(a, b, tol float64) bool { return a-b <= tol && b-a <= tol }

// The recipe keys map onto the driver's config, and the driver refuses
// what the recipe check does.
func TestScoreStagesConfig(t *testing.T) {
	l, err := recipes.Load("score_two_stage", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FromRecipe(l, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ScoreStage1Steps != 100 || cfg.ScoreStage1KLCoef != 0.1 || cfg.Learner.Loss.KLCoef != 0.01 || cfg.ScoreAlpha != 10 {
		t.Errorf("stage 1 steps %d, β2 %v, β1 %v, α %v; want 100, 0.1, 0.01, 10", cfg.ScoreStage1Steps, cfg.ScoreStage1KLCoef, cfg.Learner.Loss.KLCoef, cfg.ScoreAlpha)
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.ScoreStage1Steps = -1 }, "score_stage1_steps -1: want ≥ 0"},
		{func(c *Config) { c.ScoreStage1KLCoef = 0 }, "score_stage1_kl_coef 0: want finite and > 0"},
		{func(c *Config) { c.Learner.Loss.KLCoef = 0 }, "the learner's KL coefficient is 0"},
		{func(c *Config) { c.Episode = EpisodeSingle }, "score_stage1_steps, score_stage1_kl_coef: for episode score"},
	} {
		c2 := cfg
		c.edit(&c2)
		if _, err := c2.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

// RL-guided SCoRe takes stage I too (mlmt with the shaped refine reward),
// not plain mlmt or a frozen solver.
func TestScoreStagesRLGuided(t *testing.T) {
	cfg, _ := loadRun(t, "rl_guided_score", []string{"algorithm.score.stage1_steps=5"})
	if cfg.ScoreStage1Steps != 5 || cfg.ScoreStage1KLCoef != 0.1 || !cfg.ShapeRefine || cfg.Episode != EpisodeMLMT {
		t.Fatalf("stage 1 steps %d, β2 %v, shaped %v, episode %s", cfg.ScoreStage1Steps, cfg.ScoreStage1KLCoef, cfg.ShapeRefine, cfg.Episode)
	}
	if _, err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.ShapeRefine = false }, "for episode score, or mlmt with shape_refine"},
		{func(c *Config) { c.FreezeSolver = true }, "stage I trains both solver attempts"},
	} {
		c2 := cfg
		c.edit(&c2)
		if _, err := c2.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

// A shrunk score_two_stage runs both stages: its RL steps log stage 1,
// then 2.
func TestScoreTwoStageRuns(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	t.Chdir(t.TempDir())
	shrink := []string{"models.policy.init.hidden_size=32", "models.policy.init.intermediate_size=64",
		"models.policy.init.layers=1", "sft.steps=2", "sft.batch_size=8", "schedule.steps=4", "schedule.eval_every=4",
		"eval.held_out=8", "algorithm.batch_prompts=4", "algorithm.group_size=4", "algorithm.score.stage1_steps=2"}
	for _, c := range []struct {
		recipe string
		sets   []string
	}{
		{"score_two_stage", nil},
		// RL-guided SCoRe: the solver's attempt and refine turn.
		{"rl_guided_score", []string{"models.feedback.init.hidden_size=32", "models.feedback.init.intermediate_size=64", "models.feedback.init.layers=1"}},
	} {
		t.Run(c.recipe, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cfg, out := loadRun(t, c.recipe, append(slices.Clone(shrink), c.sets...))
			if _, err := Run(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			var stages []int
			for _, m := range readMetrics(t, filepath.Join(out, "metrics.jsonl")) {
				if m["phase"] == "rl" {
					stage, _ := m["score_stage"].(float64)
					stages = append(stages, int(stage))
				}
			}
			if want := []int{1, 1, 2, 2}; !slices.Equal(stages, want) {
				t.Errorf("RL steps' score_stage %v, want %v", stages, want)
			}
		})
	}
}
