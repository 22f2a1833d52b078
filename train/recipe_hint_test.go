package train

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/rlnode/rlnode/recipes"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/task"
)

// writeHintRows writes n pick-style rows whose hint sits in column col
// (none when col is empty) to path.
func writeHintRows(t *testing.T, path, col string, n int) {
	t.Helper()
	pos := []string{"1st", "2nd", "3rd"}
	var b strings.Builder
	for i := range n {
		c := []int{i%7 + 1, i%5 + 10, i%3 + 20}
		k := (i / 3) % 3
		row := map[string]any{"question": fmt.Sprintf("Pick: %d %d %d", c[0], c[1], c[2]), "answer": fmt.Sprint(c[k])}
		if col != "" {
			row[col] = pos[k]
		}
		js, err := json.Marshal(row)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(js, '\n'))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// data.dataset.columns.hint names the column MLMT's feedback templates
// read as .Hint: a file whose hint column is named otherwise runs, a file
// without the named column stops before anything starts with an error
// naming it, and an empty name is refused.
func TestDatasetHintColumn(t *testing.T) {
	sets := []string{"data.task=null", "data.dataset.train=train.jsonl", "data.dataset.columns.prompt=question",
		`episode.templates.feedback="{{.Problem}} hint {{.Hint}} try: {{.Attempt}}\nfeedback:"`,
		`sft.feedback_response=" take the {{.Hint}}"`,
		"models.policy.init.hidden_size=32", "models.policy.init.intermediate_size=64", "models.policy.init.layers=1",
		"models.feedback.init.hidden_size=32", "models.feedback.init.intermediate_size=64", "models.feedback.init.layers=1",
		"sft.steps=2", "sft.batch_size=8", "schedule.steps=2", "schedule.eval_every=2", "eval.held_out=8",
		"algorithm.batch_prompts=4", "algorithm.group_size=4"}
	t.Run("renamed", func(t *testing.T) {
		t.Setenv("RLNODE_HOME", t.TempDir())
		t.Chdir(t.TempDir())
		writeHintRows(t, "train.jsonl", "clue", 40)
		l, err := recipes.Load("mlmt_math", append(sets, "data.dataset.columns.hint=clue"))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := FromRecipe(l, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Dataset == nil || cfg.Dataset.HintColumn != "clue" {
			t.Fatalf("dataset %+v: want HintColumn clue", cfg.Dataset)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Steps != 4 || res.FinalTurns.Problems != 8 {
			t.Errorf("%d steps, %d problems evaluated; want 4 and 8", res.Steps, res.FinalTurns.Problems)
		}
	})
	t.Run("missing", func(t *testing.T) {
		t.Setenv("RLNODE_HOME", t.TempDir())
		t.Chdir(t.TempDir())
		writeHintRows(t, "train.jsonl", "hint", 40) // the default name, not the recipe's
		l, err := recipes.Load("mlmt_math", append(sets, "data.dataset.columns.hint=clue"))
		if err != nil {
			t.Fatal(err)
		}
		// Refused by the recipe's checks, before anything runs.
		_, err = FromRecipe(l, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), `"clue"`) || !strings.Contains(err.Error(), "train.jsonl") || !strings.Contains(err.Error(), "data.dataset.columns.hint: ") {
			t.Errorf("error %v: want one naming data.dataset.columns.hint, the column \"clue\" and the file", err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		t.Chdir(t.TempDir())
		writeHintRows(t, "train.jsonl", "clue", 4)
		for _, c := range []struct {
			recipe string
			sets   []string
			want   string
		}{
			{"mlmt_gsm8k", []string{"data.dataset.train=train.jsonl", `data.dataset.columns.hint=""`}, "empty"},
		} {
			_, err := recipes.Load(c.recipe, c.sets)
			if err == nil || !strings.Contains(err.Error(), "data.dataset.columns.hint") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %v: error %v, want one naming data.dataset.columns.hint: %s", c.recipe, c.sets, err, c.want)
			}
		}
	})
}

// A dataset's .AnyHint is the hint column of a training row chosen by a
// hash of the problem: one of the rows' hints, the same on every call,
// different problems getting different ones; none without the column.
// A template that shows only .AnyHint still loads the column.
func TestDatasetAnyHint(t *testing.T) {
	hints := []string{"1st", "2nd", "3rd", "1st", "2nd", "3rd"}
	s := &datasetSource{seed: 3, trainHints: hints}
	seen := map[string]bool{}
	for i := range 60 {
		p := task.Problem{ID: fmt.Sprintf("train/%d", i), Question: fmt.Sprintf("Pick: %d 5 6", i)}
		h := s.anyHint(p)
		if !slices.Contains(hints, h) || h != s.anyHint(p) {
			t.Fatalf("%s: anyHint %q then %q: want one of %v, the same twice", p.ID, h, s.anyHint(p), hints)
		}
		seen[h] = true
	}
	if len(seen) != 3 {
		t.Errorf("60 problems drew hints %v, want all three", seen)
	}
	if h := (&datasetSource{}).anyHint(task.Problem{ID: "train/0"}); h != "" {
		t.Errorf("anyHint without a hint column: %q", h)
	}
	c := MLMTMath("OUT")
	c.FeedbackTemplate, c.FeedbackAnswerTemplate, c.RefineFeedbackTemplate = "{{.Question}} try: {{.Attempt}}\nfeedback:", " take the {{.AnyHint}}", ""
	if !c.feedbackUsesHint() {
		t.Error("a feedback target showing .AnyHint does not load the hint column")
	}
	c.FeedbackAnswerTemplate = " try again"
	if c.feedbackUsesHint() {
		t.Error("templates showing neither .Hint nor .AnyHint load the hint column")
	}
}
