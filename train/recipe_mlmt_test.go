package train

import (
	"context"
	"github.com/rlnode/rlnode/recipes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/rollout/data"
)

// The multi-turn built-ins map onto the driver's presets: mlmt_math is
// MLMTMath (templates rendering the same text), its variants
// differ from it only where they say, and score_math is
// SCoReMath. bi_level_score and rl_guided_score take mlmt_math's warm-up,
// learning rates and entropy bonus.
func TestFromRecipeMultiTurn(t *testing.T) {
	data := TemplateData{Question: "Pick: 17 42 8", Answer: "42", Hint: "2nd", AnyHint: "3rd", Attempt: `\boxed{17}`, Feedback: " take the 2nd"}
	for _, tc := range []struct {
		recipe string
		want   func() Config
	}{
		{"mlmt_math", func() Config { return MLMTMath("OUT") }},
		{"mlmt_math_stopgrad", func() Config { c := MLMTMath("OUT"); c.StopGradient = true; return c }},
		{"mlmt_math_static", func() Config {
			c := MLMTMath("OUT")
			c.Feedback, c.FeedbackTemplate, c.FeedbackAnswerTemplate, c.RefineFeedbackTemplate = nil, "", "", ""
			return c
		}},
		{"score_math", func() Config { return SCoReMath("OUT") }},
		{"bi_level_score", func() Config {
			c := MLMTMath("OUT")
			c.BiLevel = &BiLevel{ValueCoef: 0.1, ValueLossCoef: 1, TrainGuidance: true, GuidanceKLCoef: 0.05}
			return c
		}},
		{"rl_guided_score", func() Config {
			c := MLMTMath("OUT")
			c.ShapeRefine, c.ScoreAlpha = true, 10
			return c
		}},
		{"bi_level_score_stopgrad", func() Config {
			c := MLMTMath("OUT")
			c.BiLevel = &BiLevel{ValueCoef: 0.1, ValueLossCoef: 1, StopValueGradients: true, TrainGuidance: true, GuidanceKLCoef: 0.05}
			return c
		}},
	} {
		t.Run(tc.recipe, func(t *testing.T) {
			l, err := recipes.Load(tc.recipe, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := FromRecipe(l, "OUT")
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want()
			for _, tpl := range []struct {
				name      string
				got, want string
			}{
				{"prompt", got.PromptTemplate, want.PromptTemplate},
				{"answer", got.AnswerTemplate, want.AnswerTemplate},
				{"feedback", got.FeedbackTemplate, want.FeedbackTemplate},
				{"feedback answer", got.FeedbackAnswerTemplate, want.FeedbackAnswerTemplate},
				{"refine feedback", got.RefineFeedbackTemplate, want.RefineFeedbackTemplate},
				{"static feedback", got.StaticFeedbackTemplate, want.StaticFeedbackTemplate},
				{"refine", got.RefineTemplate, want.RefineTemplate},
				{"review", got.ReviewTemplate, want.ReviewTemplate},
			} {
				if (tpl.got == "") != (tpl.want == "") {
					t.Errorf("%s template: recipe %q, preset %q", tpl.name, tpl.got, tpl.want)
					continue
				}
				if tpl.got != "" {
					if g, w := renderWith(t, tpl.got, data), renderWith(t, tpl.want, data); g != w {
						t.Errorf("%s template renders %q, the preset's %q", tpl.name, g, w)
					}
				}
			}
			// Templates compared by rendering; the rest field by field.
			got.PromptTemplate, got.AnswerTemplate, got.FeedbackTemplate, got.FeedbackAnswerTemplate = "", "", "", ""
			got.StaticFeedbackTemplate, got.RefineTemplate, got.ReviewTemplate, got.RefineFeedbackTemplate = "", "", "", ""
			want.PromptTemplate, want.AnswerTemplate, want.FeedbackTemplate, want.FeedbackAnswerTemplate = "", "", "", ""
			want.StaticFeedbackTemplate, want.RefineTemplate, want.ReviewTemplate, want.RefineFeedbackTemplate = "", "", "", ""
			if want.EngineBatch == 0 {
				want.EngineBatch = 256
			}
			if arch(got.Model) != arch(want.Model) {
				t.Errorf("model %+v, preset %+v", arch(got.Model), arch(want.Model))
			}
			if (got.Feedback == nil) != (want.Feedback == nil) {
				t.Fatalf("feedback %+v, preset %+v", got.Feedback, want.Feedback)
			}
			if got.Feedback != nil {
				if arch(got.Feedback.Model) != arch(want.Feedback.Model) || got.Feedback.Train != want.Feedback.Train || got.Feedback.ModelDir != want.Feedback.ModelDir || got.Feedback.LR != want.Feedback.LR {
					t.Errorf("feedback %+v %+v, preset %+v %+v", *got.Feedback, arch(got.Feedback.Model), *want.Feedback, arch(want.Feedback.Model))
				}
			}
			got.LearnerResources = nil // the recipe's default, the driver's default
			got.Model, want.Model, got.Feedback, want.Feedback = nil, nil, nil, nil
			gl, wl := got.Learner, want.Learner
			if gl.Algorithm != wl.Algorithm || gl.LR != wl.LR || gl.Loss.ClipLow != wl.Loss.ClipLow || gl.Loss.ClipHigh != wl.Loss.ClipHigh || gl.Loss.EntropyCoef != wl.Loss.EntropyCoef ||
				gl.MicroBatchSeqs != wl.MicroBatchSeqs || gl.MaxResponseLen != wl.MaxResponseLen || gl.MaxGradNorm != wl.MaxGradNorm {
				t.Errorf("learner %+v, preset %+v", gl, wl)
			}
			got.Learner, want.Learner = wl, wl
			if !reflect.DeepEqual(got, want) {
				t.Errorf("config\n%+v\npreset\n%+v", got, want)
			}
		})
	}
}

func renderWith(t *testing.T, text string, d TemplateData) string {
	t.Helper()
	tpl, err := template.New("x").Option("missingkey=error").Parse(text)
	if err != nil {
		t.Fatalf("%q: %v", text, err)
	}
	var sb strings.Builder
	if err := tpl.Execute(&sb, d); err != nil {
		t.Fatalf("%q: %v", text, err)
	}
	return sb.String()
}

// arch is what a recipe's model init decides of a model config.
type archKey struct {
	arch                                              string
	hidden, inter, layers, heads, kvHeads, vocab, pos int
	tie                                               bool
}

func arch(m *model.Config) archKey {
	if m == nil {
		return archKey{}
	}
	return archKey{m.Architecture, m.HiddenSize, m.IntermediateSize, m.NumLayers, m.NumHeads, m.NumKVHeads, m.VocabSize, m.MaxPositions, m.TieWordEmbeddings}
}

// Multi-turn recipes with a dataset, a verifier other than math, and ppo
// map onto the driver (they were refused before): mlmt_gsm8k's embedded
// files resolve to absolute paths and load; ppo gives both policies the
// algorithm, and the feedback policy its value head.
func TestFromRecipeMultiTurnDataAndPPO(t *testing.T) {
	for _, c := range []struct {
		recipe   string
		sets     []string
		verifier string
		dataset  bool
		algo     string
	}{
		{"mlmt_gsm8k", nil, VerifierGSM8K, true, "grpo"},
		{"mlmt_gsm8k", []string{"algorithm.name=ppo", "models.policy.value_head=true", "models.feedback.value_head=true"}, VerifierGSM8K, true, "ppo"},
		{"mlmt_math", []string{"algorithm.name=ppo", "models.policy.value_head=true", "models.feedback.value_head=true"}, "", false, "ppo"},
		{"mlmt_math_static", []string{"algorithm.name=ppo", "models.policy.value_head=true"}, "", false, "ppo"},
		{"score_math", []string{"algorithm.name=ppo", "models.policy.value_head=true"}, "", false, "ppo"},
		{"score_math", []string{"data.task=null", "data.dataset.train=train.jsonl", "data.dataset.columns.prompt=question", "data.verifier=gsm8k"}, VerifierGSM8K, true, "grpo"},
	} {
		name := c.recipe + " " + strings.Join(c.sets, " ")
		t.Run(name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			// More rows than the 256 held out for evaluation, which
			// validation checks.
			row := `{"question": "What is 1 + 1?", "answer": "#### 2"}` + "\n"
			if err := os.WriteFile("train.jsonl", []byte(strings.Repeat(row, 300)), 0o644); err != nil {
				t.Fatal(err)
			}
			l, err := recipes.Load(c.recipe, c.sets)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := FromRecipe(l, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Verifier != c.verifier || cfg.Learner.Algorithm != c.algo || (cfg.Dataset != nil) != c.dataset {
				t.Errorf("verifier %q, algorithm %q, dataset %+v; want %q, %q, set %v", cfg.Verifier, cfg.Learner.Algorithm, cfg.Dataset, c.verifier, c.algo, c.dataset)
			}
			if cfg.Dataset != nil && c.recipe == "mlmt_gsm8k" {
				for _, p := range []string{cfg.Dataset.Train, cfg.Dataset.Eval} {
					if !filepath.IsAbs(p) {
						t.Errorf("%q is not absolute", p)
					}
					ex, err := data.Load(p, cfg.Dataset.Mapping)
					if err != nil || len(ex) == 0 || !strings.HasPrefix(ex[0].Ref.Answer, "#### ") {
						t.Errorf("load %s: %d rows, %v", p, len(ex), err)
					}
				}
			}
		})
	}
}

// algorithm.mlmt.train says which MLMT policies train in RL: without
// solver the driver freezes it (FreezeSolver), without feedback the
// feedback policy is frozen (Feedback.Train false).
func TestFromRecipeMLMTTrain(t *testing.T) {
	for _, c := range []struct {
		train                      string
		freezeSolver, trainFeedbck bool
	}{
		{"[solver, feedback]", false, true},
		{"[feedback]", true, true},
		{"[solver]", false, false},
	} {
		l, err := recipes.Load("mlmt_math", []string{"algorithm.mlmt.train=" + c.train})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := FromRecipe(l, t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", c.train, err)
		}
		if cfg.FreezeSolver != c.freezeSolver || cfg.Feedback == nil || cfg.Feedback.Train != c.trainFeedbck {
			t.Errorf("train %s: freeze solver %v, feedback %+v; want %v and train %v", c.train, cfg.FreezeSolver, cfg.Feedback, c.freezeSolver, c.trainFeedbck)
		}
	}
}

// sync.mode async maps for multi-turn recipes: the staleness bound, and
// rollout actors for the solver and (MLMT) the feedback policy, which
// asynchronous runs generate on.
func TestFromRecipeMultiTurnAsync(t *testing.T) {
	for _, c := range []struct {
		recipe   string
		feedback bool
	}{{"mlmt_math", true}, {"mlmt_math_static", false}, {"score_math", false}, {"mlmt_gsm8k", true}} {
		l, err := recipes.Load(c.recipe, []string{"deterministic=false", "sync.mode=async", "sync.max_staleness=2"})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := FromRecipe(l, t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", c.recipe, err)
		}
		if cfg.MaxStaleness != 2 || cfg.Rollout == nil || (cfg.FeedbackRollout != nil) != c.feedback {
			t.Errorf("%s: max staleness %d, rollout %+v, feedback rollout %+v; want 2, set, set %v", c.recipe, cfg.MaxStaleness, cfg.Rollout, cfg.FeedbackRollout, c.feedback)
		}
	}
}

// The multi-turn recipes run what they map to, shrunk to seconds:
// mlmt_gsm8k on its embedded files (from a directory that is not the
// repository's), with ppo, and mlmt_math and score_math asynchronous on
// rollout actors.
func TestMultiTurnRecipesRun(t *testing.T) {
	tiny := func(feedback bool) []string {
		s := []string{"models.policy.init.hidden_size=32", "models.policy.init.intermediate_size=64", "models.policy.init.layers=1",
			"sft.steps=2", "sft.batch_size=8", "schedule.steps=2", "schedule.eval_every=2", "eval.held_out=8",
			"algorithm.batch_prompts=4", "algorithm.group_size=4"}
		if feedback {
			s = append(s, "models.feedback.init.hidden_size=32", "models.feedback.init.intermediate_size=64", "models.feedback.init.layers=1")
		}
		return s
	}
	ppo := []string{"algorithm.name=ppo", "models.policy.value_head=true", "models.feedback.value_head=true"}
	async := []string{"deterministic=false", "sync.mode=async"}
	for _, c := range []struct {
		name, recipe string
		sets         []string
		lag          bool // weight_lag may be 1
	}{
		{"mlmt_gsm8k", "mlmt_gsm8k", tiny(true), false},
		{"mlmt_gsm8k-ppo", "mlmt_gsm8k", append(tiny(true), ppo...), false},
		{"mlmt_math-async", "mlmt_math", append(tiny(true), async...), true},
		{"score_math-async", "score_math", append(tiny(false), async...), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("RLNODE_HOME", t.TempDir())
			t.Chdir(t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg, out := loadRun(t, c.recipe, c.sets)
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Steps != 4 || res.FinalTurns.Problems != 8 {
				t.Fatalf("%d steps, %d problems evaluated; want 4 and 8", res.Steps, res.FinalTurns.Problems)
			}
			js, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(js), "\n"); n != 4 {
				t.Errorf("metrics.jsonl has %d lines, want 4", n)
			}
			if !c.lag && strings.Contains(string(js), `"weight_lag":1`) {
				t.Errorf("a synchronous run logged a weight lag of 1")
			}
		})
	}
}
