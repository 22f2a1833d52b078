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
	"strconv"
	"strings"
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

	scratch []field
	keys    map[string]string // interned field names
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
	n := 0
	for _, v := range col {
		if !math.IsNaN(v) {
			n++
		}
	}
	xs, ys = make([]float64, 0, n), make([]float64, 0, n)
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
	if t.keys == nil {
		t.keys = map[string]string{}
	}
	fields, ok := parseFlatObject(line, t.scratch[:0], t.keys)
	if !ok {
		fields, ok = parseObjectSlow(line, fields[:0])
	}
	t.scratch = fields
	step, phase := math.NaN(), ""
	for _, f := range fields {
		switch {
		case f.key == "step" && f.isNum:
			step = f.num
		case f.key == "phase" && !f.isNum:
			phase = f.str
		}
	}
	if !ok || math.IsNaN(step) {
		t.BadLines++
		return
	}
	n := len(t.Steps)
	t.Steps = append(t.Steps, step)
	t.Phases = append(t.Phases, phase)
	for _, f := range fields {
		if !f.isNum || f.key == "step" || math.IsInf(f.num, 0) || math.IsNaN(f.num) {
			continue
		}
		col, ok := t.Columns[f.key]
		if !ok {
			if len(t.Columns) >= maxMetricsKeys {
				continue
			}
			col = nanColumn(n)
		}
		if len(col) == n { // a key given twice in one row counts once
			t.Columns[f.key] = append(col, f.num)
		}
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

// field is one member of a metrics row: a number, or a string (other
// values are left out).
type field struct {
	key   string
	isNum bool
	num   float64
	str   string
}

// parseFlatObject reads a JSON object whose values are numbers, strings,
// null or booleans, without escapes in keys: the rows rlnode writes. ok
// is false for anything else (parseObjectSlow reads it then).
func parseFlatObject(b []byte, out []field, keys map[string]string) ([]field, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return out, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return out, skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return out, false
		}
		end := i + 1
		for end < len(b) && b[end] != '"' && b[end] != '\\' {
			end++
		}
		if end >= len(b) || b[end] != '"' {
			return out, false
		}
		key, ok := keys[string(b[i+1:end])]
		if !ok && len(keys) < 4*maxMetricsKeys {
			key = string(b[i+1 : end])
			keys[key] = key
		} else if !ok {
			key = string(b[i+1 : end])
		}
		i = skipSpace(b, end+1)
		if i >= len(b) || b[i] != ':' {
			return out, false
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return out, false
		}
		switch c := b[i]; {
		case c == '-' || c >= '0' && c <= '9':
			j := i
			for j < len(b) && strings.IndexByte("+-.eE0123456789", b[j]) >= 0 {
				j++
			}
			v, err := strconv.ParseFloat(string(b[i:j]), 64)
			if err != nil {
				return out, false
			}
			out = append(out, field{key: key, isNum: true, num: v})
			i = j
		case c == '"':
			j := i + 1
			for j < len(b) && b[j] != '"' && b[j] != '\\' {
				j++
			}
			if j >= len(b) || b[j] != '"' {
				return out, false
			}
			out = append(out, field{key: key, str: string(b[i+1 : j])})
			i = j + 1
		case bytes.HasPrefix(b[i:], []byte("null")):
			i += 4
		case bytes.HasPrefix(b[i:], []byte("true")):
			i += 4
		case bytes.HasPrefix(b[i:], []byte("false")):
			i += 5
		default:
			return out, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return out, false
		}
		if b[i] == '}' {
			return out, skipSpace(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return out, false
		}
		i = skipSpace(b, i+1)
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// parseObjectSlow reads any JSON object with encoding/json: its numbers
// and strings at the top level.
func parseObjectSlow(b []byte, out []field) ([]field, bool) {
	var row map[string]any
	if json.Unmarshal(b, &row) != nil {
		return out, false
	}
	for k, v := range row {
		switch v := v.(type) {
		case float64:
			out = append(out, field{key: k, isNum: true, num: v})
		case string:
			out = append(out, field{key: k, str: v})
		}
	}
	return out, true
}
