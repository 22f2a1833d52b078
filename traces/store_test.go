package traces

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
)

// sampleSpan is a span with every column set, for round trips.
func sampleSpan(trace, span byte, start time.Time, source string) Span {
	s := NewSpan()
	s.TraceID = oteltrace.TraceID{trace, 1}
	s.SpanID = oteltrace.SpanID{span, 2}
	if span > 1 {
		s.ParentID = oteltrace.SpanID{1, 2}
	}
	s.Name = "chat tiny"
	s.Start = start.UTC()
	s.End = start.Add(1500 * time.Microsecond).UTC()
	s.Status = StatusOK
	s.Source = source
	s.Operation = OpChat
	s.Provider = "openai"
	s.RequestModel = "tiny"
	s.ResponseModel = "tiny"
	s.ConversationID = "c1"
	s.AgentName = "solver"
	s.InputTokens, s.OutputTokens = 12, 3
	s.InputMessages = `[{"role":"user","parts":[{"type":"text","content":"2+2?"}]}]`
	s.OutputMessages = `[{"role":"assistant","parts":[{"type":"text","content":"4"}],"finish_reason":"stop"}]`
	s.FinishReasons = []string{"stop"}
	s.RunID = "run-1"
	s.Step, s.Episode, s.Turn, s.WeightVersion = 0, 4, 1, 7
	s.Policy = "actor"
	s.PromptTokenIDs = []int32{5, 6, 7}
	s.OutputTokenIDs = []int32{52}
	s.OutputLogprobs = []float32{-0.25}
	s.Rewards = []Reward{{Name: "answer", Value: 1, Reason: "matches 4"}, {Name: "len", Value: -0.5}}
	s.Attributes = `{"x":1}`
	return s
}

