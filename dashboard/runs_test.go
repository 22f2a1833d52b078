package dashboard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/train"
)

// writeRun makes a run folder with a resolved recipe planning sft+steps
// steps and rows metrics rows, each step taking 2 s.
func writeRun(t testing.TB, dir string, sft, steps, rows int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	recipe := fmt.Sprintf("# resolved recipe: builtin:quickstart --set schedule.steps=%d\nname: quickstart\nseed: 1\nsft:\n  steps: %d\nschedule:\n  steps: %d\n", steps, sft, steps)
	if err := os.WriteFile(filepath.Join(dir, RecipeFile), []byte(recipe), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := 1; i <= rows; i++ {
		reward := "null"
		if i > sft {
			reward = fmt.Sprintf("%g", float64(i%10)/10)
		}
		fmt.Fprintf(&b, `{"step":%d,"phase":"rl","reward_mean":%s,"loss":%g,"tokens":100,"train_s":1,"elapsed_s":%d}`+"\n", i, reward, 1/float64(i), 2*i)
	}
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRunsFindAndResolve(t *testing.T) {
	root := t.TempDir()
	writeRun(t, filepath.Join(root, "a"), 0, 3, 3)
	writeRun(t, filepath.Join(root, "sweep", "lr1"), 0, 3, 1)
	writeRun(t, filepath.Join(root, "deep", "x", "y"), 0, 3, 1)             // three levels down: not searched
	writeRun(t, filepath.Join(root, "a", "checkpoints", "step-2"), 0, 3, 1) // inside a run: not a run
	writeRun(t, filepath.Join(root, "job", "working_dir"), 0, 3, 1)         // a job's working dir, its run not begun: not a run
	if err := os.MkdirAll(filepath.Join(root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	single := filepath.Join(t.TempDir(), "solo")
	writeRun(t, single, 0, 3, 3)
	rs := NewRuns([]string{root, single})
	want := []string{filepath.Join(root, "a"), filepath.Join(root, "sweep", "lr1"), single}
	sort.Strings(want)
	if got := rs.Find(); !reflect.DeepEqual(got, want) {
		t.Fatalf("found %v, want %v", got, want)
	}
	for _, c := range []struct {
		id, err string
	}{
		{filepath.Join(root, "a"), ""},
		{filepath.Join(root, "sweep", "lr1"), ""},
		{filepath.Join(root, "sweep", "lr1", "..", "..", "a"), ""},
		{filepath.Join(root, "a", "..", "..", "etc"), ErrUnknownRun.Error()},
		{"/etc", ErrUnknownRun.Error()},
		{"a", ErrUnknownRun.Error()},
		{"", ErrUnknownRun.Error()},
		{filepath.Join(root, "deep", "x", "y"), ErrUnknownRun.Error()},
		{filepath.Join(root, "empty"), "holds neither"},
		{filepath.Join(root, "gone"), "the folder is gone"},
	} {
		_, err := rs.Resolve(c.id)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("Resolve(%q): %v, want %q", c.id, err, c.err)
		}
	}
}

func TestRunsDescribe(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	old := now.Add(-time.Hour)
	mk := func(name string, sft, steps, rows int, modified time.Time) string {
		dir := filepath.Join(root, name)
		writeRun(t, dir, sft, steps, rows)
		if err := os.Chtimes(filepath.Join(dir, MetricsFile), modified, modified); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	finished := mk("finished", 2, 8, 10, old)
	stopped := mk("stopped", 2, 8, 6, old)
	writing := mk("writing", 2, 8, 6, now)
	empty := mk("empty", 0, 8, 0, old)
	cut := mk("cut", 0, 8, 4, now)
	f, err := os.OpenFile(filepath.Join(cut, MetricsFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"step":5,"lo`)
	f.Close()
	badRecipe := mk("bad-recipe", 0, 8, 2, old)
	if err := os.WriteFile(filepath.Join(badRecipe, RecipeFile), []byte("schedule: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs := NewRuns([]string{root})
	ctx := context.Background()
	for _, c := range []struct {
		dir      string
		status   string
		step     int
		planned  int
		eta      float64 // -1: none
		problems string
	}{
		{finished, "finished", 10, 10, -1, ""},
		{stopped, "stopped", 6, 10, -1, ""},
		{writing, "writing", 6, 10, 8, ""}, // 4 steps left at 2 s each
		{empty, "empty", 0, 8, -1, ""},
		{cut, "writing", 4, 8, 8, "ends inside a line"},
		{badRecipe, "stopped", 2, 0, -1, "recipe.yaml"},
	} {
		r := rs.Describe(ctx, c.dir, now)
		name := filepath.Base(c.dir)
		if r.Status != c.status || r.Step != c.step || r.Planned != c.planned {
			t.Errorf("%s: status %s step %d of %d, want %s %d of %d", name, r.Status, r.Step, r.Planned, c.status, c.step, c.planned)
		}
		switch {
		case c.eta < 0 && r.ETASeconds != nil:
			t.Errorf("%s: ETA %v, want none", name, *r.ETASeconds)
		case c.eta >= 0 && (r.ETASeconds == nil || *r.ETASeconds != c.eta):
			t.Errorf("%s: ETA %v, want %g", name, r.ETASeconds, c.eta)
		}
		joined := strings.Join(r.Problems, "; ")
		if c.problems == "" && joined != "" || c.problems != "" && !strings.Contains(joined, c.problems) {
			t.Errorf("%s: problems %q, want %q", name, joined, c.problems)
		}
	}

	// A run deleted after it was listed.
	if err := os.RemoveAll(stopped); err != nil {
		t.Fatal(err)
	}
	if r := rs.Describe(ctx, stopped, now); r.Status != "gone" {
		t.Errorf("deleted run: status %s", r.Status)
	}
	if _, err := rs.Resolve(stopped); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("deleted run resolved: %v", err)
	}
}

// A run whose metrics file is appended to, rewritten shorter, removed.
func TestRunsTableFollowsTheFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r")
	writeRun(t, dir, 0, 100, 5)
	rs := NewRuns([]string{filepath.Dir(dir)})
	tab, err := rs.Table(dir)
	if err != nil || tab.Rows() != 5 {
		t.Fatalf("rows %d, %v", tab.Rows(), err)
	}
	f, _ := os.OpenFile(filepath.Join(dir, MetricsFile), os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.WriteString(`{"step":6,"loss":0.1}` + "\n")
	f.Close()
	tab2, err := rs.Table(dir)
	if err != nil || tab2.Rows() != 6 || tab.Rows() != 5 {
		t.Fatalf("after an append: rows %d (the earlier table %d), %v", tab2.Rows(), tab.Rows(), err)
	}
	writeRun(t, dir, 0, 100, 2)
	if tab3, err := rs.Table(dir); err != nil || tab3.Rows() != 2 {
		t.Fatalf("after a rewrite: rows %d, %v", tab3.Rows(), err)
	}
	if err := os.Remove(filepath.Join(dir, MetricsFile)); err != nil {
		t.Fatal(err)
	}
	if tab4, err := rs.Table(dir); err != nil || tab4.Rows() != 0 {
		t.Fatalf("after removal: %v, %v", tab4, err)
	}
}

// A run in progress, as rlnode run --metrics-addr shows it: its real
// exporter, then the same address once nothing answers there.
func TestRunsEndpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "live")
	writeRun(t, dir, 0, 50, 3)
	exp := train.NewRunMetrics("live", 50)
	addr, stop, err := exp.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reward := 0.5
	exp.Observe(train.Metrics{Step: 7, Phase: "rl", RewardMean: &reward, ElapsedSeconds: 14})
	if err := os.WriteFile(filepath.Join(dir, EndpointFile), []byte(addr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs := NewRuns([]string{filepath.Dir(dir)})
	old := time.Now().Add(-time.Hour)
	r := rs.Describe(context.Background(), dir, old.Add(2*time.Hour))
	if r.Status != "running" || r.Step != 7 || r.Planned != 50 || r.Endpoint != "http://"+addr+"/metrics" || r.ETASeconds == nil || *r.ETASeconds != 86 {
		t.Fatalf("live run: %+v (ETA %v)", r, r.ETASeconds)
	}
	exp.Finish(errors.New("interrupted"))
	if r := rs.Describe(context.Background(), dir, time.Now()); r.Status != "failed" {
		t.Fatalf("after a failure: %+v", r)
	}
	stop()
	r = rs.Describe(context.Background(), dir, time.Now().Add(time.Hour))
	if r.Status != "stopped" || !strings.Contains(strings.Join(r.Problems, ";"), "does not answer") {
		t.Fatalf("a run whose endpoint is gone: %+v", r)
	}
	if err := os.WriteFile(filepath.Join(dir, EndpointFile), []byte("not an address"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := rs.Describe(context.Background(), dir, time.Now()); !strings.Contains(strings.Join(r.Problems, ";"), "not HOST:PORT") {
		t.Fatalf("a bad endpoint file: %+v", r)
	}
}

func TestParseExposition(t *testing.T) {
	in := "# HELP rlnode_step x\n# TYPE rlnode_step gauge\nrlnode_step{run=\"a\"} 12\nrlnode_step_seconds{phase=\"gen\",run=\"a\"} 0.5\nrlnode_step_seconds{phase=\"train\",run=\"a\"} 0.7\nrlnode_loss 1e-3\ngo_goroutines 9\nrlnode_bad{run=\"a\"} x\n"
	got, err := parseExposition(strings.NewReader(in))
	want := map[string]float64{"rlnode_step": 12, "rlnode_step_seconds": 0.5, "rlnode_loss": 1e-3}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
}
