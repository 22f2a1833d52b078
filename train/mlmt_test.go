package train

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/task"
)

// TestMLMTLearns runs the mlmt_math preset and its static-feedback
// baseline (minutes each on a 2-core machine) and logs both curves. It
// runs only with RLNODE_MLMT=DIR set; CI skips it.
func TestMLMTLearns(t *testing.T) {
	dir := os.Getenv("RLNODE_MLMT")
	if dir == "" {
		t.Skip("set RLNODE_MLMT=DIR to run the mlmt_math preset and its static baseline")
	}
	for _, variant := range []string{"mlmt", "static"} {
		cfg := MLMTMath(filepath.Join(dir, variant))
		if variant == "static" {
			cfg.Feedback = nil
		}
		cfg.Progress = func(m Metrics) {
			if m.EvalAccuracy != nil {
				st := -1.0
				if m.Turn3AccuracyStatic != nil {
					st = *m.Turn3AccuracyStatic
				}
				t.Logf("%s step %3d %-6s loss %.4f turn1 %.3f turn3 %.3f static %.3f elapsed %.0fs",
					variant, m.Step, m.Phase, m.Loss, *m.Turn1Accuracy, *m.Turn3Accuracy, st, m.ElapsedSeconds)
			} else if m.Step%10 == 0 && m.RewardMean != nil {
				t.Logf("%s step %3d reward t1 %.3f final %.3f gen %.2fs train %.2fs", variant, m.Step, *m.Turn1RewardMean, *m.RewardMean, m.GenSeconds, m.TrainSeconds)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		res, err := Run(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: post-warm-up %+v; final %+v", variant, res.PostWarmupTurns, res.FinalTurns)
	}
}

// tinyMLMT is the mlmt preset shrunk to seconds.
func tinyMLMT(out string) Config {
	c := MLMTMath(out)
	m := *c.Model
	m.HiddenSize, m.IntermediateSize, m.NumLayers, m.HeadDim = 32, 64, 1, 8
	c.Model = &m
	fm := m
	c.Feedback.Model = &fm
	c.WarmupSteps, c.WarmupBatch = 2, 8
	c.Steps, c.PromptsPerStep, c.GroupSize = 2, 4, 4
	c.EvalEvery, c.EvalProblems, c.CheckpointEvery = 2, 8, 0
	c.Learner.Algorithm = "rw_sft" // every sample trains, rewarded or not
	return c
}

func weightsOf(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	m, err := model.Load(dir, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	return m.Weights()
}

func sameWeights(a, b map[string][]float32) bool {
	for name, w := range a {
		if !slices.Equal(w, b[name]) {
			return false
		}
	}
	return len(a) == len(b)
}

// The three-turn plumbing, per variant: metrics carry the turn accuracies
// at evaluation steps (and the static-feedback comparison only where a
// feedback policy exists), the checkpoint holds the feedback policy under
// feedback/ only when there is one, and RL moves the feedback policy's
// weights only when it trains. Each run resumes from a warm-up-only run
// of the same config, so the feedback weights after the warm-up are on
// disk to compare with.
func TestMLMTPlumbing(t *testing.T) {
	for _, tc := range []struct {
		name         string
		edit         func(*Config)
		feedback     bool // a feedback policy exists
		feedbackMove bool // RL changes its weights (the value head's aside)
		solverSeqs   int  // sequences the solver trains on per RL step
		biLevel      bool // the feedback learner runs for its value alone too
	}{
		{"both", func(*Config) {}, true, true, 2 * 4 * 4, false},
		{"stop-gradient", func(c *Config) { c.StopGradient = true }, true, true, 4 * 4, false},
		{"solver only", func(c *Config) { c.Feedback.Train = false }, true, false, 2 * 4 * 4, false},
		{"static", func(c *Config) { c.Feedback = nil }, false, false, 2 * 4 * 4, false},
		{"improvement reward", func(c *Config) { c.FeedbackReward = FeedbackRewardImprovement }, true, true, 2 * 4 * 4, false},
		{"bi-level", func(c *Config) {
			c.Learner.Algorithm = learner.GRPO
			c.BiLevel = &BiLevel{ValueCoef: 0.1, ValueLossCoef: 1, TrainGuidance: true, GuidanceKLCoef: 0.05}
		}, true, true, 2 * 4 * 4, true},
		{"bi-level stop-grad, fixed feedback policy", func(c *Config) {
			c.Learner.Algorithm = learner.GRPO
			c.BiLevel = &BiLevel{ValueCoef: 0.1, ValueLossCoef: 1, StopValueGradients: true}
		}, true, false, 2 * 4 * 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			warm := tinyMLMT(filepath.Join(t.TempDir(), "warm"))
			tc.edit(&warm)
			warm.Steps = 0
			if _, err := Run(ctx, warm); err != nil {
				t.Fatal(err)
			}
			warmCk := filepath.Join(warm.Out, "checkpoints", "step-2")
			cfg := tinyMLMT(filepath.Join(t.TempDir(), "rl"))
			tc.edit(&cfg)
			cfg.Resume = warmCk
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Steps != 4 {
				t.Fatalf("%d steps, want 4", res.Steps)
			}
			lines := readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))
			if len(lines) != 2 {
				t.Fatalf("%d metrics lines, want 2", len(lines))
			}
			for _, m := range lines {
				for _, k := range []string{"reward_mean", "turn1_reward_mean"} {
					if _, ok := m[k].(float64); !ok {
						t.Errorf("step %v: %s = %v", m["step"], k, m[k])
					}
				}
				if _, ok := m["feedback_loss"]; ok != (tc.feedback && (tc.feedbackMove || tc.biLevel)) {
					t.Errorf("step %v: feedback_loss present %v", m["step"], ok)
				}
				if v, ok := m["feedback_value_loss"].(float64); ok != tc.biLevel || (ok && !(v > 0)) {
					t.Errorf("step %v: feedback_value_loss %v (present %v, want %v)", m["step"], m["feedback_value_loss"], ok, tc.biLevel)
				}
				if got := m["seqs"]; got != float64(tc.solverSeqs) {
					t.Errorf("step %v: the solver trained on %v sequences, want %d", m["step"], got, tc.solverSeqs)
				}
			}
			ev := lines[1] // step 4: an evaluation step
			for _, k := range []string{"eval_accuracy", "turn1_accuracy", "turn3_accuracy", "delta", "incorrect_to_correct", "correct_to_incorrect"} {
				if _, ok := ev[k].(float64); !ok {
					t.Errorf("eval step: %s = %v", k, ev[k])
				}
			}
			if ev["eval_accuracy"] != ev["turn3_accuracy"] {
				t.Errorf("eval_accuracy %v, turn3_accuracy %v: want the final turn's", ev["eval_accuracy"], ev["turn3_accuracy"])
			}
			if _, ok := ev["turn3_accuracy_static"]; ok != tc.feedback {
				t.Errorf("turn3_accuracy_static present %v, want %v", ok, tc.feedback)
			}
			if _, ok := ev["turn2_accuracy"]; ok {
				t.Error("turn2_accuracy in an mlmt run")
			}

			last := filepath.Join(cfg.Out, "checkpoints", "step-4")
			_, err = os.Stat(filepath.Join(last, FeedbackDir, "model.safetensors"))
			if (err == nil) != tc.feedback {
				t.Fatalf("feedback checkpoint: %v (want one: %v)", err, tc.feedback)
			}
			if sameWeights(weightsOf(t, warmCk), weightsOf(t, last)) {
				t.Error("the solver's weights did not move in RL")
			}
			if tc.feedback {
				before, after := weightsOf(t, filepath.Join(warmCk, FeedbackDir)), weightsOf(t, filepath.Join(last, FeedbackDir))
				if tc.biLevel {
					if slices.Equal(before[model.ValueHeadWeight], after[model.ValueHeadWeight]) {
						t.Error("the feedback policy's value head did not move in RL")
					}
					for _, w := range []map[string][]float32{before, after} {
						delete(w, model.ValueHeadWeight)
						delete(w, model.ValueHeadBias)
					}
				}
				moved := !sameWeights(before, after)
				if moved != tc.feedbackMove {
					t.Errorf("feedback weights moved in RL: %v, want %v", moved, tc.feedbackMove)
				}
			}

			te, err := EvaluateCheckpoint(ctx, cfg, last)
			if err != nil {
				t.Fatal(err)
			}
			if te.Final != ev["turn3_accuracy"] || te.Turn1 != ev["turn1_accuracy"] {
				t.Errorf("EvaluateCheckpoint %+v; the run's last evaluation %v", te, ev)
			}
		})
	}
}

// SCoRe: turn-2 metrics, one policy, the shaped reward trains the solver.
func TestSCoRePlumbing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tinyMLMT(t.TempDir())
	cfg.Episode, cfg.Feedback, cfg.ReviewTemplate, cfg.ScoreAlpha = EpisodeSCoRe, nil, "check and answer again", 10
	cfg.Task.Kinds = []string{"arithmetic"}
	cfg.Task.Level = 1
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	lines := readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))
	if len(lines) != 4 {
		t.Fatalf("%d metrics lines, want 4", len(lines))
	}
	ev := lines[3]
	for _, k := range []string{"turn1_accuracy", "turn2_accuracy", "delta"} {
		if _, ok := ev[k].(float64); !ok {
			t.Errorf("eval step: %s = %v", k, ev[k])
		}
	}
	for _, k := range []string{"turn3_accuracy", "turn3_accuracy_static", "feedback_loss"} {
		if _, ok := ev[k]; ok {
			t.Errorf("%s in a score run", k)
		}
	}
	if ev["seqs"] != float64(2*4*4) {
		t.Errorf("the solver trained on %v sequences, want both turns: %d", ev["seqs"], 2*4*4)
	}
	last := filepath.Join(cfg.Out, "checkpoints", "step-4")
	if _, err := os.Stat(filepath.Join(last, FeedbackDir)); err == nil {
		t.Error("a score checkpoint has a feedback policy")
	}
	te, err := EvaluateCheckpoint(ctx, cfg, last)
	if err != nil {
		t.Fatal(err)
	}
	if te.Episode != EpisodeSCoRe || te.Final != ev["turn2_accuracy"] || te.Turn1 != ev["turn1_accuracy"] || te.FinalStatic != -1 {
		t.Errorf("EvaluateCheckpoint %+v; the run's last evaluation %v", te, ev)
	}
}

