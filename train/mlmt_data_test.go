package train

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

// pickRows are n pick problems as dataset rows: the answer is the
// candidate the hint column names, which only the feedback policy sees.
func pickRows(n int) []map[string]any {
	pos := []string{"1st", "2nd", "3rd"}
	rows := make([]map[string]any, n)
	for i := range rows {
		c := []int{i%7 + 1, i%5 + 10, i%3 + 20}
		k := (i / 3) % 3
		rows[i] = map[string]any{"q": fmt.Sprintf("Pick: %d %d %d", c[0], c[1], c[2]), "a": fmt.Sprint(c[k]), "h": pos[k]}
	}
	return rows
}

// tinyMLMTData is tinyMLMT drawing its problems from a dataset file with
// a hint column h.
func tinyMLMTData(out, train string) Config {
	c := tinyMLMT(out)
	c.Task = task.Config{}
	c.Dataset = &Dataset{Train: train, Mapping: data.Mapping{Prompt: "q", Answer: "a"}, HintColumn: "h"}
	return c
}

// fakeEngine answers every request with the same text and records the
// prompts it was given.
type fakeEngine struct {
	tok    *tokenizer.Tokenizer
	answer string
	mu     sync.Mutex
	seen   []string
}

func (f *fakeEngine) Generate(_ context.Context, reqs []engine.Request) ([]engine.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]engine.Result, len(reqs))
	for i, rq := range reqs {
		f.seen = append(f.seen, f.tok.Decode(rq.Prompt))
		ids := f.tok.Encode(f.answer)
		out[i] = engine.Result{RequestID: rq.ID, PromptTokenIDs: rq.Prompt}
		for range max(rq.Params.N, 1) {
			out[i].Samples = append(out[i].Samples, engine.Sample{TokenIDs: ids, LogProbs: make([]float32, len(ids)), Text: f.answer})
		}
	}
	return out, nil
}
func (f *fakeEngine) WeightVersion() int64 { return 0 }
func (f *fakeEngine) Close() error         { return nil }

