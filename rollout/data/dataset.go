package data

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/rlnode/rlnode/internal/pqread"
	"github.com/rlnode/rlnode/internal/readfile"
	"github.com/rlnode/rlnode/rollout/verify"
)

// Example is one problem of a dataset: the prompt shown to the policy and
// the reference its answers are verified against.
type Example struct {
	ID     string           `msgpack:"id" json:"id"`
	Prompt string           `msgpack:"p" json:"prompt"`
	Ref    verify.Reference `msgpack:"r" json:"ref"`
	// Hint is what only MLMT's feedback policy may see (the feedback
	// prompt's .Hint); empty when the data has none.
	Hint string `msgpack:"h,omitempty" json:"hint,omitempty"`
	// Groups are the values of the mapping's Groups columns, in their
	// order (e.g. MATH-500's subject and level): evaluation reports
	// accuracy per value. Nil when the mapping names none.
	Groups []string `msgpack:"g,omitempty" json:"groups,omitempty"`
}

// Mapping says which source column fills which Example field. A column is
// a path: "question", or "meta.answer" for a nested field, or
// "messages.0.content" for an element of a list. Empty Answer, Tests,
// Setup and ID leave those fields empty (ID then defaults to "FILE:ROW").
type Mapping struct {
	Prompt string `json:"prompt" yaml:"prompt"`
	Answer string `json:"answer,omitempty" yaml:"answer,omitempty"`
	Tests  string `json:"tests,omitempty" yaml:"tests,omitempty"` // a list of strings, or one string
	Setup  string `json:"setup,omitempty" yaml:"setup,omitempty"`
	ID     string `json:"id,omitempty" yaml:"id,omitempty"`
	// Groups are columns whose values (strings or numbers) break an
	// evaluation down, e.g. subject and level; each is required in
	// every row.
	Groups []string `json:"groups,omitempty" yaml:"groups,omitempty"`
}

// columns are the paths the mapping reads, empty ones left out.
func (m Mapping) columns() []string {
	var out []string
	for _, p := range append([]string{m.Prompt, m.Answer, m.Tests, m.Setup, m.ID}, m.Groups...) {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// DefaultMapping reads columns named "prompt" and "answer".
var DefaultMapping = Mapping{Prompt: "prompt", Answer: "answer"}

// ErrBadDataset marks source rows that do not fit the mapping.
var ErrBadDataset = errors.New("bad dataset")

// ColumnError is a file or row that lacks, or cannot read, a column the
// mapping names: Column is the mapping's path for it, so that a recipe's
// check can name the field that maps it.
type ColumnError struct {
	Column string
	Err    error
}

func (e *ColumnError) Error() string { return e.Err.Error() }
func (e *ColumnError) Unwrap() error { return e.Err }

// MaxLineBytes caps one JSONL line.
const MaxLineBytes = 64 << 20

// MaxDatasetBytes caps a dataset file of any format, and the uncompressed
// column data a Parquet file's footer declares: a dataset is read whole into
// memory, and a recipe may name any file.
const MaxDatasetBytes = 1 << 30

// datasetLimit is MaxDatasetBytes, lowered by tests.
var datasetLimit int64 = MaxDatasetBytes

// Load reads a dataset file: ".jsonl" (one JSON object a line; blank lines
// skipped), ".parquet" or ".csv" (a header row; loadCSV). Errors name the file, the row (0-based, counting
// data rows) and the column.
func Load(path string, m Mapping) ([]Example, error) {
	return LoadContext(context.Background(), path, m)
}

// LoadContext is Load that gives up once ctx is done, checked every
// checkEvery rows (and by the Parquet reader), with an error wrapping
// ctx's: a file near MaxDatasetBytes takes tens of seconds to read.
func LoadContext(ctx context.Context, path string, m Mapping) ([]Example, error) {
	if m.Prompt == "" {
		return nil, fmt.Errorf("load %s: mapping has no prompt column: %w", path, ErrBadDataset)
	}
	// A pipe or a device is refused before it is opened: opening a pipe
	// waits for a writer, and /dev/zero has no end.
	st, err := readfile.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("load dataset: %w", err)
		}
		return nil, fmt.Errorf("load dataset: %w: %w", err, ErrBadDataset)
	}
	if st.Size() > datasetLimit {
		return nil, fmt.Errorf("load %s: %d bytes, over the %d-byte limit for a dataset file: %w", path, st.Size(), datasetLimit, ErrBadDataset)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl", ".ndjson":
		return loadJSONL(ctx, path, m)
	case ".parquet":
		return loadParquet(ctx, path, m)
	case ".csv":
		return loadCSV(ctx, path, m)
	}
	return nil, fmt.Errorf("load %s: unknown dataset format %q (want .jsonl, .parquet or .csv): %w", path, filepath.Ext(path), ErrBadDataset)
}

