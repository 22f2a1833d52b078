package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rlnode eval --data FILE evaluates on a file alone (here MATH.csv's
// shape), its columns mapped with --set; a column the file lacks is named.
func TestEvalData(t *testing.T) {
	home := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":32,"intermediate_size":64,
		"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":800,"max_position_embeddings":128,
		"tie_word_embeddings":true,"torch_dtype":"float32","bos_token_id":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "model")
	if _, stderr, code := runRlnode(t, home, "model", "init", "--config", cfg, "--out", model); code != 0 {
		t.Fatalf("model init: exit %d: %s", code, stderr)
	}
	file := filepath.Join(t.TempDir(), "MATH.csv")
	if err := os.WriteFile(file, []byte("problem,solution,answer,subject,level\n"+
		"\"What is 1+1, exactly?\",\"$\\boxed{2}$\",2,Algebra,Level 1\n"+
		"What is 2+3?,\"$\\boxed{5}$\",5,Prealgebra,Level 2\n"+
		"What is 7-4?,\"$\\boxed{3}$\",3,Prealgebra,Level 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "eval.json")
	stdout, stderr, code := runRlnode(t, home, "eval", "--model", model, "--recipe", "quickstart", "--data", file,
		"--set", "data.dataset.columns.prompt=problem", "--set", "eval.held_out=3", "--out", out)
	if code != 0 {
		t.Fatalf("rlnode eval --data: exit %d\n%s%s", code, stdout, stderr)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res evalResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.Problems != 3 || !strings.Contains(stderr, "/3 held-out problems, greedy") {
		t.Errorf("%d problems; report:\n%s", res.Problems, stderr)
	}

	// --group-by: MATH-500's subject and level, a table and "groups"; an
	// untrained model scores what it scores, but every problem is counted
	// once per column and the groups' accuracies add up to the whole.
	stdout, stderr, code = runRlnode(t, home, "eval", "--model", model, "--recipe", "quickstart", "--data", file,
		"--set", "data.dataset.columns.prompt=problem", "--set", "eval.held_out=3", "--group-by", "subject, level")
	if code != 0 {
		t.Fatalf("rlnode eval --group-by: exit %d\n%s%s", code, stdout, stderr)
	}
	var grouped evalResult
	if err := json.Unmarshal([]byte(stdout), &grouped); err != nil {
		t.Fatal(err)
	}
	want := []string{"subject Algebra 1", "subject Prealgebra 2", "level Level 1 2", "level Level 2 1"}
	var got []string
	var sum [2]float64
	for _, g := range grouped.Groups {
		got = append(got, fmt.Sprintf("%s %s %d", g.Column, g.Value, g.Problems))
		if g.Column == "subject" {
			sum[0] += g.Accuracy * float64(g.Problems)
		} else {
			sum[1] += g.Accuracy * float64(g.Problems)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("groups %v, want %v", got, want)
	}
	if whole := grouped.Accuracy * 3; math.Abs(sum[0]-whole) > 1e-9 || math.Abs(sum[1]-whole) > 1e-9 {
		t.Errorf("groups hold %v correct answers, the whole %v", sum, whole)
	}
	if !strings.Contains(stderr, "COLUMN") || !strings.Contains(stderr, "Prealgebra") || !strings.Contains(stderr, "Level 2") {
		t.Errorf("no table on stderr:\n%s", stderr)
	}

	_, stderr, code = runRlnode(t, home, "eval", "--model", model, "--recipe", "quickstart", "--data", file,
		"--set", "data.dataset.columns.prompt=problem", "--set", "eval.held_out=3", "--group-by", "topic")
	if code == 0 || !strings.Contains(stderr, `column "topic": not in the header`) {
		t.Errorf("--group-by a column the file lacks: exit %d\n%s", code, stderr)
	}

	_, stderr, code = runRlnode(t, home, "eval", "--model", model, "--recipe", "quickstart", "--data", file, "--set", "eval.held_out=3")
	if code == 0 || !strings.Contains(stderr, `column "prompt": not in the header`) || !strings.Contains(stderr, "MATH.csv") {
		t.Errorf("unmapped prompt column: exit %d\n%s", code, stderr)
	}
}
