package train

import (
	"testing"

	"github.com/rlnode/rlnode/rollout/data"
)

// A dataset column that a row lacks is reported at the recipe field that
// maps it (data.dataset.columns.prompt, ...), not at data.dataset.
func TestColumnField(t *testing.T) {
	ds := &Dataset{
		Mapping:     data.Mapping{Prompt: "question", Answer: "meta.answer", Tests: "tests", Setup: "imports", ID: "task_id"},
		EvalMapping: &data.Mapping{Prompt: "problem", Answer: "solution"},
		HintColumn:  "secret",
	}
	for col, want := range map[string]string{
		"question": "data.dataset.columns.prompt", "meta.answer": "data.dataset.columns.answer", "tests": "data.dataset.columns.tests",
		"imports": "data.dataset.columns.setup", "task_id": "data.dataset.columns.id",
		"problem": "data.dataset.eval_columns.prompt", "solution": "data.dataset.eval_columns.answer",
		"secret": "data.dataset.columns.hint", "other": "",
	} {
		if got := ds.columnField(col); got != want {
			t.Errorf("columnField(%q) = %q, want %q", col, got, want)
		}
	}
	if got := (&Dataset{Mapping: data.Mapping{Prompt: "prompt"}}).columnField("hint"); got != "data.dataset.columns.hint" {
		t.Errorf("the default hint column: %q", got)
	}
}
