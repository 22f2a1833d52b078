package traces

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
)

// Annotation is a reward given to a span (or a whole trace) after it was
// stored: by a person (rlnode traces annotate) or by a reward function
// run over the store (rlnode traces reward).
type Annotation struct {
	TraceID string    `json:"trace_id"`
	SpanID  string    `json:"span_id,omitempty"` // empty: the trace's root span
	Reward  Reward    `json:"reward"`
	By      string    `json:"by,omitempty"`
	Time    time.Time `json:"time"`
}

// Annotate appends annotations to the store's annotations.jsonl. Each is
// one short line written with O_APPEND, so annotating while a writer runs
// is safe: the writer never touches that file.
func Annotate(root string, as ...Annotation) error {
	var buf []byte
	for _, a := range as {
		if _, err := oteltrace.TraceIDFromHex(a.TraceID); err != nil {
			return fmt.Errorf("annotate %s: trace id %q: %w", root, a.TraceID, err)
		}
		if a.SpanID != "" {
			if _, err := oteltrace.SpanIDFromHex(a.SpanID); err != nil {
				return fmt.Errorf("annotate %s: span id %q: %w", root, a.SpanID, err)
			}
		}
		if a.Reward.Name == "" || math.IsNaN(a.Reward.Value) || math.IsInf(a.Reward.Value, 0) {
			return fmt.Errorf("annotate %s: reward needs a name and a finite value, got %q = %v", root, a.Reward.Name, a.Reward.Value)
		}
		if a.Time.IsZero() {
			a.Time = time.Now().UTC()
		}
		line, err := json.Marshal(a)
		if err != nil {
			return err
		}
		if len(line) >= maxAnnotationLine {
			return fmt.Errorf("annotate %s: annotation of %d bytes is over %d (shorten the reason)", root, len(line), maxAnnotationLine)
		}
		buf = append(append(buf, line...), '\n')
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("annotate %s: %w", root, err)
	}
	f, err := os.OpenFile(filepath.Join(root, AnnotationsFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("annotate %s: %w", root, err)
	}
	defer f.Close()
	if _, err := f.Write(buf); err != nil {
		return fmt.Errorf("annotate %s: %w", root, err)
	}
	return f.Sync()
}

// applyAnnotations adds the store's annotations to the spans they name.
// A later annotation of the same reward name on the same span replaces an
// earlier one (a person correcting a score).
func applyAnnotations(root string, traces map[oteltrace.TraceID]*Trace) []Skipped {
	var bad []Skipped
	path := filepath.Join(root, AnnotationsFile)
	eachLine(path, maxAnnotationLine, func(n int, line []byte) {
		var a Annotation
		err := json.Unmarshal(line, &a)
		var tid oteltrace.TraceID
		if err == nil {
			tid, err = oteltrace.TraceIDFromHex(a.TraceID)
		}
		if err == nil && (a.Reward.Name == "" || math.IsNaN(a.Reward.Value) || math.IsInf(a.Reward.Value, 0)) {
			err = fmt.Errorf("reward needs a name and a finite value")
		}
		if err != nil {
			bad = append(bad, Skipped{File: fmt.Sprintf("%s:%d", path, n), Err: err})
			return
		}
		t := traces[tid]
		if t == nil {
			return
		}
		s := t.Root()
		if a.SpanID != "" {
			s = nil
			for i := range t.Spans {
				if t.Spans[i].SpanID.String() == a.SpanID {
					s = &t.Spans[i]
				}
			}
			if s == nil {
				return
			}
		}
		for i := range s.Rewards {
			if s.Rewards[i].Name == a.Reward.Name {
				s.Rewards[i] = a.Reward
				return
			}
		}
		s.Rewards = append(s.Rewards, a.Reward)
	}, &bad)
	return bad
}
