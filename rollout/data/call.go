package data

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Call is what a trace shows of a turn's model calls beside what the
// learner trains on: the model that answered, when the calls ran, the
// prompt as written and the tools the turn called. Training never reads
// it, and rows written before it existed have none (the zero Call).
type Call struct {
	Model string
	// Start is when the turn's first engine call was sent (the batch's
	// send time), End when its last one's sequence was done (the engine's
	// word per sequence, else the batch's answer: EndShared).
	Start, End time.Time
	// EndShared says End is the engine call's, which every request of its
	// batch shares: the engine did not say when this call's sequence was
	// done (engine.Sample.Finished), so its latency is the batch's.
	EndShared bool
	// Prompt is a text prompt as written; Messages a chat prompt's
	// messages. Both are cut to MaxPromptBytes of text together
	// (CutPrompt); PromptBytes is the whole prompt's size.
	Prompt      string
	Messages    []Message
	PromptBytes int64
	Tools       []ToolCall
}

// Message is one chat message of a prompt.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ToolCall is one tool a turn called, or one action an agent took in its
// environment: its name and arguments as the model wrote them, what it
// returned (cut to MaxToolResultBytes), the error it ended with, and when
// it ran.
type ToolCall struct {
	Name      string    `json:"name"`
	Arguments string    `json:"arguments,omitempty"`
	Result    string    `json:"result,omitempty"`
	Error     string    `json:"error,omitempty"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	// TokensFrom and TokensTo, when TokensTo > TokensFrom, say that the
	// result was placed among the turn's response ids at [TokensFrom,
	// TokensTo): tokens the engine did not sample (loss mask 0), between
	// two of the turn's engine calls (a tool episode). Unset when the
	// result is not among them (an agent's action: its observation is the
	// next turn's prompt).
	TokensFrom int32 `json:"tokens_from,omitempty"`
	TokensTo   int32 `json:"tokens_to,omitempty"`
}

// Bounds on what a Call keeps: a turn's prompt can be a whole chat (an
// agent's prompt repeats every earlier step), and every sample of a group
// carries its prompt again; the token ids, always whole, are the exact
// prompt.
const (
	MaxPromptBytes     = 32 << 10
	MaxToolResultBytes = 4 << 10
	MaxToolCalls       = 64
	// CutMark ends a prompt, message or tool result that was cut.
	CutMark = "[... cut]"
)

// CutText cuts s to at most n bytes at a character boundary, marked with
// CutMark when cut, and makes it valid UTF-8.
func CutText(s string, n int) string {
	cut := len(s) > n
	if cut {
		s = s[:n] // the tail of a rune split here is replaced below, then cut off
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if !cut && len(s) <= n {
		return s
	}
	end := min(max(n-len(CutMark), 0), len(s))
	for end > 0 && end < len(s) && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + CutMark
}

// CutPrompt records a prompt in c within MaxPromptBytes: text whole up to
// the bound, then cut; chat messages in order, whole while they fit, the
// one that crosses the bound cut, later ones kept with their role and
// empty content (so a reader sees how many there were).
func (c *Call) CutPrompt(text string, msgs []Message) {
	c.PromptBytes = int64(len(text))
	for _, m := range msgs {
		c.PromptBytes += int64(len(m.Content))
	}
	if msgs == nil {
		c.Prompt = CutText(text, MaxPromptBytes)
		return
	}
	left := MaxPromptBytes
	c.Messages = make([]Message, len(msgs))
	for i, m := range msgs {
		content := ""
		if left > len(CutMark) {
			content = CutText(m.Content, left)
		}
		left -= len(content)
		c.Messages[i] = Message{Role: CutText(m.Role, 64), Content: content}
	}
}

// AddTool records a tool call in c, its result cut to MaxToolResultBytes;
// past MaxToolCalls calls it is not recorded.
func (c *Call) AddTool(t ToolCall) {
	if len(c.Tools) >= MaxToolCalls {
		return
	}
	t.Name = CutText(t.Name, 256)
	t.Arguments = CutText(t.Arguments, MaxToolResultBytes)
	t.Result = CutText(t.Result, MaxToolResultBytes)
	t.Error = CutText(t.Error, MaxToolResultBytes)
	c.Tools = append(c.Tools, t)
}

// Column names of a Call, after the training columns of TrajectorySchema.
// A file without them (written before they existed) reads as rows with
// the zero Call.
const (
	ColModel          = "model"
	ColStart          = "start_unix_nano"
	ColEnd            = "end_unix_nano"
	ColPrompt         = "prompt_text"
	ColPromptMessages = "prompt_messages" // JSON [{"role", "content"}]
	ColPromptBytes    = "prompt_bytes"
	ColToolCalls      = "tool_calls" // JSON [ToolCall]
	ColEndShared      = "end_shared"
)

// callFields are the optional columns of a Call, in schema order.
var callFields = []arrow.Field{
	{Name: ColModel, Type: arrow.BinaryTypes.String},
	{Name: ColStart, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColEnd, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColPrompt, Type: arrow.BinaryTypes.String},
	{Name: ColPromptMessages, Type: arrow.BinaryTypes.String},
	{Name: ColPromptBytes, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColToolCalls, Type: arrow.BinaryTypes.String},
	{Name: ColEndShared, Type: arrow.FixedWidthTypes.Boolean},
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// appendCall appends c to the call columns, builders bs in callFields'
// order.
func appendCall(bs []array.Builder, c Call) error {
	msgs, tools := "", ""
	if c.Messages != nil {
		b, err := json.Marshal(c.Messages)
		if err != nil {
			return fmt.Errorf("prompt messages: %w", err)
		}
		msgs = string(b)
	}
	if len(c.Tools) > 0 {
		b, err := json.Marshal(c.Tools)
		if err != nil {
			return fmt.Errorf("tool calls: %w", err)
		}
		tools = string(b)
	}
	bs[0].(*array.StringBuilder).Append(c.Model)
	bs[1].(*array.Int64Builder).Append(unixNano(c.Start))
	bs[2].(*array.Int64Builder).Append(unixNano(c.End))
	bs[3].(*array.StringBuilder).Append(c.Prompt)
	bs[4].(*array.StringBuilder).Append(msgs)
	bs[5].(*array.Int64Builder).Append(c.PromptBytes)
	bs[6].(*array.StringBuilder).Append(tools)
	bs[7].(*array.BooleanBuilder).Append(c.EndShared)
	return nil
}

// callColumns finds the call columns of rec: nil where a column is
// missing (an older file); one of another type is an error naming it.
func callColumns(rec arrow.RecordBatch) ([]arrow.Array, error) {
	out := make([]arrow.Array, len(callFields))
	for i, f := range callFields {
		idx := rec.Schema().FieldIndices(f.Name)
		if len(idx) == 0 {
			continue
		}
		a := rec.Column(idx[0])
		if !arrow.TypeEqual(a.DataType(), f.Type) {
			return nil, fmt.Errorf("column %q: type %s, want %s: %w", f.Name, a.DataType(), f.Type, ErrBadTrajectory)
		}
		if err := checkColumn(a, int(rec.NumRows())); err != nil {
			return nil, fmt.Errorf("column %q: %w: %w", f.Name, err, ErrBadTrajectory)
		}
		out[i] = a
	}
	return out, nil
}

// callAt reads row r of the call columns (missing or null: zero).
func callAt(cols []arrow.Array, r int) (Call, error) {
	var c Call
	str := func(i int) string {
		if cols[i] == nil || cols[i].IsNull(r) {
			return ""
		}
		return cols[i].(*array.String).Value(r)
	}
	i64 := func(i int) int64 {
		if cols[i] == nil || cols[i].IsNull(r) {
			return 0
		}
		return cols[i].(*array.Int64).Value(r)
	}
	c.Model, c.Prompt, c.PromptBytes = str(0), str(3), i64(5)
	c.Start, c.End = fromUnixNano(i64(1)), fromUnixNano(i64(2))
	c.EndShared = cols[7] != nil && !cols[7].IsNull(r) && cols[7].(*array.Boolean).Value(r)
	if s := str(4); s != "" {
		if err := json.Unmarshal([]byte(s), &c.Messages); err != nil {
			return Call{}, fmt.Errorf("column %q: not a JSON list of messages: %v: %w", ColPromptMessages, err, ErrBadTrajectory)
		}
	}
	if s := str(6); s != "" {
		if err := json.Unmarshal([]byte(s), &c.Tools); err != nil {
			return Call{}, fmt.Errorf("column %q: not a JSON list of tool calls: %v: %w", ColToolCalls, err, ErrBadTrajectory)
		}
	}
	return c, nil
}
