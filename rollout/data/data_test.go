package data

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/rlnode/rlnode/rollout/verify"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadJSONL(t *testing.T) {
	p := writeFile(t, "gsm.jsonl", `{"question": "1+1?", "answer": 2, "meta": {"id": "a"}}

{"question": "Name it", "answer": "x", "meta": {"id": "b"}, "tests": ["assert f(1) == 2", "assert f(2) == 3"]}
`)
	got, err := Load(p, Mapping{Prompt: "question", Answer: "answer", ID: "meta.id"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{ID: "a", Prompt: "1+1?", Ref: verify.Reference{Answer: "2"}},
		{ID: "b", Prompt: "Name it", Ref: verify.Reference{Answer: "x"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestLoadJSONLErrors(t *testing.T) {
	cases := []struct {
		name, text string
		m          Mapping
		want       []string // substrings of the error
	}{
		{"garbled", `{"prompt": "a", "answer": "1"}` + "\n{nope\n", DefaultMapping, []string{"row 1", "line 2", "not a JSON object"}},
		// A column mapped with a typo: the error says which fields the row has.
		{"missing column", `{"prompt": "a", "answr": "1"}`, DefaultMapping, []string{"row 0", `column "answer"`, `no field "answer" (it has "answr", "prompt")`}},
		{"nested missing", `{"q": {"text": "a"}}`, Mapping{Prompt: "q.body"}, []string{`column "q.body"`, `no field "body" (it has "text")`}},
		{"empty object", `{"q": {}}`, Mapping{Prompt: "q.body"}, []string{`no field "body" (it has none)`}},
		{"many fields", manyFields(26), Mapping{Prompt: "prompt"}, []string{`no field "prompt" (it has "f00", "f01"`, `"f19" and 6 more)`}},
		{"long name", `{"` + strings.Repeat("é", 30) + `": 1}`, Mapping{Prompt: "prompt"}, []string{`(it has "` + strings.Repeat("é", 20) + `…")`}},
		{"list index", `{"msgs": [{"content": "a"}]}`, Mapping{Prompt: "msgs.3.content"}, []string{`no element "3" in a list of 1`}},
		{"mistyped", `{"prompt": {"a": 1}}`, Mapping{Prompt: "prompt"}, []string{`column "prompt"`, "an object where a string"}},
		{"tests mistyped", `{"prompt": "p", "tests": [1]}`, Mapping{Prompt: "prompt", Tests: "tests"}, []string{`column "tests"`, "element 0 is a number"}},
		{"empty prompt", `{"prompt": "  "}`, Mapping{Prompt: "prompt"}, []string{"empty prompt"}},
		{"no prompt mapping", `{"prompt": "a"}`, Mapping{}, []string{"no prompt column"}},
		// Two objects on one line (a lost newline): the second was dropped
		// without a word, and so was any text after the first.
		{"two objects on a line", `{"prompt": "a", "answer": "1"}` + "\n" + `  {"prompt": "b", "answer": "2"}{"prompt": "c", "answer": "3"}`, DefaultMapping, []string{"row 1", "line 2", "text after the JSON object at column 33"}},
		// The JSON decoder put U+FFFD in place of the byte: the prompt
		// trained on was not the file's.
		{"not UTF-8", `{"prompt": "a", "answer": "1"}` + "\n" + `{"prompt": "caf` + "\xe9" + `", "answer": "1"}`, DefaultMapping, []string{"row 1", "line 2", "not UTF-8 at byte 16 of the line"}},
		{"text after the object", `{"prompt": "a", "answer": "1"} x`, DefaultMapping, []string{"row 0", "line 1", "column 32"}},
		{"line too long", `{"prompt": "a", "answer": "1"}` + "\n" + `{"prompt": "` + strings.Repeat("a", MaxLineBytes) + `"}`, DefaultMapping, []string{"line 2", "over the 67108864-byte limit for one line"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, "d.jsonl", c.text)
			_, err := Load(p, c.m)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrBadDataset) {
				t.Errorf("error %v is not ErrBadDataset", err)
			}
			for _, w := range append(c.want, p) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if _, err := Load(writeFile(t, "d.tsv", "a\tb"), DefaultMapping); err == nil || !strings.Contains(err.Error(), "unknown dataset format") {
		t.Errorf("tsv: %v", err)
	}
}

// writeParquet writes a small Hugging Face-like dataset: a string question,
// an int answer, a struct with a nested solution and a list of tests.
func writeParquet(t *testing.T, rows int) string {
	t.Helper()
	mem := memory.DefaultAllocator
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "question", Type: arrow.BinaryTypes.String},
		{Name: "answer", Type: arrow.PrimitiveTypes.Int64},
		{Name: "meta", Type: arrow.StructOf(arrow.Field{Name: "solution", Type: arrow.BinaryTypes.String})},
		{Name: "tests", Type: arrow.ListOf(arrow.BinaryTypes.String)},
		{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	for i := range rows {
		b.Field(0).(*array.StringBuilder).Append("q" + string(rune('a'+i%26)))
		b.Field(1).(*array.Int64Builder).Append(int64(i * 10))
		sb := b.Field(2).(*array.StructBuilder)
		sb.Append(true)
		sb.FieldBuilder(0).(*array.StringBuilder).Append("because " + string(rune('a'+i%26)))
		lb := b.Field(3).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.StringBuilder).AppendValues([]string{"assert 1", "assert 2"}, nil)
		b.Field(4).(*array.Float64Builder).AppendNull()
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	p := filepath.Join(t.TempDir(), "train.parquet")
	writeRecord(t, p, rec, parquet.WithCompression(compress.Codecs.Snappy), parquet.WithMaxRowGroupLength(7))
	return p
}

// writeRecord writes rec as the Parquet file p, with the writer options
// given.
func writeRecord(t *testing.T, p string, rec arrow.RecordBatch, opts ...parquet.WriterProperty) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(rec.Schema(), f, parquet.NewWriterProperties(opts...), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestLoadParquet(t *testing.T) {
	p := writeParquet(t, 20)
	got, err := Load(p, Mapping{Prompt: "question", Answer: "answer", Tests: "tests", Setup: "meta.solution"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 20 {
		t.Fatalf("%d rows, want 20", len(got))
	}
	want := Example{ID: "train.parquet:13", Prompt: "qn", Ref: verify.Reference{Answer: "130", Tests: []string{"assert 1", "assert 2"}, Setup: "because n"}}
	if !reflect.DeepEqual(got[13], want) {
		t.Fatalf("row 13: got %+v, want %+v", got[13], want)
	}

	for _, c := range []struct {
		m    Mapping
		want string
	}{
		{Mapping{Prompt: "problem"}, `column "problem": not in the file (columns: question, answer, meta, tests, score)`},
		{Mapping{Prompt: "question", Answer: "score"}, `row 0: column "score": null where a string`},
		{Mapping{Prompt: "question", Answer: "meta"}, `row 0: column "meta": an object where`},
		{Mapping{Prompt: "meta.nope"}, `column "meta.nope": no field "nope"`},
	} {
		_, err := Load(p, c.m)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("mapping %+v: error %v, want it to name %s and %q", c.m, err, p, c.want)
		}
	}
	if _, err := Load(writeFile(t, "bad.parquet", "not parquet"), DefaultMapping); err == nil || !strings.Contains(err.Error(), "read parquet") {
		t.Errorf("garbled parquet: %v", err)
	}
}

func TestSampler(t *testing.T) {
	exs := make([]Example, 5)
	for i := range exs {
		exs[i].ID = string(rune('a' + i))
	}
	ids := func(s *Sampler, n int) string {
		var b strings.Builder
		for {
			batch, err := s.Next(n)
			if err == io.EOF {
				return b.String()
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range batch {
				b.WriteString(e.ID)
			}
			b.WriteString("|")
		}
	}
	s1, _ := NewSampler(exs, 7, 3)
	s2, _ := NewSampler(exs, 7, 3)
	a, b := ids(s1, 2), ids(s2, 2)
	if a != b {
		t.Fatalf("same seed, different orders: %s vs %s", a, b)
	}
	flat := strings.ReplaceAll(a, "|", "")
	if len(flat) != 15 || strings.Count(a, "|") != 8 {
		t.Fatalf("3 epochs of 5 in batches of 2: %s", a)
	}
	for e := range 3 {
		ep := []byte(flat[e*5 : e*5+5])
		seen := map[byte]bool{}
		for _, c := range ep {
			seen[c] = true
		}
		if len(seen) != 5 {
			t.Errorf("epoch %d is not a permutation: %s", e, ep)
		}
	}
	if flat[:5] == flat[5:10] && flat[5:10] == flat[10:] {
		t.Errorf("epochs not reshuffled: %s", flat)
	}
	s3, _ := NewSampler(exs, 8, 3)
	if ids(s3, 2) == a {
		t.Errorf("seeds 7 and 8 give the same order %s", a)
	}
	if _, err := NewSampler(nil, 1, 1); err == nil {
		t.Error("empty dataset accepted")
	}
	s4, _ := NewSampler(exs, 1, 0)
	for range 10 {
		if b, err := s4.Next(3); err != nil || len(b) != 3 {
			t.Fatalf("endless sampler: %d, %v", len(b), err)
		}
	}
	if s4.Epoch() != 6 {
		t.Errorf("epoch %d after 30 of 5, want 6", s4.Epoch())
	}
}

func sampleTurns() []Turn {
	return []Turn{
		{EpisodeID: "g0-s0", GroupID: 0, Sample: 0, Turn: 0, PolicyID: "solver", WeightVersion: 3,
			PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{4, 5}, LogProbs: []float32{-0.1, -0.2}, LossMask: []float32{1, 1},
			Reward: 0, FinalReward: 1, FinishReason: "stop", ResponseText: "ab"},
		{EpisodeID: "g0-s0", GroupID: 0, Sample: 0, Turn: 1, PolicyID: "feedback", WeightVersion: 2,
			PromptIDs: []int32{}, ResponseIDs: []int32{6, 7, 8}, LogProbs: []float32{-1, 0, -3}, LossMask: []float32{1, 0, 1},
			Advantages: []float32{0.5, 0.5, 0.5}, Reward: 1, FinalReward: 1, FinishReason: "length", Note: "truncated"},
		{EpisodeID: "g1-s2", GroupID: 1, Sample: 2, PromptIDs: []int32{9}, ResponseIDs: []int32{}, LogProbs: []float32{}, LossMask: []float32{},
			FinishReason: "stop", Note: "empty answer"},
	}
}

func TestTrajectoryRoundTrip(t *testing.T) {
	want := sampleTurns()
	for _, batchRows := range []int{0, 1, 2} {
		p := filepath.Join(t.TempDir(), "traj.arrow")
		f, _ := os.Create(p)
		if err := WriteTrajectories(f, want, batchRows); err != nil {
			t.Fatal(err)
		}
		f.Close()
		got, err := ReadTrajectoryFile(p)
		if err != nil {
			t.Fatal(err)
		}
		// Empty lists come back empty, not nil.
		norm := func(ts []Turn) []Turn {
			out := append([]Turn(nil), ts...)
			for i := range out {
				for _, s := range []*[]int32{&out[i].PromptIDs, &out[i].ResponseIDs} {
					if len(*s) == 0 {
						*s = []int32{}
					}
				}
				for _, s := range []*[]float32{&out[i].LogProbs, &out[i].LossMask} {
					if len(*s) == 0 {
						*s = []float32{}
					}
				}
			}
			return out
		}
		if !reflect.DeepEqual(norm(got), norm(want)) {
			t.Fatalf("batch rows %d:\ngot  %+v\nwant %+v", batchRows, got, want)
		}
	}
	b, err := MarshalTrajectories(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalTrajectories("reply", b)
	if err != nil || len(got) != 3 || got[1].Note != "truncated" {
		t.Fatalf("bytes round trip: %v %+v", err, got)
	}
	if _, err := UnmarshalTrajectories("reply", b[:len(b)/2]); err == nil || !strings.Contains(err.Error(), "read reply") {
		t.Errorf("truncated bytes: %v", err)
	}
}

func TestTrajectoryRejectsBadTurns(t *testing.T) {
	for _, c := range []struct {
		edit func(*Turn)
		want string
	}{
		{func(t *Turn) { t.LogProbs = t.LogProbs[:1] }, "1 logprobs for 2 response tokens"},
		{func(t *Turn) { t.LossMask = nil }, "0 loss-mask entries"},
		{func(t *Turn) { t.Advantages = []float32{1} }, "1 advantages"},
		{func(t *Turn) { t.Reward = 1 / float64(zero()) }, "not finite"},
	} {
		ts := sampleTurns()
		c.edit(&ts[0])
		_, err := MarshalTrajectories(ts)
		if err == nil || !errors.Is(err, ErrBadTrajectory) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "row 0") {
			t.Errorf("want error with %q, got %v", c.want, err)
		}
	}
}

func zero() int { return 0 }

// writeIPC writes a one-row IPC file whose schema is the trajectory schema
// with column name dropped or retyped to float64.
func writeIPC(t *testing.T, name string, retype bool) string {
	t.Helper()
	rec, err := NewRecord(nil, sampleTurns()[:1])
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	var fields []arrow.Field
	var cols []arrow.Array
	mem := memory.DefaultAllocator
	for i, f := range rec.Schema().Fields() {
		switch {
		case f.Name == name && retype:
			b := array.NewFloat64Builder(mem)
			b.Append(1)
			a := b.NewArray()
			defer a.Release()
			fields = append(fields, arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Float64})
			cols = append(cols, a)
		case f.Name == name:
		default:
			fields = append(fields, f)
			cols = append(cols, rec.Column(i))
		}
	}
	sc := arrow.NewSchema(fields, nil)
	out := array.NewRecordBatch(sc, cols, 1)
	defer out.Release()
	p := filepath.Join(t.TempDir(), "bad.arrow")
	f, _ := os.Create(p)
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(sc))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(out); err != nil {
		t.Fatal(err)
	}
	w.Close()
	f.Close()
	return p
}

func TestReadTrajectoryBadColumns(t *testing.T) {
	for _, c := range []struct {
		col    string
		retype bool
		want   string
	}{
		{ColLogProbs, false, `column "logprobs": missing`},
		{ColFinishReason, true, `column "finish_reason": type float64, want utf8`},
		{ColResponseIDs, true, `column "response_ids": type float64, want list<item: int32, nullable>`},
	} {
		p := writeIPC(t, c.col, c.retype)
		_, err := ReadTrajectoryFile(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v, want it to name %s and %q", c.col, err, p, c.want)
		}
	}
	if _, err := ReadTrajectoryFile(writeFile(t, "x.arrow", "garbage")); err == nil || !strings.Contains(err.Error(), "not an Arrow IPC file") {
		t.Errorf("garbage file: %v", err)
	}
}

// A damaged Parquet file is an error naming it, never a crash nor a
// dataset that silently lost rows. Each case changes one byte of the
// footer (where the schema, row groups and row counts are); before,
// arrow-go's reader panicked on some ("makeslice: cap out of range") and
// read fewer rows than the file has on others (a row group's count turned
// negative).
func TestLoadDamagedParquet(t *testing.T) {
	p := writeParquet(t, 20)
	src, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	footer := int(binary.LittleEndian.Uint32(src[len(src)-8:]))
	start := len(src) - 8 - footer
	r := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	m := Mapping{Prompt: "question", Answer: "answer"}
	for i := range 600 {
		b := append([]byte(nil), src...)
		at, v := start+r.IntN(footer), byte(r.IntN(256))
		b[at] = v
		bad := filepath.Join(dir, "bad.parquet")
		if err := os.WriteFile(bad, b, 0o644); err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if e := recover(); e != nil {
					t.Errorf("case %d (byte %d = %#x): panic: %v", i, at, v, e)
				}
			}()
			got, err := Load(bad, m)
			switch {
			case err != nil && !strings.Contains(err.Error(), bad):
				t.Errorf("case %d (byte %d = %#x): error does not name the file: %v", i, at, v, err)
			case err == nil && len(got) != 20:
				t.Errorf("case %d (byte %d = %#x): %d rows without an error, want 20", i, at, v, len(got))
			}
		}()
	}
}

// Every dataset format is capped: the file's size, and for Parquet the
// uncompressed column data its footer declares (a small file can declare
// far more than it holds, and the reader allocates what it declares).
func TestLoadCapsDatasetSize(t *testing.T) {
	m := Mapping{Prompt: "question", Answer: "answer"}
	big := filepath.Join(t.TempDir(), "big.jsonl")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, MaxDatasetBytes+1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	if _, err := Load(big, m); err == nil || !strings.Contains(err.Error(), "over the 1073741824-byte limit") || !errors.Is(err, ErrBadDataset) {
		t.Errorf("a file over the limit: %v", err)
	}
	p := writeParquet(t, 200)
	if _, err := Load(p, m); err != nil {
		t.Fatal(err)
	}
	defer func(prev int64) { datasetLimit = prev }(datasetLimit)
	datasetLimit = 100 // past Load's check of the file's size: the footer's declaration alone
	if _, err := loadParquet(context.Background(), p, m); err == nil || !strings.Contains(err.Error(), "uncompressed column data") || !strings.Contains(err.Error(), p) {
		t.Errorf("a Parquet file declaring more than the limit: %v", err)
	}
}

// A load stops once its context is done, with an error wrapping the
// context's that names the file: a file near MaxDatasetBytes takes tens
// of seconds, and a run's Ctrl-C waited for it. A live context loads
// every row.
func TestLoadContextStops(t *testing.T) {
	dir := t.TempDir()
	const rows = 3000
	var jl, cv strings.Builder
	cv.WriteString("question,answer\n")
	for i := range rows {
		fmt.Fprintf(&jl, "{\"question\": \"q%d\", \"answer\": \"%d\"}\n", i, i)
		fmt.Fprintf(&cv, "q%d,%d\n", i, i)
	}
	files := map[string]string{"train.jsonl": jl.String(), "train.csv": cv.String()}
	var paths []string
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	paths = append(paths, writeParquet(t, rows))
	for _, p := range paths {
		m := Mapping{Prompt: "question", Answer: "answer"}
		if ex, err := LoadContext(context.Background(), p, m); err != nil || len(ex) != rows {
			t.Fatalf("%s: %d rows, %v; want %d", p, len(ex), err, rows)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ex, err := LoadContext(ctx, p, m)
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), filepath.Base(p)) || ex != nil {
			t.Errorf("%s with an ended context: %d rows, %v; want context.Canceled naming the file", p, len(ex), err)
		}
	}
}

// A Parquet dataset whose footer says a column chunk lies past the file
// (a terabyte long) or has a negative length is an error naming the file
// and the column. Before, arrow-go's reader allocated the declared length
// (the process died: "fatal error: runtime: out of memory") or, for a
// struct's field, panicked in a goroutine of its own, past Load's recover.
func TestLoadParquetColumnChunkOutsideTheFile(t *testing.T) {
	src, err := os.ReadFile(writeParquet(t, 20))
	if err != nil {
		t.Fatal(err)
	}
	m := Mapping{Prompt: "question", Answer: "meta.solution"}
	for _, c := range []struct {
		column string
		length int64
	}{{"question", 1 << 40}, {"meta.solution", -70}} {
		n := int(binary.LittleEndian.Uint32(src[len(src)-8:]))
		start := len(src) - 8 - n
		md, err := metadata.NewFileMetaData(src[start:len(src)-8], nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, col := range md.RowGroups[0].Columns {
			if strings.Join(col.MetaData.PathInSchema, ".") == c.column {
				col.MetaData.TotalCompressedSize = c.length
			}
		}
		var footer bytes.Buffer
		if _, err := md.WriteTo(&footer, nil); err != nil {
			t.Fatal(err)
		}
		b := append(append([]byte(nil), src[:start]...), footer.Bytes()...)
		b = append(binary.LittleEndian.AppendUint32(b, uint32(footer.Len())), "PAR1"...)
		p := filepath.Join(t.TempDir(), "bad.parquet")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = Load(p, m)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "column "+c.column) || !errors.Is(err, ErrBadDataset) {
			t.Errorf("column %s declaring %d bytes: %v; want ErrBadDataset naming the file and the column", c.column, c.length, err)
		}
	}
}

// A Parquet string cell that is not UTF-8 is an error naming the file, the
// row and the column, as in a JSONL or CSV file.
func TestLoadParquetNotUTF8(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{{Name: "question", Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).AppendValues([]string{"tea", "caf\xe9"}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	p := filepath.Join(t.TempDir(), "d.parquet")
	writeRecord(t, p, rec)
	_, err := Load(p, Mapping{Prompt: "question"})
	if err == nil || !strings.Contains(err.Error(), p+`: row 1: column "question": not UTF-8 at byte 4`) || !errors.Is(err, ErrBadDataset) {
		t.Errorf("error %v, want the file, row 1, the column and the byte", err)
	}
}

// A dataset or trajectory path that is a pipe or a device is an error
// naming it, before it is opened: opening a pipe waited for a writer.
func TestLoadNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	pipe := filepath.Join(dir, "train.jsonl")
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	zero := filepath.Join(dir, "train.csv")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	traj := filepath.Join(dir, "t.arrow")
	if err := syscall.Mkfifo(traj, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		load func() error
		want string
	}{
		{pipe, func() error { _, err := Load(pipe, DefaultMapping); return err }, "a named pipe, not a regular file"},
		{zero, func() error { _, err := Load(zero, DefaultMapping); return err }, "a device, not a regular file"},
		{traj, func() error { _, err := ReadTrajectoryFile(traj); return err }, "a named pipe, not a regular file"},
	} {
		done := make(chan error, 1)
		go func() { done <- c.load() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.path+": "+c.want) {
				t.Errorf("%s: %v, want %q", c.path, err, c.want)
			}
		case <-time.After(time.Minute):
			for _, p := range []string{pipe, traj} {
				if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
			}
			t.Fatalf("%s: the load blocked", c.path)
		}
	}
}

// A Parquet file of kilobytes whose one value, stored once in a
// dictionary, repeats in every row decodes to far more than the file and
// its footer declare: its loading stops at twice the dataset limit in
// memory, an error naming the file. Before, it loaded whole: 20 MB of
// prompts from a 20 KB file under a 10 MB limit (1000 times the file; a
// 1 MB file of this kind decodes to a gigabyte).
func TestLoadParquetDictionaryBomb(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{{Name: "question", Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	q := strings.Repeat("x", 1000)
	for range 20000 {
		b.Field(0).(*array.StringBuilder).Append(q)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	p := filepath.Join(t.TempDir(), "bomb.parquet")
	writeRecord(t, p, rec, parquet.WithCompression(compress.Codecs.Zstd))
	if st, err := os.Stat(p); err != nil || st.Size() > 100<<10 {
		t.Fatalf("the file: %v, %v; want under 100 KiB", st, err)
	}
	defer func(prev int64) { datasetLimit = prev }(datasetLimit)
	datasetLimit = 10 << 20
	_, err := Load(p, Mapping{Prompt: "question"})
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "over 20971520 bytes in memory") || !errors.Is(err, ErrBadDataset) {
		t.Errorf("error %v, want ErrBadDataset naming the file and the memory limit", err)
	}
	datasetLimit = 30 << 20 // room for it: it loads
	if ex, err := Load(p, Mapping{Prompt: "question"}); err != nil || len(ex) != 20000 {
		t.Errorf("under a 30 MB limit: %d rows, %v", len(ex), err)
	}
}

// manyFields is a JSONL row of n fields f00, f01, ...
func manyFields(n int) string {
	fields := make([]string, n)
	for i := range fields {
		fields[i] = fmt.Sprintf(`"f%02d": 1`, i)
	}
	return "{" + strings.Join(fields, ", ") + "}"
}
