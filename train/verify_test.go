package train

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/verify"
)

func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skipf("code verifier needs /usr/bin/python3: %v", err)
	}
}

// verifyAll keeps job order whatever the worker count.
func TestVerifyAllOrder(t *testing.T) {
	var jobs []verifyJob
	var want []float64
	for i := range 50 {
		text, w := `\boxed{1}`, 1.0
		if i%3 == 0 {
			text, w = `\boxed{2}`, 0
		}
		jobs = append(jobs, verifyJob{text, verify.Reference{Answer: "1"}})
		want = append(want, w)
	}
	for _, workers := range []int{1, 4, 100} {
		res, err := verifyAll(context.Background(), verify.Math{}, workers, jobs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Reward != want[i] {
				t.Errorf("workers %d: job %d reward %v, want %v", workers, i, r.Reward, want[i])
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := verifyAll(ctx, verify.Math{}, 4, jobs); err == nil {
		t.Errorf("cancelled context: no error")
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
	jobs := []verifyJob{
		{"def f(x):\n    return x * 2\n", ref},
		{"```python\ndef f(x):\n    return x + 2\n```", ref},
		{"def f(x):\n    while True:\n        pass\n", ref},
		{"while True:\n    pass\n", ref},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := verifyAll(ctx, v, 3, jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{1, 0.5, 0, 0} {
		if res[i].Reward != want {
			t.Errorf("job %d: %+v, want reward %v", i, res[i], want)
		}
	}
	if res[3].Error == "" {
		t.Errorf("the hanging program has no error note: %+v", res[3])
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
