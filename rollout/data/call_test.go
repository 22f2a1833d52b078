package data

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// emptyNotNil makes empty token lists empty, not nil, as reading gives
// them.
func emptyNotNil(ts []Turn) []Turn {
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

func turnsWithCalls() []Turn {
	turns := sampleTurns()
	t0 := time.Date(2026, 11, 27, 19, 0, 0, 123456789, time.UTC)
	turns[0].Call = Call{Model: "Qwen/Qwen2.5-0.5B", Start: t0, End: t0.Add(250 * time.Millisecond),
		Prompt: "What is 2 + 3?\n", PromptBytes: 15}
	turns[1].Call = Call{Model: "feedback-model", Start: t0.Add(time.Second), End: t0.Add(2 * time.Second), EndShared: true,
		Messages:    []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Check: 5"}},
		PromptBytes: 17,
		Tools: []ToolCall{{Name: "calculate", Arguments: "2+3", Result: "5", Start: t0.Add(1100 * time.Millisecond), End: t0.Add(1200 * time.Millisecond), TokensFrom: 2, TokensTo: 5},
			{Name: "python", Arguments: `{"code": "1/0"}`, Error: "sandbox: killed", Start: t0.Add(1300 * time.Millisecond), End: t0.Add(1400 * time.Millisecond)}}}
	return turns
}

// A turn's call (model, times, prompt, tools) comes back as it was written,
// through the bytes a rollout actor sends.
func TestCallRoundTrip(t *testing.T) {
	want := turnsWithCalls()
	b, err := MarshalTrajectories(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalTrajectories("reply", b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i].Call, want[i].Call) {
			t.Errorf("row %d: call\n%+v, want\n%+v", i, got[i].Call, want[i].Call)
		}
		got[i].Call, want[i].Call = Call{}, Call{}
	}
	if !reflect.DeepEqual(emptyNotNil(got), emptyNotNil(want)) {
		t.Errorf("training columns changed:\n%+v\nwant\n%+v", got, want)
	}
}

// A file of the v2 schema (no call columns: written before them) reads
// with the zero Call and the same training rows.
func TestReadTrajectoriesWithoutCallColumns(t *testing.T) {
	want := sampleTurns()
	rec, err := NewRecord(nil, want)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	v2 := arrow.NewSchema(trainingFields, nil)
	old := array.NewRecordBatch(v2, rec.Columns()[:len(trainingFields)], rec.NumRows())
	defer old.Release()
	var buf bytes.Buffer
	fw, err := ipc.NewFileWriter(&buf, ipc.WithSchema(v2))
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(old); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalTrajectories("v2", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(emptyNotNil(got), emptyNotNil(want)) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
}

// A call column of another type, or a JSON column that is not the JSON it
// should be, is refused naming the column.
func TestBadCallColumns(t *testing.T) {
	cases := []struct {
		name  string
		field arrow.Field
		value func(b array.Builder)
		want  string
	}{
		{"model as int64", arrow.Field{Name: ColModel, Type: arrow.PrimitiveTypes.Int64},
			func(b array.Builder) { b.(*array.Int64Builder).Append(1) }, `column "model": type int64, want utf8`},
		{"tool calls not JSON", arrow.Field{Name: ColToolCalls, Type: arrow.BinaryTypes.String},
			func(b array.Builder) { b.(*array.StringBuilder).Append("[{") }, `column "tool_calls": not a JSON list of tool calls`},
		{"messages not a list", arrow.Field{Name: ColPromptMessages, Type: arrow.BinaryTypes.String},
			func(b array.Builder) { b.(*array.StringBuilder).Append(`{"role": "user"}`) }, `column "prompt_messages": not a JSON list of messages`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			turns := sampleTurns()[:1]
			rec, err := NewRecord(nil, turns)
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Release()
			b := array.NewBuilder(memory.DefaultAllocator, c.field.Type)
			c.value(b)
			col := b.NewArray()
			defer col.Release()
			sc := arrow.NewSchema(append(append([]arrow.Field(nil), trainingFields...), c.field), nil)
			bad := array.NewRecordBatch(sc, append(append([]arrow.Array(nil), rec.Columns()[:len(trainingFields)]...), col), 1)
			defer bad.Release()
			_, err = TurnsFromRecord(bad)
			if err == nil || !errors.Is(err, ErrBadTrajectory) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v; want ErrBadTrajectory saying %q", err, c.want)
			}
		})
	}
}

// CutPrompt keeps a prompt whole up to MaxPromptBytes and cuts it past
// that at a character boundary, marked, valid UTF-8, with the whole
// prompt's size kept.
func TestCutPrompt(t *testing.T) {
	long := strings.Repeat("é", MaxPromptBytes) // 2 bytes each: cut mid-way
	cases := []struct {
		name      string
		text      string
		msgs      []Message
		wantBytes int64
		cut       bool
	}{
		{"short text", "What is 2 + 3?", nil, 14, false},
		{"text at the bound", strings.Repeat("a", MaxPromptBytes), nil, MaxPromptBytes, false},
		{"long text", long, nil, int64(len(long)), true},
		{"invalid UTF-8", "a\xffb", nil, 3, false},
		{"short chat", "", []Message{{Role: "user", Content: "hi"}}, 2, false},
		{"long chat", "", []Message{{Role: "system", Content: "rules"}, {Role: "user", Content: long}, {Role: "assistant", Content: "x"}, {Role: "user", Content: "y"}},
			int64(5 + len(long) + 2), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var call Call
			call.CutPrompt(c.text, c.msgs)
			if call.PromptBytes != c.wantBytes {
				t.Errorf("PromptBytes %d, want %d", call.PromptBytes, c.wantBytes)
			}
			kept := call.Prompt
			for _, m := range call.Messages {
				kept += m.Content
			}
			if len(kept) > MaxPromptBytes || !utf8.ValidString(kept) {
				t.Errorf("kept %d bytes (valid UTF-8: %v), want at most %d, valid", len(kept), utf8.ValidString(kept), MaxPromptBytes)
			}
			if got := strings.Contains(kept, CutMark); got != c.cut {
				t.Errorf("cut mark present %v, want %v", got, c.cut)
			}
			if c.msgs != nil {
				if len(call.Messages) != len(c.msgs) {
					t.Fatalf("%d messages kept, want %d (roles kept, contents cut)", len(call.Messages), len(c.msgs))
				}
				for i, m := range call.Messages {
					if m.Role != c.msgs[i].Role {
						t.Errorf("message %d: role %q, want %q", i, m.Role, c.msgs[i].Role)
					}
				}
				if call.Messages[0].Content != c.msgs[0].Content {
					t.Errorf("first message %q, want it whole", call.Messages[0].Content)
				}
			} else if !c.cut && call.Prompt != strings.ToValidUTF8(c.text, "\uFFFD") {
				t.Errorf("prompt %q, want the text whole", call.Prompt)
			}
		})
	}
}

// A file of no rows is still read as one: the footer check takes a
// footer that lists no record batch when the stream holds none.
func TestEmptyTrajectoryFile(t *testing.T) {
	b, err := MarshalTrajectories(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalTrajectories("empty", b)
	if err != nil || len(got) != 0 {
		t.Errorf("got %d rows, %v; want none, no error", len(got), err)
	}
}