func TestStoreRoundTrip(t *testing.T) {
	root := t.TempDir()
	w, err := OpenWriter(root, WriterOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	tool := NewSpan()
	tool.TraceID, tool.SpanID, tool.ParentID = oteltrace.TraceID{1, 1}, oteltrace.SpanID{3, 3}, oteltrace.SpanID{1, 2}
	tool.Name, tool.Operation, tool.ToolName, tool.ToolResult = "execute_tool calc", OpExecuteTool, "calc", ""
	tool.Start, tool.End, tool.Status, tool.Source, tool.ErrorType = day.Add(time.Second), day.Add(2*time.Second), StatusError, "run-1", "ValueError"
	want := []Span{sampleSpan(1, 1, day, "run-1"), tool, sampleSpan(2, 1, day.Add(48*time.Hour), "agent/ä b")}
	if err := w.Add(want...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"date=2026-03-04/source=run-1", "date=2026-03-06/source=agent%2F%C3%A4%20b"} {
		if m, _ := filepath.Glob(filepath.Join(root, dir, "*.parquet")); len(m) != 1 {
			t.Errorf("partition %s holds %d files, want 1", dir, len(m))
		}
	}
	got, skipped, err := Load(root, Any())
	if err != nil || len(skipped) > 0 {
		t.Fatal(err, skipped)
	}
	if len(got) != 2 || len(got[0].Spans) != 2 || len(got[1].Spans) != 1 {
		t.Fatalf("traces %+v", got)
	}
	for i, s := range []Span{got[0].Spans[0], got[0].Spans[1], got[1].Spans[0]} {
		if !reflect.DeepEqual(s, want[i]) {
			t.Errorf("span %d read back\n%+v\nwant\n%+v", i, s, want[i])
		}
	}
}

// A span written twice (a retried OTLP post, an export posted back into
// its store) is read once: the traces, and the trajectories made from
// them, would otherwise hold each call twice.
func TestLoadReadsARepeatedSpanOnce(t *testing.T) {
	root := t.TempDir()
	day := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	first, second := sampleSpan(1, 1, day, "run-1"), sampleSpan(1, 2, day.Add(time.Second), "run-1")
	again := first
	again.Name = "the retry's copy"
	for _, batch := range [][]Span{{first, second}, {again, second}} {
		w, err := OpenWriter(root, WriterOptions{FlushInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Add(batch...); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got, skipped, err := Load(root, Any())
	if err != nil || len(skipped) > 0 {
		t.Fatal(err, skipped)
	}
	if len(got) != 1 || len(got[0].Spans) != 2 {
		t.Fatalf("%d traces, first with %d spans; want 1 trace of 2 spans", len(got), len(got[0].Spans))
	}
	if got[0].Spans[0].Name != first.Name {
		t.Errorf("kept the copy named %q, want the first written (%q)", got[0].Spans[0].Name, first.Name)
	}
}

func TestFilter(t *testing.T) {
	day := time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC)
	a := Trace{ID: oteltrace.TraceID{0xab}, Spans: []Span{sampleSpan(0xab, 1, day, "run-1")}}
	toolSpan := NewSpan()
	toolSpan.ToolName, toolSpan.Start = "search", day.Add(time.Minute)
	toolSpan.Rewards = []Reward{{Name: "tool", Value: 1}}
	a.Spans = append(a.Spans, toolSpan)
	nan := math.NaN()
	for _, c := range []struct {
		name string
		f    Filter
		want bool
	}{
		{"any", Any(), true},
		{"since before", Filter{Since: day, MinReward: nan, MaxReward: nan}, true},
		{"since after", Filter{Since: day.Add(time.Second), MinReward: nan, MaxReward: nan}, false},
		{"until is exclusive", Filter{Until: day, MinReward: nan, MaxReward: nan}, false},
		{"agent", Filter{Agent: "solver", MinReward: nan, MaxReward: nan}, true},
		{"other agent", Filter{Agent: "critic", MinReward: nan, MaxReward: nan}, false},
		{"model", Filter{Model: "tiny", MinReward: nan, MaxReward: nan}, true},
		{"tool", Filter{Tool: "search", MinReward: nan, MaxReward: nan}, true},
		{"other tool", Filter{Tool: "calc", MinReward: nan, MaxReward: nan}, false},
		{"run", Filter{Run: "run-1", MinReward: nan, MaxReward: nan}, true},
		{"trace prefix", Filter{TraceID: "AB00", MinReward: nan, MaxReward: nan}, true},
		{"other trace", Filter{TraceID: "ac", MinReward: nan, MaxReward: nan}, false},
		{"all rewards sum 1.5 in [1.5, 2]", Filter{MinReward: 1.5, MaxReward: 2}, true},
		{"all rewards sum 1.5 over 1", Filter{MinReward: nan, MaxReward: 1}, false},
		{"named reward", Filter{Reward: "answer", MinReward: 1, MaxReward: 1}, true},
		{"absent reward never in range", Filter{Reward: "human", MinReward: -10, MaxReward: nan}, false},
	} {
		if got := c.f.Match(&a); got != c.want {
			t.Errorf("%s: Match = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSecondWriterRefused(t *testing.T) {
	root := t.TempDir()
	w, err := OpenWriter(root, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenWriter(root, WriterOptions{}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second writer in this process: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	out, err := helperProcess(t, "lock", root).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "locked by another writer") {
		t.Fatalf("second writer in another process: %v\n%s", err, out)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := helperProcess(t, "lock", root).CombinedOutput(); err != nil {
		t.Fatalf("writer after the first closed: %v\n%s", err, out)
	}
}

func helperProcess(t *testing.T, mode, root string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperWriter$")
	cmd.Env = append(os.Environ(), "TRACES_HELPER="+mode, "TRACES_HELPER_ROOT="+root)
	return cmd
}

// TestHelperWriter is the child process of the writer tests: "lock" opens
// and closes a writer; "stream" adds one span every 2ms, printing
// "added I FLUSHED" after each, until killed.
func TestHelperWriter(t *testing.T) {
	mode, root := os.Getenv("TRACES_HELPER"), os.Getenv("TRACES_HELPER_ROOT")
	if mode == "" {
		t.Skip("child process of the writer tests")
	}
	w, err := OpenWriter(root, WriterOptions{FlushInterval: 100 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	if mode == "lock" {
		w.Close()
		os.Exit(0)
	}
	out := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		s := sampleSpan(byte(i), 1, time.Now(), "stream")
		s.TraceID = oteltrace.TraceID{}
		copy(s.TraceID[:], strconv.Itoa(i))
		s.Step = int64(i)
		w.Add(s)
		fmt.Fprintf(out, "added %d %d\n", i, w.Written())
		out.Flush()
		time.Sleep(2 * time.Millisecond)
	}
}

// TestKilledWriterLosesOnlyTheBuffer SIGKILLs a writing process and checks
// that what it had flushed is intact and what is lost is only the tail it
// had not flushed yet.
func TestKilledWriterLosesOnlyTheBuffer(t *testing.T) {
	root := t.TempDir()
	cmd := helperProcess(t, "stream", root)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	last, flushed := -1, int64(0)
	for sc.Scan() {
		var i int
		var n int64
		if _, err := fmt.Sscanf(sc.Text(), "added %d %d", &i, &n); err != nil {
			t.Fatalf("child said %q", sc.Text())
		}
		last, flushed = i, n
		if i >= 300 && n > 0 {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	for sc.Scan() {
		fmt.Sscanf(sc.Text(), "added %d %d", &last, &flushed)
	}
	cmd.Wait()
	if last < 0 {
		t.Fatal("child added nothing")
	}

	traces, skipped, err := Load(root, Any())
	if err != nil || len(skipped) > 0 {
		t.Fatal(err, skipped)
	}
	steps := map[int64]Span{}
	for _, tr := range traces {
		for _, s := range tr.Spans {
			steps[s.Step] = s
		}
	}
	kept := len(steps)
	for i := range kept {
		if _, ok := steps[int64(i)]; !ok {
			t.Fatalf("%d spans kept but step %d is missing: the loss is not a tail", kept, i)
		}
	}
	if int64(kept) < flushed {
		t.Fatalf("%d spans kept, but the writer had reported %d flushed", kept, flushed)
	}
	if kept > last+1 {
		t.Fatalf("%d spans kept of %d added", kept, last+1)
	}
	t.Logf("added %d, flushed before the kill %d, kept %d, lost %d (the unflushed tail; flush interval 100ms, one span per 2ms)",
		last+1, flushed, kept, last+1-kept)
}

func TestTruncatedFileSkipped(t *testing.T) {
	root := t.TempDir()
	w, err := OpenWriter(root, WriterOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	w.Add(sampleSpan(1, 1, day, "a"))
	w.Flush()
	w.Add(sampleSpan(2, 1, day, "b"))
	w.Close()
	bad, _ := filepath.Glob(filepath.Join(root, "date=2026-01-02", "source=b", "*.parquet"))
	if len(bad) != 1 {
		t.Fatalf("files of source b: %v", bad)
	}
	st, _ := os.Stat(bad[0])
	if err := os.Truncate(bad[0], st.Size()/2); err != nil {
		t.Fatal(err)
	}
	got, skipped, err := Load(root, Any())
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 1 || skipped[0].File != bad[0] {
		t.Fatalf("skipped %v, want %s", skipped, bad[0])
	}
	if len(got) != 1 || got[0].ID != (oteltrace.TraceID{1, 1}) {
		t.Fatalf("traces %+v, want the one of source a", got)
	}
}

func TestAnnotations(t *testing.T) {
	root := t.TempDir()
	w, err := OpenWriter(root, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	w.Add(sampleSpan(1, 1, day, "a"), sampleSpan(1, 2, day.Add(time.Second), "a"))
	w.Close()
	id := oteltrace.TraceID{1, 1}.String()
	if err := Annotate(root,
		Annotation{TraceID: id, Reward: Reward{Name: "human", Value: 0.5, Reason: "ok"}},
		Annotation{TraceID: id, SpanID: oteltrace.SpanID{2, 2}.String(), Reward: Reward{Name: "answer", Value: 0}},
	); err != nil {
		t.Fatal(err)
	}
	if err := Annotate(root, Annotation{TraceID: "xyz", Reward: Reward{Name: "h", Value: 1}}); err == nil || !strings.Contains(err.Error(), `"xyz"`) {
		t.Errorf("bad trace id: %v", err)
	}
	if err := Annotate(root, Annotation{TraceID: id, Reward: Reward{Name: "h", Value: math.Inf(1)}}); err == nil {
		t.Error("an infinite reward was accepted")
	}
	f, _ := os.OpenFile(filepath.Join(root, AnnotationsFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"trace_id":"` + id + `","reward":{"name":"hu`) // a torn last line
	f.Close()
	got, skipped, err := Load(root, Any())
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 1 || !strings.HasSuffix(skipped[0].File, AnnotationsFile+":3") {
		t.Errorf("skipped %v, want line 3 of %s", skipped, AnnotationsFile)
	}
	root0, child := got[0].Spans[0], got[0].Spans[1]
	if r, _ := got[0].Reward("human"); r != 0.5 || root0.Rewards[len(root0.Rewards)-1].Reason != "ok" {
		t.Errorf("root rewards %+v", root0.Rewards)
	}
	if child.Rewards[0] != (Reward{Name: "answer", Value: 0}) {
		t.Errorf("child rewards %+v: the annotation should replace the stored answer reward", child.Rewards)
	}
}

// failingWriter opens a writer with opts (flushing only when told) whose
// flushes fail until heal is called: the partition folder of day,
// 2026-01-02, is a file.
func failingWriter(t *testing.T, opts WriterOptions) (w *Writer, day time.Time, heal func()) {
	t.Helper()
	root := t.TempDir()
	opts.FlushInterval = time.Hour
	w, err := OpenWriter(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	blocker := filepath.Join(root, "date=2026-01-02")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return w, time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), func() { os.Remove(blocker) }
}

func TestWriterRefusesWhenBehind(t *testing.T) {
	w, day, heal := failingWriter(t, WriterOptions{MaxBuffered: 2})
	for i := range 8 {
		if err := w.Add(sampleSpan(byte(i), 1, day, "a")); err != nil {
			t.Fatalf("span %d of 8 refused: %v", i, err)
		}
	}
	if err := w.Flush(); err == nil {
		t.Fatal("a flush into a file posing as a folder succeeded")
	}
	if err := w.Add(sampleSpan(9, 1, day, "a")); !errors.Is(err, ErrBehind) {
		t.Fatalf("the 9th span with 8 waiting and 4 × 2 allowed: %v, want ErrBehind", err)
	}
	heal()
	if err := w.Flush(); err != nil || w.Written() != 8 {
		t.Fatalf("flush after the disk recovered: %v, %d written", err, w.Written())
	}
	if err := w.Add(sampleSpan(9, 1, day, "a")); err != nil {
		t.Fatal(err)
	}
}

// TestWriterBoundsBufferedBytes: spans waiting to be written are bounded
// in bytes as well as in number, since one span may carry megabytes of
// messages (an OTLP sender chooses them): past MaxBufferedBytes, Add
// refuses with ErrBehind. (Before, 4 × 65,536 spans of any size could
// wait while flushes failed.)
func TestWriterBoundsBufferedBytes(t *testing.T) {
	w, day, heal := failingWriter(t, WriterOptions{MaxBufferedBytes: 1 << 20})
	big := func(i byte) Span {
		s := sampleSpan(i, 1, day, "a")
		s.InputMessages = strings.Repeat("x", 300<<10)
		return s
	}
	for i := range 3 {
		if err := w.Add(big(byte(i))); err != nil {
			t.Fatalf("span %d of 300 KiB refused: %v", i, err)
		}
	}
	w.Flush() // fails: the spans stay
	if err := w.Add(big(3)); !errors.Is(err, ErrBehind) {
		t.Fatalf("a fourth span of 300 KiB with 900 KiB waiting under 1 MiB: %v, want ErrBehind", err)
	}
	heal()
	if err := w.Flush(); err != nil || w.Written() != 3 {
		t.Fatalf("flush after the disk recovered: %v, %d written", err, w.Written())
	}
	if err := w.Add(big(3)); err != nil {
		t.Fatal(err)
	}
}
