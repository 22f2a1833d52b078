package traces

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/rlnode/rlnode/internal/pqread"
	"github.com/rlnode/rlnode/internal/readfile"
)

// Trace is the spans of one trace id, in start order, with the rewards
// annotated on them merged in.
type Trace struct {
	ID    oteltrace.TraceID
	Spans []Span
}

// Start is the earliest span start.
func (t *Trace) Start() time.Time { return t.Spans[0].Start }

// End is the latest span end.
func (t *Trace) End() time.Time {
	e := t.Spans[0].End
	for _, s := range t.Spans[1:] {
		if s.End.After(e) {
			e = s.End
		}
	}
	return e
}

// Source is the root span's source (the first span's when no root was stored).
func (t *Trace) Source() string { return t.Root().Source }

// Root is the span without a parent, or the first span.
func (t *Trace) Root() *Span {
	for i := range t.Spans {
		if !t.Spans[i].ParentID.IsValid() {
			return &t.Spans[i]
		}
	}
	return &t.Spans[0]
}

// Reward is the sum of the rewards named name over the trace's spans (of
// all rewards when name is empty); ok is false when there is none.
func (t *Trace) Reward(name string) (sum float64, ok bool) {
	for _, s := range t.Spans {
		for _, r := range s.Rewards {
			if name == "" || r.Name == name {
				sum += r.Value
				ok = true
			}
		}
	}
	return sum, ok
}

// Filter selects traces. A trace matches when it starts in [Since, Until)
// (zero bounds are open), and for each non-empty field some span of it
// matches (Agent, Model, Tool, Run, Source, TraceID), and its Reward
// (summed as Trace.Reward does) lies in [MinReward, MaxReward].
type Filter struct {
	Since, Until time.Time
	Source       string
	Agent        string
	Model        string // request or response model
	Run          string
	Tool         string
	TraceID      string // hex, or a prefix of it
	Reward       string // the reward the range applies to ("" sums all)
	MinReward    float64
	MaxReward    float64 // NaN bounds are open; use Any for "no bound"
}

// Any is a Filter that keeps every trace.
func Any() Filter { return Filter{MinReward: math.NaN(), MaxReward: math.NaN()} }

func (f *Filter) rewardBound() bool { return !math.IsNaN(f.MinReward) || !math.IsNaN(f.MaxReward) }

// Match says whether t passes f.
func (f *Filter) Match(t *Trace) bool {
	if !f.Since.IsZero() && t.Start().Before(f.Since) || !f.Until.IsZero() && !t.Start().Before(f.Until) {
		return false
	}
	if f.TraceID != "" && !strings.HasPrefix(t.ID.String(), strings.ToLower(f.TraceID)) {
		return false
	}
	some := func(want string, get func(*Span) []string) bool {
		if want == "" {
			return true
		}
		for i := range t.Spans {
			if slices.Contains(get(&t.Spans[i]), want) {
				return true
			}
		}
		return false
	}
	if !some(f.Source, func(s *Span) []string { return []string{s.Source} }) ||
		!some(f.Agent, func(s *Span) []string { return []string{s.AgentName} }) ||
		!some(f.Model, func(s *Span) []string { return []string{s.RequestModel, s.ResponseModel} }) ||
		!some(f.Run, func(s *Span) []string { return []string{s.RunID} }) ||
		!some(f.Tool, func(s *Span) []string { return []string{s.ToolName} }) {
		return false
	}
	if f.rewardBound() {
		r, ok := t.Reward(f.Reward)
		if !ok || !math.IsNaN(f.MinReward) && r < f.MinReward || !math.IsNaN(f.MaxReward) && r > f.MaxReward {
			return false
		}
	}
	return true
}

// Skipped is a file (or a line of one) that could not be read.
type Skipped struct {
	File string
	Err  error
}

func (s Skipped) String() string { return fmt.Sprintf("%s: %v", s.File, s.Err) }

// Limits on what a reader takes in, against hostile files.
const (
	maxAnnotationLine = 64 << 10
	maxIndexLine      = 64 << 10
	// maxFileBytes bounds one Parquet file of a store and the column data
	// its footer declares: a file is read whole into memory.
	maxFileBytes = 1 << 30
)

