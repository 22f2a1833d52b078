package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyMLMT is mlmt_math at a size that runs in seconds.
var tinyMLMT = []string{
	"--set", "models.policy.init.hidden_size=32", "--set", "models.policy.init.intermediate_size=64", "--set", "models.policy.init.layers=1",
	"--set", "models.feedback.init.hidden_size=32", "--set", "models.feedback.init.intermediate_size=64", "--set", "models.feedback.init.layers=1",
	"--set", "sft.steps=2", "--set", "sft.batch_size=8", "--set", "schedule.steps=2", "--set", "schedule.eval_every=2",
	"--set", "schedule.checkpoint_every=2", "--set", "eval.held_out=8", "--set", "algorithm.batch_prompts=4", "--set", "algorithm.group_size=4",
}

// rlnode run mlmt_math, then rlnode eval on its checkpoint: the per-turn
// figures equal the run's last evaluation (same problems, same weights);
// without the feedback policy's directory eval says what is missing.
func TestEvalMLMTCheckpoint(t *testing.T) {
	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "run")
	stdout, stderr, code := runRlnode(t, home, append([]string{"run", "mlmt_math", "--out", dir}, tinyMLMT...)...)
	if code != 0 {
		t.Fatalf("rlnode run mlmt_math: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	last := lastMetrics(t, filepath.Join(dir, "metrics.jsonl"))
	ck := filepath.Join(dir, "checkpoints", "step-4")
	out := filepath.Join(t.TempDir(), "eval.json")
	stdout, stderr, code = runRlnode(t, home, "eval", "--model", ck, "--recipe", "mlmt_math", "--set", "eval.held_out=8", "--out", out)
	if code != 0 {
		t.Fatalf("rlnode eval: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"turn 1 accuracy", "turn 3 accuracy", "incorrect→correct", "static feedback text"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("rlnode eval's report lacks %q:\n%s", want, stderr)
		}
	}
	var res evalResult
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	te := res.Turns
	if te == nil || te.Problems != 8 || res.Accuracy != te.Final {
		t.Fatalf("eval: %+v turns %+v", res, te)
	}
	for _, c := range []struct {
		key string
		got float64
	}{
		{"turn1_accuracy", te.Turn1}, {"turn3_accuracy", te.Final}, {"turn3_accuracy_static", te.FinalStatic},
		{"delta", te.Delta}, {"incorrect_to_correct", te.IncorrectToCorrect}, {"correct_to_incorrect", te.CorrectToIncorrect},
	} {
		if last[c.key] != c.got {
			t.Errorf("eval %s %v; the run's last evaluation %v", c.key, c.got, last[c.key])
		}
	}

	// Sampled: every turn over 4 episodes per problem, pass@k and maj@n
	// of the final answer.
	stdout, stderr, code = runRlnode(t, home, append([]string{"eval", "--model", ck, "--recipe", "mlmt_math", "--set", "eval.held_out=8"}, sampledEval...)...)
	if code != 0 {
		t.Fatalf("rlnode eval, sampled: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"on 8 held-out problems, 4 samples each at temperature 1", "over all 32 episodes", "mean@4", "pass@4 ", "maj@4 "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("rlnode eval's sampled report lacks %q:\n%s", want, stderr)
		}
	}
	var sampled evalResult
	if err := json.Unmarshal([]byte(stdout), &sampled); err != nil || sampled.Turns == nil || sampled.Turns.Sampled == nil || sampled.Sampled == nil {
		t.Errorf("rlnode eval, sampled: JSON %v\n%s", err, stdout)
	}

	// The static baseline evaluates the same solver with the static text.
	if _, stderr, code := runRlnode(t, home, "eval", "--model", ck, "--recipe", "mlmt_math_static", "--set", "eval.held_out=8"); code != 0 {
		t.Errorf("rlnode eval --recipe mlmt_math_static: exit %d\n%s", code, stderr)
	}
	if err := os.RemoveAll(filepath.Join(ck, "feedback")); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runRlnode(t, home, "eval", "--model", ck, "--recipe", "mlmt_math")
	if code == 0 || !strings.Contains(stderr, "feedback") || !strings.Contains(stderr, ck) {
		t.Errorf("eval without the feedback policy: exit %d, stderr:\n%s", code, stderr)
	}
}

func lastMetrics(t *testing.T, path string) map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		last = nil
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if last == nil {
		t.Fatalf("%s: no metrics", path)
	}
	return last
}