// Multi-turn config errors name the field.
func TestMLMTRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		want string
		edit func(*Config)
	}{
		{"episode", func(c *Config) { c.Episode = "chess" }},
		{"prompt_template", func(c *Config) { c.PromptTemplate = "{{.Question}} {{.Hint}}" }},
		{"refine_template", func(c *Config) { c.RefineTemplate = "{{.Question}} {{.Hint}} {{.Feedback}}" }},
		{"refine_template", func(c *Config) { c.RefineTemplate = "{{.Question}}" }},
		{"feedback_template", func(c *Config) { c.FeedbackTemplate = "{{.Question}}" }},
		{"feedback_answer_template", func(c *Config) { c.FeedbackAnswerTemplate = "" }},
		{"static_feedback_template", func(c *Config) { c.Feedback, c.StaticFeedbackTemplate = nil, "{{.Hint}}" }},
		{"stop_gradient", func(c *Config) { c.Feedback, c.StopGradient = nil, true }},
		{"stop_gradient", func(c *Config) { c.Feedback.Train, c.StopGradient = false, true }},
		{"feedback_reward", func(c *Config) { c.FeedbackReward = "delta" }},
		{"feedback: set exactly one", func(c *Config) { c.Feedback.ModelDir = "x" }},
		{"score_alpha", func(c *Config) {
			c.Episode, c.Feedback, c.ReviewTemplate, c.ScoreAlpha = EpisodeSCoRe, nil, "again", -1
		}},
		{"review_template", func(c *Config) { c.Episode, c.Feedback = EpisodeSCoRe, nil }},
		{"for episode mlmt", func(c *Config) { c.Episode = EpisodeSingle }},
	} {
		out := filepath.Join(t.TempDir(), "run")
		c := tinyMLMT(out)
		tc.edit(&c)
		_, err := Run(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: the run directory was created for a refused config", tc.want)
		}
	}
}