// checkEvery is how many rows a load reads between looks at its context.
const checkEvery = 1024

// stopped is ctx's error, wrapped to name the file and the row reached,
// when row is a multiple of checkEvery and ctx is done.
func stopped(ctx context.Context, path string, row int) error {
	if row%checkEvery != 0 || ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("load %s: stopped at row %d: %w", path, row, context.Cause(ctx))
}

func loadJSONL(ctx context.Context, path string, m Mapping) ([]Example, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load dataset: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	var out []Example
	line := 0
	for sc.Scan() {
		line++
		if err := stopped(ctx, path, line); err != nil {
			return nil, err
		}
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if !utf8.Valid(b) {
			// The JSON decoder would put U+FFFD in place of the bytes:
			// the prompt trained on would not be the file's.
			return nil, fmt.Errorf("load %s: row %d (line %d): not UTF-8 at byte %d of the line (a file in another encoding, or one cut mid-character): %w", path, len(out), line, InvalidUTF8At(sc.Bytes())+1, ErrBadDataset)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var row map[string]any
		if err := dec.Decode(&row); err != nil {
			return nil, fmt.Errorf("load %s: row %d (line %d): not a JSON object: %v: %w", path, len(out), line, err, ErrBadDataset)
		}
		if rest := bytes.TrimLeft(b[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
			// A second object on the line (a lost newline) would be a row
			// dropped without a word.
			col := len(sc.Bytes()) - len(bytes.TrimLeft(sc.Bytes(), " \t\r\n")) + len(b) - len(rest) + 1
			return nil, fmt.Errorf("load %s: row %d (line %d): text after the JSON object at column %d (one object a line): %w", path, len(out), line, col, ErrBadDataset)
		}
		ex, err := m.example(path, len(out), row)
		if err != nil {
			return nil, fmt.Errorf("load %s: line %d: %w", path, line, err)
		}
		out = append(out, ex)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("load %s: line %d: over the %d-byte limit for one line: %w", path, line+1, MaxLineBytes, ErrBadDataset)
	} else if err != nil {
		return nil, fmt.Errorf("load %s: after line %d: %w", path, line, err)
	}
	return out, nil
}

func loadParquet(ctx context.Context, path string, m Mapping) ([]Example, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load dataset: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	tbl, err := pqread.ReadTable(ctx, f, st.Size(), datasetLimit)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("load %s: read parquet: %w", path, err)
		}
		return nil, fmt.Errorf("load %s: read parquet: %w: %w", path, err, ErrBadDataset)
	}
	defer tbl.Release()
	sc := tbl.Schema()
	// Only the columns the mapping names are converted.
	var cols []int
	for _, p := range m.columns() {
		top, _, _ := strings.Cut(p, ".")
		idx := sc.FieldIndices(top)
		if len(idx) == 0 {
			return nil, &ColumnError{Column: p, Err: fmt.Errorf("load %s: column %q: not in the file (columns: %s): %w", path, top, columnNames(sc), ErrBadDataset)}
		}
		cols = append(cols, idx[0])
	}
	tr := array.NewTableReader(tbl, 4096)
	defer tr.Release()
	var out []Example
	for tr.Next() {
		rec := tr.RecordBatch()
		for r := range int(rec.NumRows()) {
			if err := stopped(ctx, path, len(out)+1); err != nil {
				return nil, err
			}
			row := make(map[string]any, len(cols))
			for _, c := range cols {
				v, err := arrowValue(rec.Column(c), r)
				if err != nil {
					return nil, fmt.Errorf("load %s: row %d: column %q: %v: %w", path, len(out), sc.Field(c).Name, err, ErrBadDataset)
				}
				row[sc.Field(c).Name] = v
			}
			ex, err := m.example(path, len(out), row)
			if err != nil {
				return nil, fmt.Errorf("load %s: %w", path, err)
			}
			out = append(out, ex)
		}
	}
	if err := tr.Err(); err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return out, nil
}

