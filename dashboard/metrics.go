package dashboard

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// Bounds on what one run's metrics.jsonl may cost.
const (
	maxMetricsBytes = 512 << 20 // read no more of a file
	maxMetricsLine  = 1 << 20   // a longer line is counted bad and skipped
	maxMetricsKeys  = 256       // numeric fields beyond these are ignored
)

// Table is a run's metrics.jsonl as columns: Steps holds each row's step,
// and Columns every numeric field by name, NaN in rows that lack it (a
// null, a missing field, a non-number).
type Table struct {
	Steps   []float64
	Phases  []string
	Columns map[string][]float64
	// BadLines counts lines that are not a JSON object with a numeric
	// step; Truncated says the file ends inside a line (a run still
	// writing it, or one killed mid-write).
	BadLines  int
	Truncated bool
	// Offset is where the next unread line starts.
	Offset int64
}

// Rows is the number of rows read.
func (t *Table) Rows() int { return len(t.Steps) }

// Keys returns the column names, sorted.
func (t *Table) Keys() []string {
	keys := make([]string, 0, len(t.Columns))
	for k := range t.Columns {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Series returns the (step, value) pairs of column key where it has a
// value.
func (t *Table) Series(key string) (xs, ys []float64) {
	col := t.Columns[key]
	for i, v := range col {
		if !math.IsNaN(v) {
			xs = append(xs, t.Steps[i])
			ys = append(ys, v)
		}
	}
	return xs, ys
}

// ReadMore appends the complete lines of r (a metrics.jsonl read from
// t.Offset) to t, up to maxMetricsBytes in all. A last line without its
// newline is left for the next read and marks the table Truncated.
func (t *Table) ReadMore(r io.Reader) error {
	if t.Columns == nil {
		t.Columns = map[string][]float64{}
	}
	br := bufio.NewReaderSize(r, maxMetricsLine)
	t.Truncated = false
	for t.Offset < maxMetricsBytes {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// An overlong line: skipped whole, counted bad.
			consumed := int64(len(line))
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				consumed += int64(len(line))
			}
			if err == nil {
				t.Offset += consumed
				t.BadLines++
				continue
			}
		}
		if errors.Is(err, io.EOF) {
			if len(bytes.TrimSpace(line)) > 0 {
				t.Truncated = true // left for the next read
			}
			return nil
		}
		if err != nil {
			return err
		}
		t.Offset += int64(len(line))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		t.addLine(line)
	}
	return nil
}

func (t *Table) addLine(line []byte) {
	var row map[string]json.RawMessage
	if json.Unmarshal(line, &row) != nil {
		t.BadLines++
		return
	}
	var step float64
	if json.Unmarshal(row["step"], &step) != nil || math.IsNaN(step) {
		t.BadLines++
		return
	}
	n := len(t.Steps)
	t.Steps = append(t.Steps, step)
	var phase string
	_ = json.Unmarshal(row["phase"], &phase)
	t.Phases = append(t.Phases, phase)
	for k, raw := range row {
		if k == "step" || len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
			continue
		}
		var v float64
		if json.Unmarshal(raw, &v) != nil || math.IsInf(v, 0) {
			continue
		}
		col, ok := t.Columns[k]
		if !ok {
			if len(t.Columns) >= maxMetricsKeys {
				continue
			}
			col = nanColumn(n)
		}
		t.Columns[k] = append(col, v)
	}
	t.derive(n)
	for k, col := range t.Columns {
		if len(col) == n {
			t.Columns[k] = append(col, math.NaN())
		}
	}
}

// derive adds row n's derived columns: tokens_per_s, the step's tokens
// over its generation and training seconds (as the metrics endpoint's
// rlnode_tokens_per_second).
func (t *Table) derive(n int) {
	at := func(k string) float64 {
		if c := t.Columns[k]; len(c) == n+1 {
			return c[n]
		}
		return math.NaN()
	}
	gen, train := at("gen_s"), at("train_s")
	if math.IsNaN(gen) {
		gen = 0
	}
	if tok, s := at("tokens"), gen+train; !math.IsNaN(tok) && s > 0 {
		col, ok := t.Columns["tokens_per_s"]
		if !ok {
			col = nanColumn(n)
		}
		t.Columns["tokens_per_s"] = append(col, tok/s)
	}
}

func nanColumn(n int) []float64 {
	col := make([]float64, n, n+1)
	for i := range col {
		col[i] = math.NaN()
	}
	return col
}

// ReadTable reads a metrics.jsonl file whole.
func ReadTable(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t := &Table{}
	if err := t.ReadMore(f); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return t, nil
}