// Load reads the traces of the store at root that pass f, in start order.
// Files that cannot be read (a truncated Parquet file, a bad annotation
// line) are named in skipped and the rest is still read. A span stored more
// than once under its trace and span id (an OTLP client that retried, an
// export posted back) is read once, its first copy in write order; but an
// episode a run recorded again (SpansFromTurns' root stored again: a step
// redone after a restart or --resume) is read as its last recording,
// whole, as that is what the run trained on.
func Load(root string, f Filter) (out []Trace, skipped []Skipped, err error) {
	if st, err := os.Stat(root); err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			err = pe.Err // the message names root already
		}
		return nil, nil, fmt.Errorf("trace store %s: %w", root, err)
	} else if !st.IsDir() {
		return nil, nil, fmt.Errorf("trace store %s: not a folder", root)
	}
	index, bad := readIndex(root)
	skipped = append(skipped, bad...)
	files, err := parquetFiles(root)
	if err != nil {
		return nil, skipped, err
	}
	byID := map[oteltrace.TraceID]*Trace{}
	var order []oteltrace.TraceID
	type spanKey struct {
		trace oteltrace.TraceID
		span  oteltrace.SpanID
	}
	seen := map[spanKey]bool{}
	for _, rel := range files {
		if e, ok := index[rel]; ok && !f.Since.IsZero() && e.MaxStart.Before(f.Since.Truncate(time.Microsecond)) {
			continue
		}
		if f.Source != "" && !strings.Contains(rel, "/source="+escapeSource(f.Source)+"/") {
			continue
		}
		spans, err := ReadFile(filepath.Join(root, rel))
		if err != nil {
			skipped = append(skipped, Skipped{File: filepath.Join(root, rel), Err: err})
			continue
		}
		for _, s := range spans {
			k := spanKey{s.TraceID, s.SpanID}
			if seen[k] {
				if !isEpisodeRoot(&s) {
					continue
				}
				// A run's episode recorded again: its step was redone
				// after a restart or --resume, and the run trained on
				// this recording. It replaces the earlier one whole.
				t := byID[s.TraceID]
				for _, old := range t.Spans {
					delete(seen, spanKey{old.TraceID, old.SpanID})
				}
				t.Spans = t.Spans[:0]
			}
			seen[k] = true
			t := byID[s.TraceID]
			if t == nil {
				t = &Trace{ID: s.TraceID}
				byID[s.TraceID] = t
				order = append(order, s.TraceID)
			}
			t.Spans = append(t.Spans, s)
		}
	}
	skipped = append(skipped, applyAnnotations(root, byID)...)
	for _, id := range order {
		t := byID[id]
		slices.SortStableFunc(t.Spans, func(a, b Span) int { return a.Start.Compare(b.Start) })
		if f.Match(t) {
			out = append(out, *t)
		}
	}
	slices.SortStableFunc(out, func(a, b Trace) int { return a.Start().Compare(b.Start()) })
	return out, skipped, nil
}

// parquetFiles lists the store's Parquet files, relative to root, in path
// order (a partition's files in write order).
func parquetFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".parquet") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("trace store %s: %w", root, err)
	}
	return files, nil
}

// ReadFile reads the spans of one Parquet file of the store.
// A store's files may be damaged or come from another tool: pqread reads
// them without trusting their footers, and a file that is not a regular
// file (a pipe, a device) is refused before it is opened, as opening a
// pipe waits for a writer.
func ReadFile(path string) ([]Span, error) {
	st, err := readfile.Stat(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, err
	}
	if st.Size() > maxFileBytes {
		return nil, fmt.Errorf("%d bytes, over the %d-byte limit for one file of a store", st.Size(), int64(maxFileBytes))
	}
	tbl, err := pqread.ReadTable(context.Background(), f, st.Size(), maxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("not a readable Parquet file: %w", err)
	}
	defer tbl.Release()
	tr := array.NewTableReader(tbl, 0)
	defer tr.Release()
	var out []Span
	for tr.Next() {
		spans, err := spansOf(tr.RecordBatch())
		if err != nil {
			return nil, err
		}
		out = append(out, spans...)
	}
	if err := tr.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func readIndex(root string) (map[string]indexEntry, []Skipped) {
	out := map[string]indexEntry{}
	var bad []Skipped
	path := filepath.Join(root, IndexFile)
	eachLine(path, maxIndexLine, func(n int, line []byte) {
		var e indexEntry
		if err := json.Unmarshal(line, &e); err != nil || e.File == "" {
			bad = append(bad, Skipped{File: fmt.Sprintf("%s:%d", path, n), Err: fmt.Errorf("not an index entry: %v", err)})
			return
		}
		out[e.File] = e
	}, &bad)
	return out, bad
}

// eachLine calls fn with each non-empty line of path (numbered from 1);
// a missing file has no lines, an over-long line is skipped and named.
func eachLine(path string, max int, fn func(n int, line []byte), bad *[]Skipped) {
	f, err := os.Open(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			*bad = append(*bad, Skipped{File: path, Err: err})
		}
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), max)
	n := 0
	for sc.Scan() {
		n++
		if line := sc.Bytes(); len(strings.TrimSpace(string(line))) > 0 {
			fn(n, line)
		}
	}
	if err := sc.Err(); err != nil {
		*bad = append(*bad, Skipped{File: fmt.Sprintf("%s:%d", path, n+1), Err: err})
	}
}