func columnNames(sc *arrow.Schema) string {
	names := make([]string, sc.NumFields())
	for i, f := range sc.Fields() {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}

// InvalidUTF8At is the index of the first byte of b that does not start a
// valid UTF-8 character, or -1: where an error about a file's text points.
func InvalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// text is a string cell, which must be UTF-8: a prompt of other bytes
// would reach the tokenizer as something other than the file's text.
func text(s string) (any, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("not UTF-8 at byte %d", InvalidUTF8At([]byte(s))+1)
	}
	return s, nil
}

// arrowValue converts one cell to the JSON-like values the mapping walks:
// string, json.Number, bool, nil, []any, map[string]any.
func arrowValue(a arrow.Array, i int) (any, error) {
	if a.IsNull(i) {
		return nil, nil
	}
	switch a := a.(type) {
	case *array.String:
		return text(a.Value(i))
	case *array.LargeString:
		return text(a.Value(i))
	case *array.StringView:
		return text(a.Value(i))
	case *array.Binary:
		return text(string(a.Value(i)))
	case *array.LargeBinary:
		return text(string(a.Value(i)))
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Int8:
		return json.Number(strconv.FormatInt(int64(a.Value(i)), 10)), nil
	case *array.Int16:
		return json.Number(strconv.FormatInt(int64(a.Value(i)), 10)), nil
	case *array.Int32:
		return json.Number(strconv.FormatInt(int64(a.Value(i)), 10)), nil
	case *array.Int64:
		return json.Number(strconv.FormatInt(a.Value(i), 10)), nil
	case *array.Uint8:
		return json.Number(strconv.FormatUint(uint64(a.Value(i)), 10)), nil
	case *array.Uint16:
		return json.Number(strconv.FormatUint(uint64(a.Value(i)), 10)), nil
	case *array.Uint32:
		return json.Number(strconv.FormatUint(uint64(a.Value(i)), 10)), nil
	case *array.Uint64:
		return json.Number(strconv.FormatUint(a.Value(i), 10)), nil
	case *array.Float32:
		return json.Number(strconv.FormatFloat(float64(a.Value(i)), 'g', -1, 32)), nil
	case *array.Float64:
		return json.Number(strconv.FormatFloat(a.Value(i), 'g', -1, 64)), nil
	case array.ListLike:
		s, e := a.ValueOffsets(i)
		vals := a.ListValues()
		out := make([]any, 0, e-s)
		for j := s; j < e; j++ {
			v, err := arrowValue(vals, int(j))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		out := make(map[string]any, a.NumField())
		for f := range a.NumField() {
			v, err := arrowValue(a.Field(f), i)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", st.Field(f).Name, err)
			}
			out[st.Field(f).Name] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported Arrow type %s", a.DataType())
}

func (m Mapping) example(path string, row int, v map[string]any) (Example, error) {
	ex := Example{ID: fmt.Sprintf("%s:%d", filepath.Base(path), row)}
	str := func(col string, dst *string) error {
		if col == "" {
			return nil
		}
		x, err := lookup(v, col)
		if err == nil {
			*dst, err = scalarString(x)
		}
		if err != nil {
			return &ColumnError{Column: col, Err: fmt.Errorf("row %d: column %q: %w: %w", row, col, err, ErrBadDataset)}
		}
		return nil
	}
	if err := str(m.Prompt, &ex.Prompt); err != nil {
		return Example{}, err
	}
	if err := str(m.Answer, &ex.Ref.Answer); err != nil {
		return Example{}, err
	}
	if m.Setup != "" {
		// A list (MBPP-sanitized's test_imports) is lines of setup code.
		x, err := lookup(v, m.Setup)
		if l, ok := x.([]any); ok && err == nil {
			var lines []string
			if lines, err = stringList(l); err == nil {
				ex.Ref.Setup = strings.Join(lines, "\n")
			}
		} else if err == nil {
			ex.Ref.Setup, err = scalarString(x)
		}
		if err != nil {
			return Example{}, &ColumnError{Column: m.Setup, Err: fmt.Errorf("row %d: column %q: %w: %w", row, m.Setup, err, ErrBadDataset)}
		}
	}
	if err := str(m.ID, &ex.ID); err != nil {
		return Example{}, err
	}
	for _, col := range m.Groups {
		var g string
		if err := str(col, &g); err != nil {
			return Example{}, err
		}
		ex.Groups = append(ex.Groups, g)
	}
	if m.Tests != "" {
		x, err := lookup(v, m.Tests)
		if err == nil {
			ex.Ref.Tests, err = stringList(x)
		}
		if err != nil {
			return Example{}, &ColumnError{Column: m.Tests, Err: fmt.Errorf("row %d: column %q: %w: %w", row, m.Tests, err, ErrBadDataset)}
		}
	}
	if strings.TrimSpace(ex.Prompt) == "" {
		return Example{}, &ColumnError{Column: m.Prompt, Err: fmt.Errorf("row %d: column %q: empty prompt: %w", row, m.Prompt, ErrBadDataset)}
	}
	return ex, nil
}

// lookup walks a dotted path through objects and lists.
func lookup(v any, path string) (any, error) {
	cur := v
	for seg := range strings.SplitSeq(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[seg]
			if !ok {
				return nil, fmt.Errorf("no field %q (%s)", seg, fieldNames(c))
			}
			cur = next
		case []any:
			k, err := strconv.Atoi(seg)
			if err != nil || k < 0 || k >= len(c) {
				return nil, fmt.Errorf("no element %q in a list of %d", seg, len(c))
			}
			cur = c[k]
		case nil:
			return nil, fmt.Errorf("null before %q", seg)
		default:
			return nil, fmt.Errorf("%s has no field %q", kindOf(cur), seg)
		}
	}
	return cur, nil
}

// fieldNames says which fields an object has, for the error that names
// one it lacks (a column mapped with a typo): sorted, quoted, at most
// maxNamesShown of them, each cut to maxNameShown bytes (rows may be
// anyone's).
func fieldNames(obj map[string]any) string {
	if len(obj) == 0 {
		return "it has none"
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("it has ")
	for i, k := range names {
		if i == maxNamesShown {
			fmt.Fprintf(&b, " and %d more", len(names)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		if len(k) > maxNameShown {
			k = strings.ToValidUTF8(k[:maxNameShown], "") + "…"
		}
		fmt.Fprintf(&b, "%q", k)
	}
	return b.String()
}

const (
	maxNamesShown = 20
	maxNameShown  = 40
)

func scalarString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	}
	return "", fmt.Errorf("%s where a string or number is needed", kindOf(v))
}

func stringList(v any) ([]string, error) {
	if s, ok := v.(string); ok {
		return []string{s}, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s where a list of strings is needed", kindOf(v))
	}
	out := make([]string, len(l))
	for i, x := range l {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("element %d is %s, not a string", i, kindOf(x))
		}
		out[i] = s
	}
	return out, nil
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// Sampler hands out batches of examples in seeded random order, epoch after
// epoch: each epoch is a fresh permutation drawn from (seed, epoch), so a
// run restarted with the same seed sees the same order. A batch that runs
// past the end of an epoch continues into the next one.
type Sampler struct {
	examples []Example
	seed     uint64
	epochs   int // 0: no end
	epoch    int
	pos      int
	order    []int
}

// NewSampler samples from examples for epochs epochs (0: without end).
func NewSampler(examples []Example, seed uint64, epochs int) (*Sampler, error) {
	if len(examples) == 0 {
		return nil, fmt.Errorf("sampler: no examples: %w", ErrBadDataset)
	}
	if epochs < 0 {
		return nil, fmt.Errorf("sampler: %d epochs: %w", epochs, ErrBadDataset)
	}
	s := &Sampler{examples: examples, seed: seed, epochs: epochs}
	s.shuffle()
	return s, nil
}

func (s *Sampler) shuffle() {
	r := rand.New(rand.NewPCG(s.seed, uint64(s.epoch)))
	s.order = r.Perm(len(s.examples))
	s.pos = 0
}

// Epoch is the 0-based epoch the next example comes from.
func (s *Sampler) Epoch() int {
	if s.pos == len(s.order) && (s.epochs == 0 || s.epoch < s.epochs) {
		return s.epoch + 1
	}
	return s.epoch
}

// Next returns up to n examples. After the last epoch it returns io.EOF;
// the final batch may be short.
func (s *Sampler) Next(n int) ([]Example, error) {
	if n <= 0 {
		return nil, fmt.Errorf("sampler: batch size %d: %w", n, ErrBadDataset)
	}
	var out []Example
	for len(out) < n {
		if s.pos == len(s.order) {
			if s.epochs > 0 && s.epoch+1 >= s.epochs {
				s.epoch = s.epochs
				break
			}
			s.epoch++
			s.shuffle()
		}
		if s.epochs > 0 && s.epoch >= s.epochs {
			break
		}
		out = append(out, s.examples[s.order[s.pos]])
		s.pos++
	}
	if len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil
}
