package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sampledEval asks for 4 seeded answers per held-out problem.
var sampledEval = []string{"--set", "eval.samples=4", "--set", "eval.temperature=1", "--set", "eval.pass_k=[1,2,4]"}

// rlnode run with a sampled evaluation writes mean@4, pass@k and maj@4 to
// metrics.jsonl; rlnode eval on the last checkpoint with the same eval
// settings prints them and writes the run's figures (the same seeds).
func TestEvalSampledCheckpoint(t *testing.T) {
	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "run")
	// An easy dataset (the answer is the question's first digit) and a
	// tiny model: after 150 SFT steps sampled answers are right now and
	// then, so the figures are not all 0.
	var rows strings.Builder
	for i := range 96 {
		a := i%2 + 1
		fmt.Fprintf(&rows, "{\"prompt\": \"%d%d%d\", \"answer\": \"%d\"}\n", a, i%7, i%5, a)
	}
	train := filepath.Join(t.TempDir(), "easy.jsonl")
	if err := os.WriteFile(train, []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	easy := []string{"--set", "data.task=null", "--set", "data.dataset.train=" + train, "--set", "eval.held_out=16",
		"--set", "models.policy.init.hidden_size=32", "--set", "models.policy.init.intermediate_size=64", "--set", "models.policy.init.layers=1"}
	args := append(append(append([]string{"run", "quickstart", "--out", dir}, tinyRun...), sampledEval...), append(easy, "--set", "sft.steps=150")...)
	stdout, stderr, code := runRlnode(t, home, args...)
	if code != 0 {
		t.Fatalf("rlnode run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	last := lastMetrics(t, filepath.Join(dir, "metrics.jsonl"))
	for _, k := range []string{"eval_accuracy", "eval_samples", "eval_temperature", "eval_pass_at_1", "eval_pass_at_2", "eval_pass_at_4", "eval_maj_at_4"} {
		if _, ok := last[k].(float64); !ok {
			t.Errorf("metrics.jsonl's last line: %s = %v, want a number", k, last[k])
		}
	}
	out := filepath.Join(t.TempDir(), "eval.json")
	ck := filepath.Join(dir, "checkpoints", "step-153")
	stdout, stderr, code = runRlnode(t, home, append(append([]string{"eval", "--model", ck, "--recipe", "quickstart", "--out", out}, sampledEval...), easy...)...)
	if code != 0 {
		t.Fatalf("rlnode eval: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{"mean@4", "answers correct on 16 held-out problems, 4 samples each at temperature 1", "pass@1 ", "pass@2 ", "pass@4 ", "maj@4 "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("rlnode eval's report lacks %q:\n%s", want, stderr)
		}
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res evalResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	s := res.Sampled
	if s == nil || s.Samples != 4 || s.Temperature != 1 || len(s.PassAt) != 3 || s.Majority == nil {
		t.Fatalf("eval JSON %s", raw)
	}
	for _, c := range []struct {
		key string
		got float64
	}{
		{"eval_accuracy", res.Accuracy}, {"eval_pass_at_1", s.PassAt[1]}, {"eval_pass_at_2", s.PassAt[2]},
		{"eval_pass_at_4", s.PassAt[4]}, {"eval_maj_at_4", *s.Majority},
	} {
		if last[c.key] != c.got {
			t.Errorf("eval %s %v; the run's last evaluation %v", c.key, c.got, last[c.key])
		}
	}
	if !(s.PassAt[4] > 0) {
		t.Errorf("pass@4 %v: want above 0 (the dataset is meant to be half learned)", s.PassAt[4])
	}
	if !strings.Contains(string(raw), `"pass_at_4":`) || !strings.Contains(string(raw), `"maj_at_4":`) {
		t.Errorf("eval JSON lacks the flat pass_at_4 / maj_at_4 keys:\n%s", raw)
	}
	t.Logf("rlnode eval: %s", strings.TrimSpace(stderr))

	// Greedy with more than one sample is refused, naming both fields.
	_, stderr, code = runRlnode(t, home, "eval", "--model", ck, "--recipe", "quickstart", "--set", "eval.samples=4")
	if code == 0 || !strings.Contains(stderr, "eval.samples") || !strings.Contains(stderr, "eval.temperature") {
		t.Errorf("eval.samples=4 at temperature 0: exit %d\n%s", code, stderr)
	}
}
