package train

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/rlnode/rlnode/rollout/task"
)

var updateData = flag.Bool("update-data", false, "rewrite the built-in recipes' generated data files")

// gsm8kWordFiles are the built-in GSM8K-style files (recipes/builtin/data,
// used by mlmt_gsm8k): level-1 word problems of rollout/task (seed 1) with
// GSM8K's columns, question and answer ("#### N"), the train file from
// the task's train split and the test file from its held-out split, so
// no test question is trained on.
var gsm8kWordFiles = []struct {
	path  string
	split task.Split
	rows  int
}{
	{"../recipes/builtin/data/gsm8k_word_train.jsonl", task.Train, 3000},
	{"../recipes/builtin/data/gsm8k_word_test.jsonl", task.HeldOut, 200},
}

// The shipped files are what the word task generates; -update-data
// rewrites them.
func TestGSM8KWordFiles(t *testing.T) {
	gen, err := task.New(task.Config{Seed: 1, Kinds: []string{task.Word}, Level: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range gsm8kWordFiles {
		var buf bytes.Buffer
		seen := map[string]bool{}
		for i := 0; len(seen) < f.rows; i++ {
			if i > 100*f.rows {
				t.Fatalf("%s: only %d distinct questions", f.path, len(seen))
			}
			p, err := gen.Problem(f.split, i)
			if err != nil {
				t.Fatal(err)
			}
			if seen[p.Question] {
				continue
			}
			seen[p.Question] = true
			js, err := json.Marshal(map[string]string{"question": p.Question, "answer": "#### " + p.Answer})
			if err != nil {
				t.Fatal(err)
			}
			buf.Write(append(js, '\n'))
		}
		if *updateData {
			if err := os.WriteFile(filepath.FromSlash(f.path), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(filepath.FromSlash(f.path))
		if err != nil {
			t.Fatalf("%v (go test ./train -run TestGSM8KWordFiles -update-data writes it)", err)
		}
		if !bytes.Equal(have, buf.Bytes()) {
			t.Errorf("%s differs from the word task's problems (go test ./train -run TestGSM8KWordFiles -update-data rewrites it)", f.path)
		}
	}
}
