package traces

import (
	"encoding/hex"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// column is one Parquet column of the store: its Arrow field, how a span
// fills it and how a span is read back from it, side by side.
type column struct {
	field arrow.Field
	put   func(b array.Builder, s *Span)
	get   func(a arrow.Array, i int, s *Span)
}

var timestampType = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}

func stringCol(name string, f func(*Span) *string) column {
	return column{
		field: arrow.Field{Name: name, Type: arrow.BinaryTypes.String, Nullable: true},
		put: func(b array.Builder, s *Span) {
			if v := *f(s); v != "" {
				b.(*array.StringBuilder).Append(v)
			} else {
				b.AppendNull()
			}
		},
		get: func(a arrow.Array, i int, s *Span) {
			if a.IsValid(i) {
				*f(s) = a.(*array.String).Value(i)
			}
		},
	}
}

func intCol(name string, f func(*Span) *int64) column {
	return column{
		field: arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		put: func(b array.Builder, s *Span) {
			if v := *f(s); v >= 0 {
				b.(*array.Int64Builder).Append(v)
			} else {
				b.AppendNull()
			}
		},
		get: func(a arrow.Array, i int, s *Span) {
			if a.IsValid(i) {
				*f(s) = a.(*array.Int64).Value(i)
			} else {
				*f(s) = NoValue
			}
		},
	}
}

func timeCol(name string, f func(*Span) *time.Time) column {
	return column{
		field: arrow.Field{Name: name, Type: timestampType},
		put: func(b array.Builder, s *Span) {
			b.(*array.TimestampBuilder).Append(arrow.Timestamp(f(s).UnixMicro()))
		},
		get: func(a arrow.Array, i int, s *Span) {
			*f(s) = time.UnixMicro(int64(a.(*array.Timestamp).Value(i))).UTC()
		},
	}
}

func hexCol(name string, f func(*Span) []byte) column {
	return column{
		field: arrow.Field{Name: name, Type: arrow.BinaryTypes.String, Nullable: true},
		put: func(b array.Builder, s *Span) {
			v := f(s)
			for _, c := range v {
				if c != 0 {
					b.(*array.StringBuilder).Append(hex.EncodeToString(v))
					return
				}
			}
			b.AppendNull()
		},
		get: func(a arrow.Array, i int, s *Span) {
			if a.IsValid(i) {
				hex.Decode(f(s), []byte(a.(*array.String).Value(i)))
			}
		},
	}
}

func listCol[T int32 | float32 | string](name string, elem arrow.DataType, f func(*Span) *[]T) column {
	return column{
		field: arrow.Field{Name: name, Type: arrow.ListOf(elem), Nullable: true},
		put: func(b array.Builder, s *Span) {
			v := *f(s)
			lb := b.(*array.ListBuilder)
			if v == nil {
				lb.AppendNull()
				return
			}
			lb.Append(true)
			switch vb := lb.ValueBuilder().(type) {
			case *array.Int32Builder:
				vb.AppendValues(any(v).([]int32), nil)
			case *array.Float32Builder:
				vb.AppendValues(any(v).([]float32), nil)
			case *array.StringBuilder:
				vb.AppendValues(any(v).([]string), nil)
			}
		},
		get: func(a arrow.Array, i int, s *Span) {
			l := a.(*array.List)
			if !l.IsValid(i) {
				return
			}
			from, to := l.ValueOffsets(i)
			out := make([]T, 0, to-from)
			for j := from; j < to; j++ {
				switch vs := l.ListValues().(type) {
				case *array.Int32:
					out = append(out, any(vs.Value(int(j))).(T))
				case *array.Float32:
					out = append(out, any(vs.Value(int(j))).(T))
				case *array.String:
					out = append(out, any(vs.Value(int(j))).(T))
				}
			}
			*f(s) = out
		},
	}
}

var rewardType = arrow.StructOf(
	arrow.Field{Name: "name", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "value", Type: arrow.PrimitiveTypes.Float64},
	arrow.Field{Name: "reason", Type: arrow.BinaryTypes.String, Nullable: true},
)

var rewardsCol = column{
	field: arrow.Field{Name: "rewards", Type: arrow.ListOf(rewardType), Nullable: true},
	put: func(b array.Builder, s *Span) {
		lb := b.(*array.ListBuilder)
		if len(s.Rewards) == 0 {
			lb.AppendNull()
			return
		}
		lb.Append(true)
		sb := lb.ValueBuilder().(*array.StructBuilder)
		for _, r := range s.Rewards {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append(r.Name)
			sb.FieldBuilder(1).(*array.Float64Builder).Append(r.Value)
			if r.Reason != "" {
				sb.FieldBuilder(2).(*array.StringBuilder).Append(r.Reason)
			} else {
				sb.FieldBuilder(2).AppendNull()
			}
		}
	},
	get: func(a arrow.Array, i int, s *Span) {
		l := a.(*array.List)
		if !l.IsValid(i) {
			return
		}
		st := l.ListValues().(*array.Struct)
		names, values, reasons := st.Field(0).(*array.String), st.Field(1).(*array.Float64), st.Field(2).(*array.String)
		from, to := l.ValueOffsets(i)
		for j := int(from); j < int(to); j++ {
			r := Reward{Name: names.Value(j), Value: values.Value(j)}
			if reasons.IsValid(j) {
				r.Reason = reasons.Value(j)
			}
			s.Rewards = append(s.Rewards, r)
		}
	},
}

