package train

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/verify"
)

func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skipf("code verifier needs /usr/bin/python3: %v", err)
	}
}

// The run's code verifier: a right program passes, a wrong one fails, and
// a hanging one is stopped by the sandbox's limits and scores 0 (the
// others of the batch are scored meanwhile).
func TestCodeVerifier(t *testing.T) {
	needPython(t)
	v, err := newVerifier(Config{Verifier: VerifierCode, VerifyWorkers: 3})
	if err != nil {
		t.Fatal(err)
	}
	ref := verify.Reference{Tests: []string{"assert f(2) == 4", "assert f(0) == 0"}}
	jobs := []episode.Answer{
		{Text: "def f(x):\n    return x * 2\n", Ref: ref},
		{Text: "```python\ndef f(x):\n    return x + 2\n```", Ref: ref},
		{Text: "def f(x):\n    while True:\n        pass\n", Ref: ref},
		{Text: "while True:\n    pass\n", Ref: ref},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, notes, err := episode.ScoreAll(ctx, v, 3, episode.Limits{}, jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{1, 0.5, 0, 0} {
		if res[i] != want {
			t.Errorf("job %d: reward %v (%s), want %v", i, res[i], notes[i], want)
		}
	}
	if notes[3] == "" {
		t.Errorf("the hanging program has no error note")
	}
}

// A few steps of a code run: SFT on the reference programs, GRPO with the
// sandboxed verifier, evaluation on the held-out rows.
func TestCodeRun(t *testing.T) {
	needPython(t)
	rows := []map[string]any{}
	for _, p := range []struct{ name, code, test string }{
		{"double", "def double(x):\n    return 2 * x", "assert double(3) == 6"},
		{"neg", "def neg(x):\n    return -x", "assert neg(3) == -3"},
		{"inc", "def inc(x):\n    return x + 1", "assert inc(3) == 4"},
		{"sq", "def sq(x):\n    return x * x", "assert sq(3) == 9"},
		{"first", "def first(xs):\n    return xs[0]", "assert first([3, 1]) == 3"},
		{"last", "def last(xs):\n    return xs[-1]", "assert last([3, 1]) == 1"},
	} {
		rows = append(rows, map[string]any{"text": "Write " + p.name + ".", "code": p.code, "test_list": []string{p.test}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	c := tinyRun(out)
	c.Dataset = &Dataset{Train: writeJSONL(t, rows), Mapping: data.Mapping{Prompt: "text", Answer: "code", Tests: "test_list"}}
	c.Verifier = VerifierCode
	c.AnswerTemplate = "{{.Answer}}"
	c.PromptTemplate = "{{.Question}}\n"
	m := *c.Model
	m.MaxPositions = 64
	c.Model = &m
	c.MaxTokens, c.Learner.MaxResponseLen = 32, 32
	c.WarmupBatch, c.EvalProblems = 4, 2
	res, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 5 || res.EvalProblems != 2 {
		t.Errorf("result %+v: want 5 steps, 2 eval problems", res)
	}
	lines := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
	if len(lines) != 5 {
		t.Fatalf("%d metrics lines, want 5", len(lines))
	}
	for _, l := range lines[2:] {
		r, ok := l["reward_mean"].(float64)
		if !ok || r < 0 || r > 1 {
			t.Errorf("step %v: reward_mean %v", l["step"], l["reward_mean"])
		}
	}
	ev, err := EvaluateSingleCheckpoint(ctx, c, filepath.Join(out, "checkpoints", "step-5"))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Problems != 2 || ev.Accuracy != lines[4]["eval_accuracy"] {
		t.Errorf("checkpoint evaluation %+v, the run's last eval_accuracy %v on 2 problems", ev, lines[4]["eval_accuracy"])
	}
}
