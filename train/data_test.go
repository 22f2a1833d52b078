package train

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/task"
)

// arithmeticRows are n problems of the quickstart's kind, as dataset rows
// with nested answers ({"q": ..., "meta": {"a": ...}}).
func arithmeticRows(n int) []map[string]any {
	rows := make([]map[string]any, n)
	for i := range rows {
		a, b := i%9+1, i/9+1
		rows[i] = map[string]any{"q": fmt.Sprintf("What is %d + %d?", a, b), "meta": map[string]any{"a": fmt.Sprint(a + b)}}
	}
	return rows
}

var arithmeticMapping = data.Mapping{Prompt: "q", Answer: "meta.a"}

func writeJSONL(t *testing.T, rows []map[string]any) string {
	t.Helper()
	var sb strings.Builder
	for _, r := range rows {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		sb.Write(append(b, '\n'))
	}
	p := filepath.Join(t.TempDir(), "train.jsonl")
	if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeArithmeticParquet writes the rows as Parquet, meta a struct column.
func writeArithmeticParquet(t *testing.T, rows []map[string]any) string {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "q", Type: arrow.BinaryTypes.String},
		{Name: "meta", Type: arrow.StructOf(arrow.Field{Name: "a", Type: arrow.BinaryTypes.String})},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.StringBuilder).Append(r["q"].(string))
		sb := b.Field(1).(*array.StructBuilder)
		sb.Append(true)
		sb.FieldBuilder(0).(*array.StringBuilder).Append(r["meta"].(map[string]any)["a"].(string))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	p := filepath.Join(t.TempDir(), "train.parquet")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(sc, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// datasetRun is tinyRun drawing from a dataset file.
func datasetRun(out, train string) Config {
	c := tinyRun(out)
	c.Task = task.Config{}
	c.Dataset = &Dataset{Train: train, Mapping: arithmeticMapping}
	c.Learner.Algorithm = learner.RWSFT // every sample moves the weights
	return c
}

// The training order: each epoch a permutation of the train rows, never
// a held-out row, the same for the same seed; epochs bound it.
func TestDatasetSourceOrder(t *testing.T) {
	path := writeJSONL(t, arithmeticRows(10))
	ds := &Dataset{Train: path, Mapping: arithmeticMapping, Epochs: 2}
	s, err := loadDataset(context.Background(), ds, 7, 3)
	if err != nil {
		t.Fatal(err)
	}
	held, err := s.heldOut(100)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 3 {
		t.Fatalf("%d held-out problems, want 3", len(held))
	}
	heldIDs := map[string]bool{}
	for _, p := range held {
		heldIDs[p.ID] = true
		if s.reference(p).Answer != p.Answer || p.Answer == "" {
			t.Errorf("held-out %s: reference %+v, answer %q", p.ID, s.reference(p), p.Answer)
		}
	}
	var order []string
	for epoch := range 2 {
		seen := map[string]bool{}
		for i := range 7 {
			p, err := s.train(epoch*7 + i)
			if err != nil {
				t.Fatal(err)
			}
			if heldIDs[p.ID] || seen[p.ID] {
				t.Errorf("epoch %d: %s drawn again or held out", epoch, p.ID)
			}
			seen[p.ID] = true
			order = append(order, p.ID)
		}
	}
	if slices.Equal(order[:7], order[7:]) {
		t.Errorf("both epochs have the order %v: want a fresh shuffle per epoch", order[:7])
	}
	if _, err := s.train(14); err == nil {
		t.Errorf("problem 14 of 7 rows × 2 epochs: no error")
	}
	again, err := loadDataset(context.Background(), ds, 7, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range order {
		if p, _ := again.train(i); p.ID != id {
			t.Fatalf("problem %d: %s, then %s with the same seed", i, id, p.ID)
		}
	}
}

// A run on a JSONL and on a Parquet file of the same rows: the same
// problems, so the same rewards step by step; a run resumed from step 4
// continues the data cursor and reaches the uninterrupted run's weights.
func TestDatasetRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rows := arithmeticRows(40)
	jsonl, pq := writeJSONL(t, rows), writeArithmeticParquet(t, rows)
	full := t.TempDir()
	if _, err := Run(ctx, datasetRun(full, jsonl)); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if _, err := Run(ctx, datasetRun(other, pq)); err != nil {
		t.Fatal(err)
	}
	a, b := readMetrics(t, filepath.Join(full, "metrics.jsonl")), readMetrics(t, filepath.Join(other, "metrics.jsonl"))
	if len(a) != 5 || len(b) != 5 {
		t.Fatalf("metrics lines %d and %d, want 5 (2 warm-up + 3 RL)", len(a), len(b))
	}
	for i := range a {
		if a[i]["loss"] != b[i]["loss"] || a[i]["reward_mean"] != b[i]["reward_mean"] {
			t.Errorf("step %d: JSONL loss %v reward %v, Parquet loss %v reward %v", i+1, a[i]["loss"], a[i]["reward_mean"], b[i]["loss"], b[i]["reward_mean"])
		}
	}
	if _, ok := a[len(a)-1]["eval_accuracy"]; !ok {
		t.Errorf("last step has no eval_accuracy: %v", a[len(a)-1])
	}
	// The checkpoint evaluates alone as the run did at its last step.
	ev, err := EvaluateSingleCheckpoint(ctx, datasetRun(t.TempDir(), jsonl), filepath.Join(full, "checkpoints", "step-5"))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Problems != 8 || ev.Accuracy != a[4]["eval_accuracy"] {
		t.Errorf("checkpoint evaluation %+v, the run's last eval_accuracy %v on 8 problems", ev, a[4]["eval_accuracy"])
	}
	ds, err := readDriverState(filepath.Join(full, "checkpoints", "step-4"), 1)
	if err != nil {
		t.Fatal(err)
	}
	// 2 warm-up steps × 8 + 2 RL steps × 4 problems.
	if ds.TrainCursor != 24 {
		t.Errorf("step-4 train cursor %d, want 24", ds.TrainCursor)
	}

	resumed := t.TempDir()
	cfg := datasetRun(resumed, jsonl)
	cfg.Resume = filepath.Join(full, "checkpoints", "step-4")
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	wa, err := model.Load(filepath.Join(full, "checkpoints", "step-5"), cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	wb, err := model.Load(filepath.Join(resumed, "checkpoints", "step-5"), cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	rb := wb.Weights()
	for name, w := range wa.Weights() {
		if !slices.Equal(w, rb[name]) {
			t.Errorf("tensor %s differs between the uninterrupted and the resumed run", name)
		}
	}
}

// Bad dataset input stops the run before anything starts (no run
// directory), with an error naming the file, the row or line and the
// column.
func TestDatasetRunRefusesBadInput(t *testing.T) {
	good := arithmeticRows(20)
	bad := arithmeticRows(20)
	bad[2] = map[string]any{"q": "What is 1 + 1?"} // no meta.a
	badPath := writeJSONL(t, bad)
	notJSON := filepath.Join(t.TempDir(), "train.jsonl")
	if err := os.WriteFile(notJSON, []byte("{\"q\": \"a\", \"meta\": {\"a\": \"1\"}}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"missing column", func(c *Config) { c.Dataset.Train = badPath }, []string{badPath, "line 3", "row 2", `"meta.a"`}},
		{"not JSON", func(c *Config) { c.Dataset.Train = notJSON }, []string{notJSON, "line 2", "not a JSON object"}},
		{"missing file", func(c *Config) { c.Dataset.Train = filepath.Join(t.TempDir(), "none.jsonl") }, []string{"none.jsonl"}},
		{"prompt column", func(c *Config) { c.Dataset.Mapping.Prompt = "question" }, []string{"row 0", `"question"`}},
		{"eval file", func(c *Config) { c.Dataset.Eval = badPath }, []string{"eval", badPath, "line 3"}},
		{"held out all", func(c *Config) { c.EvalProblems = 20 }, []string{"20 rows", "holding out 20"}},
		{"epochs", func(c *Config) { c.Dataset.Epochs = 1 }, []string{"dataset.epochs 1", "draws 28"}},
		{"verifier", func(c *Config) { c.Verifier = "lean" }, []string{"verifier lean"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			c := datasetRun(out, writeJSONL(t, good))
			tc.edit(&c)
			refusedBeforeStart(t, c, out, tc.want)
		})
	}
}

// EvaluateSingleCheckpoint scores a checkpoint as the run scored it: on a
// dataset whose answers the warm-up teaches (every answer 7), the run's
// last eval_accuracy is above 0 and the checkpoint's evaluation equals it.
func TestEvaluateSingleCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rows := make([]map[string]any, 30)
	for i := range rows {
		rows[i] = map[string]any{"q": fmt.Sprintf("What is %d + %d?", i, 7-i), "meta": map[string]any{"a": "7"}, "parity": i % 2}
	}
	out := t.TempDir()
	c := datasetRun(out, writeJSONL(t, rows))
	c.WarmupSteps, c.WarmupLR, c.Steps, c.EvalEvery = 30, 1e-2, 0, 30
	c.Dataset.GroupBy = []string{"parity"} // held out of the train file: its rows carry the column
	res, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	// The run's evaluation lines carry the per-group figures.
	raw, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var last Metrics
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if n := len(last.EvalGroups); n == 0 || n > 2 || last.EvalGroups[0].Column != "parity" {
		t.Errorf("last metrics line's eval_groups %+v: want parity 0 and 1", last.EvalGroups)
	}
	if !(res.FinalEval > 0) {
		t.Fatalf("final eval %v: the warm-up did not teach the constant answer; the test needs it above 0", res.FinalEval)
	}
	ev, err := EvaluateSingleCheckpoint(ctx, c, filepath.Join(out, "checkpoints", "step-30"))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Problems != 8 || ev.Accuracy != res.FinalEval || ev.Correct != int(res.FinalEval*8+0.5) {
		t.Errorf("checkpoint evaluation %+v, the run's final eval %v on 8 problems", ev, res.FinalEval)
	}
	c.Verifier = VerifierGSM8K // "\boxed{7}" is also a GSM8K answer
	if ev2, err := EvaluateSingleCheckpoint(ctx, c, filepath.Join(out, "checkpoints", "step-30")); err != nil || !reflect.DeepEqual(ev2, ev) {
		t.Errorf("gsm8k verifier: %+v, %v; want %+v", ev2, err, ev)
	}

	// An eval file with its own columns (problem/ans, not q/meta.a) and a
	// group_by column: the model answers 7 to everything, so the group
	// whose answers are 7 scores what the run scored and the other 0.
	var evalRows []map[string]any
	for i := range 8 {
		ans, subject := "7", "seven"
		if i%2 == 1 {
			ans, subject = "8", "eight"
		}
		evalRows = append(evalRows, map[string]any{"problem": fmt.Sprintf("What is %d + %s?", i, ans), "ans": ans, "subject": subject, "level": i % 3})
	}
	c.Verifier = ""
	c.Dataset.Eval = writeJSONL(t, evalRows)
	c.Dataset.EvalMapping = &data.Mapping{Prompt: "problem", Answer: "ans"}
	c.Dataset.GroupBy = []string{"subject", "level"}
	ev3, err := EvaluateSingleCheckpoint(ctx, c, filepath.Join(out, "checkpoints", "step-30"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ev3.Groups) != 5 { // eight, seven; levels 0, 1, 2
		t.Fatalf("groups %+v: want subjects eight and seven, levels 0, 1 and 2", ev3.Groups)
	}
	bySubject := map[string]GroupEval{}
	for _, g := range ev3.Groups[:2] {
		bySubject[g.Value] = g
	}
	if g := bySubject["eight"]; g.Column != "subject" || g.Problems != 4 || g.Accuracy != 0 {
		t.Errorf("subject eight %+v: want 4 problems, none right (the model answers 7)", g)
	}
	if g := bySubject["seven"]; g.Problems != 4 || !(g.Accuracy > 0) || g.Accuracy*4 != ev3.Accuracy*8 {
		t.Errorf("subject seven %+v: want 4 problems holding every correct answer (overall %v of 8)", g, ev3.Accuracy)
	}
	var levels float64
	for i, g := range ev3.Groups[2:] {
		if g.Column != "level" || g.Value != fmt.Sprint(i) {
			t.Errorf("group %d %+v: want level %d (numeric order)", i+2, g, i)
		}
		levels += g.Accuracy * float64(g.Problems)
	}
	if math.Abs(levels-ev3.Accuracy*8) > 1e-9 {
		t.Errorf("levels hold %v correct answers, overall %v", levels, ev3.Accuracy*8)
	}
}

// refusedBeforeStart: Run(c) fails with an error naming every want, and
// out (c's run directory) was never created.
func refusedBeforeStart(t *testing.T, c Config, out string, want []string) {
	t.Helper()
	_, err := Run(context.Background(), c)
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("the run directory was created")
	}
}

// Holding out every train row, with no eval file, is refused naming the
// two fields that fix it (before: "an eval file or fewer eval problems").
func TestDatasetHeldOutTakesEveryRow(t *testing.T) {
	path := writeJSONL(t, arithmeticRows(4))
	_, err := loadDataset(context.Background(), &Dataset{Train: path, Mapping: arithmeticMapping}, 7, 4)
	if err == nil {
		t.Fatal("4 rows, 4 held out: no error")
	}
	for _, want := range []string{path, "data.dataset.eval", "eval.held_out"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// A task asked for more held-out problems than its held-out split has
// is refused, naming eval.held_out and the count, once the split is
// exhausted; it used to return the ones it found after 50·n draws (an
// hour for eval.held_out: 1000000, past any stop).
func TestHeldOutProblemsMoreThanTheTaskHas(t *testing.T) {
	gen, err := task.New(tinyRun(t.TempDir()).Task)
	if err != nil {
		t.Fatal(err)
	}
	all, err := heldOutProblems(gen, 1_000_000)
	if err == nil || !strings.Contains(err.Error(), "eval.held_out is 1000000, but the task's held-out split has ") {
		t.Fatalf("eval.held_out 1000000: %d problems, error %v; want an error naming eval.held_out", len(all), err)
	}
	var have int
	if _, err := fmt.Sscanf(err.Error()[strings.Index(err.Error(), "has ")+4:], "%d", &have); err != nil || have < 1 {
		t.Fatalf("no count in %q", err)
	}
	got, err := heldOutProblems(gen, have)
	if err != nil || len(got) != have {
		t.Fatalf("eval.held_out %d (what the error offered): %d problems, %v", have, len(got), err)
	}
	seen := map[string]bool{}
	for _, p := range got {
		if seen[p.Question] {
			t.Fatalf("held-out problem %q twice", p.Question)
		}
		seen[p.Question] = true
	}
}