// columns is the store's schema, in file order.
var columns = []column{
	hexCol("trace_id", func(s *Span) []byte { return s.TraceID[:] }),
	hexCol("span_id", func(s *Span) []byte { return s.SpanID[:] }),
	hexCol("parent_span_id", func(s *Span) []byte { return s.ParentID[:] }),
	stringCol("name", func(s *Span) *string { return &s.Name }),
	timeCol("start_time", func(s *Span) *time.Time { return &s.Start }),
	timeCol("end_time", func(s *Span) *time.Time { return &s.End }),
	{
		field: arrow.Field{Name: "status", Type: arrow.BinaryTypes.String},
		put:   func(b array.Builder, s *Span) { b.(*array.StringBuilder).Append(s.Status.String()) },
		get:   func(a arrow.Array, i int, s *Span) { s.Status = ParseStatus(a.(*array.String).Value(i)) },
	},
	stringCol("status_message", func(s *Span) *string { return &s.StatusMessage }),
	stringCol("source", func(s *Span) *string { return &s.Source }),
	stringCol("operation", func(s *Span) *string { return &s.Operation }),
	stringCol("provider", func(s *Span) *string { return &s.Provider }),
	stringCol("request_model", func(s *Span) *string { return &s.RequestModel }),
	stringCol("response_model", func(s *Span) *string { return &s.ResponseModel }),
	stringCol("conversation_id", func(s *Span) *string { return &s.ConversationID }),
	stringCol("agent_name", func(s *Span) *string { return &s.AgentName }),
	intCol("input_tokens", func(s *Span) *int64 { return &s.InputTokens }),
	intCol("output_tokens", func(s *Span) *int64 { return &s.OutputTokens }),
	stringCol("input_messages", func(s *Span) *string { return &s.InputMessages }),
	stringCol("output_messages", func(s *Span) *string { return &s.OutputMessages }),
	listCol("finish_reasons", arrow.BinaryTypes.String, func(s *Span) *[]string { return &s.FinishReasons }),
	stringCol("tool_name", func(s *Span) *string { return &s.ToolName }),
	stringCol("tool_call_id", func(s *Span) *string { return &s.ToolCallID }),
	stringCol("tool_arguments", func(s *Span) *string { return &s.ToolArguments }),
	stringCol("tool_result", func(s *Span) *string { return &s.ToolResult }),
	stringCol("error_type", func(s *Span) *string { return &s.ErrorType }),
	stringCol("run_id", func(s *Span) *string { return &s.RunID }),
	intCol("step", func(s *Span) *int64 { return &s.Step }),
	intCol("episode", func(s *Span) *int64 { return &s.Episode }),
	intCol("turn", func(s *Span) *int64 { return &s.Turn }),
	stringCol("policy", func(s *Span) *string { return &s.Policy }),
	intCol("weight_version", func(s *Span) *int64 { return &s.WeightVersion }),
	listCol("prompt_token_ids", arrow.PrimitiveTypes.Int32, func(s *Span) *[]int32 { return &s.PromptTokenIDs }),
	listCol("output_token_ids", arrow.PrimitiveTypes.Int32, func(s *Span) *[]int32 { return &s.OutputTokenIDs }),
	listCol("output_logprobs", arrow.PrimitiveTypes.Float32, func(s *Span) *[]float32 { return &s.OutputLogprobs }),
	rewardsCol,
	stringCol("attributes", func(s *Span) *string { return &s.Attributes }),
}

var schema = func() *arrow.Schema {
	fs := make([]arrow.Field, len(columns))
	for i, c := range columns {
		fs[i] = c.field
	}
	return arrow.NewSchema(fs, nil)
}()

// record builds an Arrow record of spans in the store's schema.
func record(spans []Span) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range spans {
		for c, col := range columns {
			col.put(b.Field(c), &spans[i])
		}
	}
	return b.NewRecordBatch()
}

// spansOf reads spans back from a record; columns the record lacks keep
// their zero (or unset) values, so files written before a column was added
// still read. A column of another type is an error naming it: its spans
// would otherwise read as unset (a zero trace id) without a word.
func spansOf(rec arrow.RecordBatch) (out []Span, err error) {
	// A damaged file can decode to arrays whose parts disagree (a list's
	// offsets past its values), which arrow-go does not check when it
	// reads them: reading such a cell panics.
	col := ""
	defer func() {
		if e := recover(); e != nil {
			out, err = nil, fmt.Errorf("column %q: damaged data: %v", col, e)
		}
	}()
	out = make([]Span, rec.NumRows())
	for i := range out {
		out[i] = NewSpan()
	}
	sc := rec.Schema()
	for _, c := range columns {
		col = c.field.Name
		idx := sc.FieldIndices(c.field.Name)
		if len(idx) == 0 {
			continue // a file written before the column was added
		}
		if got := sc.Field(idx[0]).Type; !arrow.TypeEqual(got, c.field.Type) {
			return nil, fmt.Errorf("column %q: type %s, want %s", c.field.Name, got, c.field.Type)
		}
		a := rec.Column(idx[0])
		for i := range out {
			c.get(a, i, &out[i])
		}
	}
	return out, nil
}