// FreezeSolver trains the feedback policy alone: after a warm-up, RL
// leaves the solver's weights as they were (no solver sequences, no
// solver loss) and moves the feedback policy's; the steps and weight
// versions still advance once per RL step.
func TestMLMTFeedbackOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	warm := tinyMLMT(filepath.Join(t.TempDir(), "warm"))
	warm.Steps = 0
	if _, err := Run(ctx, warm); err != nil {
		t.Fatal(err)
	}
	warmCk := filepath.Join(warm.Out, "checkpoints", "step-2")
	cfg := tinyMLMT(filepath.Join(t.TempDir(), "rl"))
	cfg.FreezeSolver = true
	cfg.Resume = warmCk
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 4 || res.WeightVersion != 4 {
		t.Fatalf("%d steps, version %d; want 4 and 4", res.Steps, res.WeightVersion)
	}
	lines := readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))
	if len(lines) != 2 {
		t.Fatalf("%d metrics lines, want 2", len(lines))
	}
	for _, m := range lines {
		if m["seqs"] != float64(0) || m["loss"] != float64(0) {
			t.Errorf("step %v: the frozen solver trained on %v sequences (loss %v)", m["step"], m["seqs"], m["loss"])
		}
		if _, ok := m["feedback_loss"].(float64); !ok {
			t.Errorf("step %v: no feedback_loss", m["step"])
		}
	}
	last := filepath.Join(cfg.Out, "checkpoints", "step-4")
	if !sameWeights(weightsOf(t, warmCk), weightsOf(t, last)) {
		t.Error("the frozen solver's weights moved in RL")
	}
	if sameWeights(weightsOf(t, filepath.Join(warmCk, FeedbackDir)), weightsOf(t, filepath.Join(last, FeedbackDir))) {
		t.Error("the feedback policy's weights did not move in RL")
	}
	for _, edit := range []func(*Config){
		func(c *Config) { c.Feedback.Train = false },
		func(c *Config) { c.Feedback = nil },
		func(c *Config) { c.StopGradient = true },
		func(c *Config) { c.Episode, c.Feedback, c.ReviewTemplate = EpisodeSCoRe, nil, "again" },
	} {
		c := tinyMLMT(filepath.Join(t.TempDir(), "bad"))
		c.FreezeSolver = true
		edit(&c)
		if _, err := Run(ctx, c); err == nil || !strings.Contains(err.Error(), "freeze_solver") {
			t.Errorf("error %v, want one naming freeze_solver", err)
		}
	}
}