// The feedback policy's prompt shows each problem's own hint from the
// dataset's hint column, for training and held-out problems alike; the
// solver's prompts never do.
func TestMLMTDatasetHintReachesFeedback(t *testing.T) {
	rows := pickRows(30)
	cfg := tinyMLMTData(t.TempDir(), writeJSONL(t, rows))
	tpl, err := cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	src, err := newSource(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	held, err := src.heldOut(cfg.EvalProblems)
	if err != nil {
		t.Fatal(err)
	}
	var probs []task.Problem
	for i := range 12 {
		p, err := src.train(i)
		if err != nil {
			t.Fatal(err)
		}
		probs = append(probs, p)
	}
	probs = append(probs, held...)
	tok, err := tokenizer.BuiltinSized(cfg.Model.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	solver := &fakeEngine{tok: tok, answer: `\boxed{1}`}
	fb := &fakeEngine{tok: tok, answer: " take it"}
	pol := func(id string, e *fakeEngine) *episode.Policy {
		return &episode.Policy{ID: id, Engine: e, Params: engine.SamplingParams{MaxTokens: 4}, Tokenizer: tok}
	}
	run := player{cfg: &cfg, tpl: tpl, verifier: verify.Math{}}.runner(*pol("solver", solver), pol("feedback", fb))
	if _, err := run.Run(context.Background(), episode.Batch{Examples: examplesOf(src, probs), N: 2}); err != nil {
		t.Fatal(err)
	}
	if len(fb.seen) != 2*len(probs) {
		t.Fatalf("%d feedback prompts, want %d", len(fb.seen), 2*len(probs))
	}
	for j, prompt := range fb.seen {
		p := probs[j/2]
		var row int
		if _, err := fmt.Sscanf(p.ID, "train/%d", &row); err != nil {
			t.Fatalf("problem id %q: %v", p.ID, err)
		}
		want := "hint: " + rows[row]["h"].(string) + "\n"
		if p.Hint != rows[row]["h"] || !strings.Contains(prompt, want) || !strings.Contains(prompt, p.Question) {
			t.Errorf("problem %s (row %d, hint %q): feedback prompt %q, want it to show %q", p.ID, row, p.Hint, prompt, want)
		}
	}
	for _, prompt := range solver.seen {
		if strings.Contains(prompt, "hint") || strings.Contains(prompt, "1st") || strings.Contains(prompt, "2nd") {
			t.Errorf("a solver prompt shows the hint: %q", prompt)
		}
	}
}

// Each turn is scored by the run's verifier: against GSM8K-style worked
// answers ("... #### 7"), "#### 7" is right for gsm8k and wrong for math
// (which compares with the whole reference), on both turns.
func TestMultiTurnTurnsUseRunVerifier(t *testing.T) {
	rows := make([]map[string]any, 20)
	for i := range rows {
		rows[i] = map[string]any{"q": fmt.Sprintf("What is %d + %d?", i, 7-i), "a": fmt.Sprintf("%d + %d = 7\n#### 7", i, 7-i)}
	}
	train := writeJSONL(t, rows)
	for _, tc := range []struct {
		verifier string
		want     float64
	}{{VerifierGSM8K, 1}, {VerifierMath, 0}} {
		cfg := tinyMLMT(t.TempDir())
		cfg.Task, cfg.Dataset, cfg.Verifier = task.Config{}, &Dataset{Train: train, Mapping: data.Mapping{Prompt: "q", Answer: "a"}}, tc.verifier
		cfg.FeedbackTemplate, cfg.FeedbackAnswerTemplate, cfg.RefineFeedbackTemplate = "{{.Question}}\ntry: {{.Attempt}}\nfeedback:", " again", ""
		te := evalOnFake(t, context.Background(), cfg, "#### 7", 4)
		if te.Turn1 != tc.want || te.Final != tc.want {
			t.Errorf("verifier %s: turn-1 %v, turn-3 %v; want %v both", tc.verifier, te.Turn1, te.Final, tc.want)
		}
	}
}

// MLMT on a dataset end to end: the turn metrics, a checkpoint that
// evaluates alone as the run did, a data cursor that counts the problems
// drawn, and a run resumed from step 4 that reaches the uninterrupted
// run's weights for both policies.
func TestMLMTDatasetRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	train := writeJSONL(t, pickRows(40))
	full := t.TempDir()
	cfg := tinyMLMTData(full, train)
	cfg.Steps, cfg.CheckpointEvery = 3, 1
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 5 || res.EvalProblems != 8 {
		t.Fatalf("%d steps, %d held-out problems; want 5 and 8", res.Steps, res.EvalProblems)
	}
	lines := readMetrics(t, filepath.Join(full, "metrics.jsonl"))
	if len(lines) != 5 {
		t.Fatalf("%d metrics lines, want 5", len(lines))
	}
	last := lines[4]
	for _, k := range []string{"turn1_accuracy", "turn3_accuracy", "turn3_accuracy_static", "feedback_loss", "turn1_reward_mean"} {
		if _, ok := last[k].(float64); !ok {
			t.Errorf("last step: %s = %v", k, last[k])
		}
	}
	ds, err := readDriverState(filepath.Join(full, "checkpoints", "step-4"), cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2*8 + 2*4; ds.TrainCursor != want {
		t.Errorf("step-4 train cursor %d, want %d", ds.TrainCursor, want)
	}
	te, err := EvaluateCheckpoint(ctx, tinyMLMTData(t.TempDir(), train), filepath.Join(full, "checkpoints", "step-5"))
	if err != nil {
		t.Fatal(err)
	}
	if te.Problems != 8 || te.Turn1 != last["turn1_accuracy"] || te.Final != last["turn3_accuracy"] {
		t.Errorf("checkpoint evaluation %+v; the run's last evaluation %v", te, last)
	}

	resumed := t.TempDir()
	rc := tinyMLMTData(resumed, train)
	rc.Steps, rc.CheckpointEvery = 3, 1
	rc.Resume = filepath.Join(full, "checkpoints", "step-4")
	if _, err := Run(ctx, rc); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"", FeedbackDir} {
		a := weightsOf(t, filepath.Join(full, "checkpoints", "step-5", sub))
		b := weightsOf(t, filepath.Join(resumed, "checkpoints", "step-5", sub))
		if !sameWeights(a, b) {
			t.Errorf("%q: the resumed run's weights differ from the uninterrupted run's", sub)
		}
	}
}

// Bad multi-turn dataset input stops the run before anything starts (no
// run directory), naming the file, the row and the column.
func TestMLMTDatasetRefusesBadInput(t *testing.T) {
	good := pickRows(20)
	noHint := pickRows(20)
	delete(noHint[3], "h")
	noHintPath := writeJSONL(t, noHint)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"hint column missing in a row", func(c *Config) { c.Dataset.Train = noHintPath }, []string{noHintPath, "line 4", "row 3", `"h"`, ".Hint"}},
		{"hint column named wrong", func(c *Config) { c.Dataset.HintColumn = "hints" }, []string{"row 0", `"hints"`, ".Hint"}},
		{"hint column missing in the eval file", func(c *Config) { c.Dataset.Eval = noHintPath }, []string{"eval", noHintPath, `"h"`}},
		{"answer column", func(c *Config) { c.Dataset.Mapping.Answer = "answer" }, []string{"row 0", `"answer"`}},
		{"score", func(c *Config) {
			c.Episode, c.Feedback, c.ReviewTemplate = EpisodeSCoRe, nil, "again"
			c.Dataset.Train = noHintPath
			c.Dataset.Mapping.Answer = "h" // missing in row 3
		}, []string{noHintPath, "row 3", `"h"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			c := tinyMLMTData(out, writeJSONL(t, good))
			tc.edit(&c)
			refusedBeforeStart(t, c, out, tc.want)
		})
	}
}

// codeRows are code problems all solved by one program (double), but the
// last, whose test wants something else.
func codeRows() []map[string]any {
	var rows []map[string]any
	for i := range 6 {
		test := fmt.Sprintf("assert double(%d) == %d", i, 2*i)
		if i == 5 {
			test = "assert double(1) == 3"
		}
		rows = append(rows, map[string]any{"text": fmt.Sprintf("Write double, case %d.", i), "code": "def double(x):\n    return 2 * x", "test_list": []string{test}})
	}
	return rows
}

func codeMLMT(out, train string) Config {
	c := tinyMLMT(out)
	c.Task = task.Config{}
	c.Dataset = &Dataset{Train: train, Eval: train, Mapping: data.Mapping{Prompt: "text", Answer: "code", Tests: "test_list"}}
	c.Verifier = VerifierCode
	c.FeedbackTemplate, c.FeedbackAnswerTemplate, c.RefineFeedbackTemplate = "{{.Question}}\ntry: {{.Attempt}}\nfeedback:", " again", ""
	c.AnswerTemplate = "{{.Answer}}"
	c.MaxTokens, c.Learner.MaxResponseLen = 16, 16
	c.EvalProblems = 6
	return c
}

// MLMT with the code verifier: both solver turns of every held-out
// problem run in the sandbox (the one program passes 5 of the 6 problems'
// tests), and a short run trains and evaluates with it.
func TestMLMTCodeVerifier(t *testing.T) {
	needPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	train := writeJSONL(t, codeRows())
	cfg := codeMLMT(t.TempDir(), train)
	te := evalOnFake(t, ctx, cfg, "def double(x):\n    return 2 * x", 6)
	if want := 5.0 / 6; math.Abs(te.Turn1-want) > 1e-9 || math.Abs(te.Final-want) > 1e-9 {
		t.Errorf("turn-1 %v, turn-3 %v; want %v both", te.Turn1, te.Final, want)
	}

	cfg = codeMLMT(t.TempDir(), train)
	cfg.Steps, cfg.PromptsPerStep, cfg.GroupSize = 1, 2, 2
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lines := readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))
	if res.Steps != 3 || len(lines) != 3 {
		t.Fatalf("%d steps, %d metrics lines; want 3", res.Steps, len(lines))
	}
	for _, k := range []string{"reward_mean", "turn1_reward_mean", "turn1_accuracy", "turn3_accuracy"} {
		if x, ok := lines[2][k].(float64); !ok || x < 0 || x > 1 {
			t.Errorf("RL step: %s = %v", k, lines[2][k])
		}
	}
}

// evalOnFake evaluates cfg's first n held-out problems, every turn
// scored by the run's verifier, with both policies answering answer.
func evalOnFake(t *testing.T, ctx context.Context, cfg Config, answer string, n int) TurnEval {
	t.Helper()
	tpl, err := cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	src, err := newSource(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := newVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := tokenizer.BuiltinSized(cfg.Model.VocabSize)
	eng := &policyEngine{Engine: &fakeEngine{tok: tok, answer: answer}, tok: tok}
	probs, _ := src.heldOut(n)
	te, err := evalTurns(ctx, cfg, tpl, eng, eng, src, probs, v)
	if err != nil {
		t.Fatal(err)
	}
	return te
}
