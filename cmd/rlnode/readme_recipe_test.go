package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeRecipe is README's own-recipe example: the yaml block that starts
// "# my_mlmt.yaml".
func readmeRecipe(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(# my_mlmt\\.yaml\n.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md: no yaml block starting \"# my_mlmt.yaml\"")
	}
	return string(m[1])
}

// writeReadmeRecipe writes README's own-recipe example into dir as
// my_mlmt.yaml, beside the pick.jsonl it names: rows shaped as README's
// example line, the hint naming which of three numbers is the answer.
func writeReadmeRecipe(t *testing.T, dir string) string {
	t.Helper()
	var rows strings.Builder
	ords := []string{"1st", "2nd", "3rd"}
	for i := 0; i < 60; i++ {
		nums := []int{10 + i, 40 + i%37, 3 + i%5}
		k := i % 3
		line, err := json.Marshal(map[string]string{
			"question": fmt.Sprintf("Pick: %d %d %d", nums[0], nums[1], nums[2]), "answer": fmt.Sprint(nums[k]), "hint": ords[k]})
		if err != nil {
			t.Fatal(err)
		}
		rows.Write(append(line, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, "pick.jsonl"), []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "my_mlmt.yaml")
	if err := os.WriteFile(path, []byte(readmeRecipe(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReadmeRecipeExample: README's own recipe validates, runs, and its
// run folder evaluates per turn, as README says; the typo and the
// missing column README names are reported as it shows them.
func TestReadmeRecipeExample(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	recipe := writeReadmeRecipe(t, dir)
	if out, errOut, code := runRlnode(t, home, "recipe", "validate", recipe); code != 0 || !strings.Contains(out, "mlmt episodes, 40 SFT warm-up steps, then 20 RL steps") {
		t.Fatalf("recipe validate: exit %d\n%s%s", code, out, errOut)
	}
	text := readFileAt(t, recipe)
	for _, c := range []struct{ from, to, want string }{
		{"group_size: 4", "group_sise: 4", `: algorithm.group_sise: unknown key "group_sise" (did you mean "group_size"?)`},
		{"hint: hint}", "hint: hnt}", `: data.dataset.columns.hint: `},
		{"hint: hint}", "hint: hnt}", `pick.jsonl: line 1: row 0: column "hnt": no field "hnt" (it has "answer", "hint", "question")`},
		{"prompt: question,", "prompt: questoin,", `: data.dataset.columns.prompt: `},
	} {
		bad := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(bad, []byte(strings.Replace(string(text), c.from, c.to, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := runRlnode(t, home, "recipe", "validate", bad); code != 1 || !strings.Contains(errOut, "bad.yaml:") || !strings.Contains(errOut, c.want) {
			t.Errorf("validate with %s: exit %d, want %q in\n%s", c.to, code, c.want, errOut)
		}
	}
	run := filepath.Join(t.TempDir(), "run")
	if out, errOut, code := runRlnode(t, home, "run", recipe, "--out", run, "--set", "sft.steps=4", "--set", "schedule.steps=2",
		"--set", "schedule.eval_every=2", "--set", "schedule.checkpoint_every=2"); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := runRlnode(t, home, "eval", "--model", run)
	var res struct {
		Problems int `json:"problems"`
		Turns    struct {
			Episode  string `json:"episode"`
			Problems int    `json:"problems"`
		} `json:"turns"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Problems != 20 || res.Turns.Episode != "mlmt" || res.Turns.Problems != 20 {
		t.Fatalf("eval --model RUN: exit %d, %+v\n%s%s", code, res, out, errOut)
	}
}