// TestMLMTWarmupHintFree checks mlmt_math's warm-up texts: the feedback
// policy's target names .AnyHint (the hint by chance alone) while the
// solver's refine prompt shows feedback naming the hint, for the
// problems the warm-up drew, in order.
func TestMLMTWarmupHintFree(t *testing.T) {
	cfg := tinyMLMT(t.TempDir())
	cfg.Steps = 0
	if cfg.FeedbackAnswerTemplate != " take the {{.AnyHint}}" || cfg.RefineFeedbackTemplate != " take the {{.Hint}}" {
		t.Fatalf("preset warm-up templates %q, %q", cfg.FeedbackAnswerTemplate, cfg.RefineFeedbackTemplate)
	}
	tok, err := tokenizer.BuiltinSized(cfg.Model.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(ids []int32) string {
		out := make([]int, len(ids))
		for i, id := range ids {
			out[i] = int(id)
		}
		return tok.Decode(out)
	}
	var mu sync.Mutex
	batches := map[string][]learner.Batch{}
	testTrainBatch = func(policy string, _ int, b learner.Batch) {
		mu.Lock()
		defer mu.Unlock()
		batches[policy] = append(batches[policy], b)
	}
	defer func() { testTrainBatch = nil }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	gen, err := task.New(cfg.Task)
	if err != nil {
		t.Fatal(err)
	}
	fb, solver := batches["feedback"], batches["solver"]
	if len(fb) != cfg.WarmupSteps || len(solver) != cfg.WarmupSteps {
		t.Fatalf("%d feedback and %d solver batches, want %d each", len(fb), len(solver), cfg.WarmupSteps)
	}
	named, i := 0, 0
	for s := range cfg.WarmupSteps {
		if len(fb[s].Prompts) != cfg.WarmupBatch || len(solver[s].Prompts) != 2*cfg.WarmupBatch {
			t.Fatalf("warm-up step %d: %d feedback and %d solver sequences, want %d and %d", s+1, len(fb[s].Prompts), len(solver[s].Prompts), cfg.WarmupBatch, 2*cfg.WarmupBatch)
		}
		for j := range cfg.WarmupBatch {
			p, err := gen.Problem(task.Train, i)
			if err != nil {
				t.Fatal(err)
			}
			i++
			prompt, target := decode(fb[s].Prompts[j]), decode(fb[s].Responses[j])
			if !strings.Contains(prompt, p.Question+"\nhint: "+p.Hint+"\n") {
				t.Fatalf("feedback prompt %q is not problem %s's (%q, hint %s)", prompt, p.ID, p.Question, p.Hint)
			}
			if want := " take the " + task.AnyHint(p) + "<|endoftext|>"; target != want {
				t.Errorf("%s: feedback target %q, want %q", p.ID, target, want)
			}
			if task.AnyHint(p) == p.Hint {
				named++
			}
			refine := decode(solver[s].Prompts[2*j+1])
			if !strings.Contains(refine, "feedback: take the "+p.Hint+"\n") {
				t.Errorf("%s: refine prompt %q does not show feedback naming the hint %s", p.ID, refine, p.Hint)
			}
		}
	}
	if named == i {
		t.Errorf("every one of %d feedback targets names the hint", i)
	}
}
