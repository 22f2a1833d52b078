package traces

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// An OTLP export request (ExportTraceServiceRequest) has the same fields
// and field numbers as TracesData, so the receiver decodes into TracesData.

// DecodeOTLPProto decodes an OTLP/HTTP protobuf export request.
func DecodeOTLPProto(body []byte) (*tracepb.TracesData, error) {
	td := &tracepb.TracesData{}
	if err := proto.Unmarshal(body, td); err != nil {
		return nil, fmt.Errorf("protobuf ExportTraceServiceRequest: %s: %w", locateProtoError(body), err)
	}
	return td, nil
}

// locateProtoError names the innermost message of an export request that
// does not parse: resourceSpans[i], .scopeSpans[j], .spans[k], or the
// request itself.
func locateProtoError(body []byte) string {
	levels := []struct {
		name  string
		field protowire.Number
		msg   func() proto.Message
	}{
		{"resourceSpans", 1, func() proto.Message { return &tracepb.ResourceSpans{} }},
		{"scopeSpans", 2, func() proto.Message { return &tracepb.ScopeSpans{} }},
		{"spans", 2, func() proto.Message { return &tracepb.Span{} }},
	}
	path, b := "the request", body
	for _, lv := range levels {
		found := false
		for i, rest := 0, b; len(rest) > 0; {
			num, typ, n := protowire.ConsumeTag(rest)
			if n < 0 {
				return path
			}
			rest = rest[n:]
			if num != lv.field || typ != protowire.BytesType {
				if m := protowire.ConsumeFieldValue(num, typ, rest); m >= 0 {
					rest = rest[m:]
					continue
				}
				return path
			}
			v, m := protowire.ConsumeBytes(rest)
			if m < 0 {
				return path + fmt.Sprintf(" (%s[%d] is cut short)", lv.name, i)
			}
			rest = rest[m:]
			if proto.Unmarshal(v, lv.msg()) != nil {
				if path == "the request" {
					path = ""
				} else {
					path += "."
				}
				path += fmt.Sprintf("%s[%d]", lv.name, i)
				b, found = v, true
				break
			}
			i++
		}
		if !found {
			return path
		}
	}
	return path
}

// The OTLP/HTTP JSON encoding: protobuf's JSON mapping with lowerCamelCase
// keys, trace and span ids as hex, 64-bit integers as strings or numbers,
// enums as numbers.
type (
	jsonTraces struct {
		ResourceSpans []jsonResourceSpans `json:"resourceSpans"`
	}
	jsonResourceSpans struct {
		Resource   *jsonResource    `json:"resource,omitempty"`
		ScopeSpans []jsonScopeSpans `json:"scopeSpans"`
		SchemaURL  string           `json:"schemaUrl,omitempty"`
	}
	jsonResource struct {
		Attributes []jsonKeyValue `json:"attributes"`
	}
	jsonScopeSpans struct {
		Scope     *jsonScope `json:"scope,omitempty"`
		Spans     []jsonSpan `json:"spans"`
		SchemaURL string     `json:"schemaUrl,omitempty"`
	}
	jsonScope struct {
		Name    string `json:"name,omitempty"`
		Version string `json:"version,omitempty"`
	}
	jsonSpan struct {
		TraceID           string         `json:"traceId"`
		SpanID            string         `json:"spanId"`
		ParentSpanID      string         `json:"parentSpanId,omitempty"`
		Name              string         `json:"name"`
		Kind              int32          `json:"kind,omitempty"`
		StartTimeUnixNano jsonUint       `json:"startTimeUnixNano"`
		EndTimeUnixNano   jsonUint       `json:"endTimeUnixNano"`
		Attributes        []jsonKeyValue `json:"attributes,omitempty"`
		Events            []jsonEvent    `json:"events,omitempty"`
		Status            *jsonStatus    `json:"status,omitempty"`
	}
	jsonEvent struct {
		TimeUnixNano jsonUint       `json:"timeUnixNano"`
		Name         string         `json:"name"`
		Attributes   []jsonKeyValue `json:"attributes,omitempty"`
	}
	jsonStatus struct {
		Message string `json:"message,omitempty"`
		Code    int32  `json:"code,omitempty"`
	}
	jsonKeyValue struct {
		Key   string       `json:"key"`
		Value jsonAnyValue `json:"value"`
	}
	jsonAnyValue struct {
		StringValue *string         `json:"stringValue,omitempty"`
		BoolValue   *bool           `json:"boolValue,omitempty"`
		IntValue    *jsonInt        `json:"intValue,omitempty"`
		DoubleValue *jsonDouble     `json:"doubleValue,omitempty"`
		ArrayValue  *jsonArrayValue `json:"arrayValue,omitempty"`
		KvlistValue *jsonKvlist     `json:"kvlistValue,omitempty"`
		BytesValue  *string         `json:"bytesValue,omitempty"`
	}
	jsonArrayValue struct {
		Values []jsonAnyValue `json:"values"`
	}
	jsonKvlist struct {
		Values []jsonKeyValue `json:"values"`
	}
)

// jsonUint is a uint64 written as a decimal string (or read from a number).
// A value that is neither is kept in bad for the decoder to refuse with
// the field's path, which encoding/json does not give an Unmarshaler.
type jsonUint struct {
	v   uint64
	bad string
}

func (u *jsonUint) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseUint(strings.Trim(string(b), `"`), 10, 64)
	if err != nil {
		*u = jsonUint{bad: truncate(string(b), 64)}
		return nil
	}
	*u = jsonUint{v: v}
	return nil
}

func (u jsonUint) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatUint(u.v, 10) + `"`), nil
}

func (u jsonUint) value(field string) (uint64, error) {
	if u.bad != "" {
		return 0, fmt.Errorf("field %s: want an unsigned 64-bit integer, got %s", field, u.bad)
	}
	return u.v, nil
}

// jsonInt is an int64 written as a decimal string (or read from a number);
// bad as jsonUint's.
type jsonInt struct {
	v   int64
	bad string
}

func (i *jsonInt) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64)
	if err != nil {
		*i = jsonInt{bad: truncate(string(b), 64)}
		return nil
	}
	*i = jsonInt{v: v}
	return nil
}

func (i jsonInt) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(i.v, 10) + `"`), nil
}

// jsonDouble is a double as protobuf's JSON mapping writes one: a number,
// or a string holding a number, "NaN", "Infinity" or "-Infinity"; bad as
// jsonUint's.
type jsonDouble struct {
	v   float64
	bad string
}

func (d *jsonDouble) UnmarshalJSON(b []byte) error {
	s := string(b)
	if unq, err := strconv.Unquote(s); err == nil {
		s = unq
		switch s {
		case "NaN":
			*d = jsonDouble{v: math.NaN()}
			return nil
		case "Infinity":
			*d = jsonDouble{v: math.Inf(1)}
			return nil
		case "-Infinity":
			*d = jsonDouble{v: math.Inf(-1)}
			return nil
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) || strings.ContainsAny(s, "xXpP_") {
		// Only the three names above stand for NaN and the infinities;
		// ParseFloat would also take "inf", hex floats and "1_0".
		*d = jsonDouble{bad: truncate(string(b), 64)}
		return nil
	}
	*d = jsonDouble{v: v}
	return nil
}

func (d jsonDouble) MarshalJSON() ([]byte, error) {
	switch {
	case math.IsNaN(d.v):
		return []byte(`"NaN"`), nil
	case math.IsInf(d.v, 1):
		return []byte(`"Infinity"`), nil
	case math.IsInf(d.v, -1):
		return []byte(`"-Infinity"`), nil
	}
	return strconv.AppendFloat(nil, d.v, 'g', -1, 64), nil
}

// DecodeOTLPJSON decodes an OTLP/HTTP JSON export request; an error names
// the field that is wrong.
func DecodeOTLPJSON(body []byte) (*tracepb.TracesData, error) {
	var jt jsonTraces
	if err := json.Unmarshal(body, &jt); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			field := te.Field
			if p := jsonPathAt(body, te.Offset); p != "" {
				field = p
			}
			if field == "" {
				return nil, fmt.Errorf("the request: want a JSON object, got JSON %s", te.Value)
			}
			want := te.Type.String()
			switch te.Type.Kind() {
			case reflect.Struct:
				want = "a JSON object"
			case reflect.Slice:
				want = "a JSON list"
			}
			return nil, fmt.Errorf("field %s: want %s, got JSON %s", field, want, te.Value)
		case errors.As(err, &se):
			return nil, fmt.Errorf("not JSON at byte %d: %v", se.Offset, se)
		}
		return nil, fmt.Errorf("JSON ExportTraceServiceRequest: %w", err)
	}
	td := &tracepb.TracesData{}
	for i, rs := range jt.ResourceSpans {
		prs := &tracepb.ResourceSpans{SchemaUrl: rs.SchemaURL}
		if rs.Resource != nil {
			prs.Resource = &resourcepb.Resource{}
			for k, kv := range rs.Resource.Attributes {
				v, err := kv.Value.proto(fmt.Sprintf("resourceSpans[%d].resource.attributes[%d].value", i, k), 0)
				if err != nil {
					return nil, err
				}
				prs.Resource.Attributes = append(prs.Resource.Attributes, &commonpb.KeyValue{Key: kv.Key, Value: v})
			}
		}
		for j, ss := range rs.ScopeSpans {
			pss := &tracepb.ScopeSpans{SchemaUrl: ss.SchemaURL}
			if ss.Scope != nil {
				pss.Scope = &commonpb.InstrumentationScope{Name: ss.Scope.Name, Version: ss.Scope.Version}
			}
			for k, s := range ss.Spans {
				at := fmt.Sprintf("resourceSpans[%d].scopeSpans[%d].spans[%d]", i, j, k)
				ps := &tracepb.Span{Name: s.Name, Kind: tracepb.Span_SpanKind(s.Kind)}
				var err error
				if ps.StartTimeUnixNano, err = s.StartTimeUnixNano.value(at + ".startTimeUnixNano"); err != nil {
					return nil, err
				}
				if ps.EndTimeUnixNano, err = s.EndTimeUnixNano.value(at + ".endTimeUnixNano"); err != nil {
					return nil, err
				}
				if ps.TraceId, err = hexID(s.TraceID, at+".traceId", 16); err != nil {
					return nil, err
				}
				if ps.SpanId, err = hexID(s.SpanID, at+".spanId", 8); err != nil {
					return nil, err
				}
				if s.ParentSpanID != "" {
					if ps.ParentSpanId, err = hexID(s.ParentSpanID, at+".parentSpanId", 8); err != nil {
						return nil, err
					}
				}
				if ps.Attributes, err = protoKVs(s.Attributes, at+".attributes"); err != nil {
					return nil, err
				}
				for e, ev := range s.Events {
					attrs, err := protoKVs(ev.Attributes, fmt.Sprintf("%s.events[%d].attributes", at, e))
					if err != nil {
						return nil, err
					}
					tm, err := ev.TimeUnixNano.value(fmt.Sprintf("%s.events[%d].timeUnixNano", at, e))
					if err != nil {
						return nil, err
					}
					ps.Events = append(ps.Events, &tracepb.Span_Event{TimeUnixNano: tm, Name: ev.Name, Attributes: attrs})
				}
				if s.Status != nil {
					ps.Status = &tracepb.Status{Message: s.Status.Message, Code: tracepb.Status_StatusCode(s.Status.Code)}
				}
				pss.Spans = append(pss.Spans, ps)
			}
			prs.ScopeSpans = append(prs.ScopeSpans, pss)
		}
		td.ResourceSpans = append(td.ResourceSpans, prs)
	}
	return td, nil
}

// jsonPathAt names the value of body that ends at byte off, with the
// indices of the lists it sits in (resourceSpans[0].scopeSpans[1].spans[2].kind);
// "" when off is not inside a value of body.
func jsonPathAt(body []byte, off int64) string {
	type level struct {
		list  bool
		index int    // the list's next element
		key   string // the object's key being read
	}
	var stack []level
	path := func() string {
		var b strings.Builder
		for _, l := range stack {
			if l.list {
				fmt.Fprintf(&b, "[%d]", l.index-1)
			} else if l.key != "" {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(l.key)
			}
		}
		return b.String()
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			expectKey = len(stack) > 0 && !stack[len(stack)-1].list
			continue
		}
		if expectKey {
			stack[len(stack)-1].key, expectKey = tok.(string), false
			continue
		}
		if n := len(stack); n > 0 && stack[n-1].list {
			stack[n-1].index++
		}
		switch tok {
		case json.Delim('{'):
			if dec.InputOffset() >= off {
				return path()
			}
			stack = append(stack, level{})
			expectKey = true
			continue
		case json.Delim('['):
			if dec.InputOffset() >= off {
				return path()
			}
			stack = append(stack, level{list: true})
			continue
		}
		if dec.InputOffset() >= off {
			return path()
		}
		expectKey = len(stack) > 0 && !stack[len(stack)-1].list
	}
}

func hexID(s, field string, n int) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != n {
		return nil, fmt.Errorf("field %s: want %d hex digits, got %q", field, 2*n, truncate(s, 64))
	}
	return b, nil
}

func protoKVs(kvs []jsonKeyValue, field string) ([]*commonpb.KeyValue, error) {
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for i, kv := range kvs {
		v, err := kv.Value.proto(fmt.Sprintf("%s[%d].value", field, i), 0)
		if err != nil {
			return nil, err
		}
		out = append(out, &commonpb.KeyValue{Key: kv.Key, Value: v})
	}
	return out, nil
}

// maxValueDepth bounds nested arrays and maps in attribute values.
const maxValueDepth = 16

func (v *jsonAnyValue) proto(field string, depth int) (*commonpb.AnyValue, error) {
	if depth > maxValueDepth {
		return nil, fmt.Errorf("field %s: values nested deeper than %d", field, maxValueDepth)
	}
	switch {
	case v.StringValue != nil:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: *v.StringValue}}, nil
	case v.BoolValue != nil:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: *v.BoolValue}}, nil
	case v.IntValue != nil:
		if v.IntValue.bad != "" {
			return nil, fmt.Errorf("field %s.intValue: want a 64-bit integer, got %s", field, v.IntValue.bad)
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.IntValue.v}}, nil
	case v.DoubleValue != nil:
		if v.DoubleValue.bad != "" {
			return nil, fmt.Errorf("field %s.doubleValue: want a number, got %s", field, v.DoubleValue.bad)
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.DoubleValue.v}}, nil
	case v.BytesValue != nil:
		b, err := base64.StdEncoding.DecodeString(*v.BytesValue)
		if err != nil {
			return nil, fmt.Errorf("field %s.bytesValue: want base64: %v", field, err)
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: b}}, nil
	case v.ArrayValue != nil:
		arr := &commonpb.ArrayValue{}
		for i := range v.ArrayValue.Values {
			e, err := v.ArrayValue.Values[i].proto(fmt.Sprintf("%s.arrayValue.values[%d]", field, i), depth+1)
			if err != nil {
				return nil, err
			}
			arr.Values = append(arr.Values, e)
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: arr}}, nil
	case v.KvlistValue != nil:
		kl := &commonpb.KeyValueList{}
		for i, kv := range v.KvlistValue.Values {
			e, err := kv.Value.proto(fmt.Sprintf("%s.kvlistValue.values[%d].value", field, i), depth+1)
			if err != nil {
				return nil, err
			}
			kl.Values = append(kl.Values, &commonpb.KeyValue{Key: kv.Key, Value: e})
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: kl}}, nil
	}
	return &commonpb.AnyValue{}, nil
}

// SpansFromOTLP converts an export request to spans, checking ids: an
// error names the span's field. Attributes of the GenAI conventions and
// rlnode's own fill Span's fields; the others (resource attributes under
// "resource.", events under "events") go to Attributes. fallback is the
// source of spans that name none.
func SpansFromOTLP(td *tracepb.TracesData, fallback string) ([]Span, error) {
	var out []Span
	for i, rs := range td.ResourceSpans {
		var service, source string
		res := map[string]any{}
		for _, kv := range rs.GetResource().GetAttributes() {
			v := anyValue(kv.GetValue(), 0)
			res[kv.Key] = v
			switch kv.Key {
			case AttrServiceName:
				service, _ = v.(string)
			case AttrSource:
				source, _ = v.(string)
			}
		}
		for j, ss := range rs.ScopeSpans {
			for k, ps := range ss.Spans {
				at := fmt.Sprintf("resourceSpans[%d].scopeSpans[%d].spans[%d]", i, j, k)
				s, err := spanFromProto(ps, at, res)
				if err != nil {
					return nil, err
				}
				if s.Source == "" {
					s.Source = source
				}
				if s.Source == "" {
					s.Source = SourceOf(&s, service, fallback)
				}
				out = append(out, s)
			}
		}
	}
	return out, nil
}

func spanFromProto(ps *tracepb.Span, at string, resource map[string]any) (Span, error) {
	s := NewSpan()
	if len(ps.TraceId) != 16 || bytes.Equal(ps.TraceId, make([]byte, 16)) {
		return s, fmt.Errorf("field %s.traceId: want 16 bytes, not all zero, got %d", at, len(ps.TraceId))
	}
	if len(ps.SpanId) != 8 || bytes.Equal(ps.SpanId, make([]byte, 8)) {
		return s, fmt.Errorf("field %s.spanId: want 8 bytes, not all zero, got %d", at, len(ps.SpanId))
	}
	if n := len(ps.ParentSpanId); n != 0 && n != 8 {
		return s, fmt.Errorf("field %s.parentSpanId: want 8 bytes or none, got %d", at, n)
	}
	if ps.StartTimeUnixNano > math.MaxInt64 || ps.EndTimeUnixNano > math.MaxInt64 {
		return s, fmt.Errorf("field %s.startTimeUnixNano: out of range", at)
	}
	copy(s.TraceID[:], ps.TraceId)
	copy(s.SpanID[:], ps.SpanId)
	copy(s.ParentID[:], ps.ParentSpanId)
	s.Name = ps.Name
	s.Start = time.Unix(0, int64(ps.StartTimeUnixNano)).UTC().Truncate(time.Microsecond)
	s.End = time.Unix(0, int64(ps.EndTimeUnixNano)).UTC().Truncate(time.Microsecond)
	if st := ps.GetStatus(); st != nil {
		s.Status = StatusCode(st.Code)
		if st.Code > 2 || st.Code < 0 {
			return s, fmt.Errorf("field %s.status.code: want 0, 1 or 2, got %d", at, st.Code)
		}
		s.StatusMessage = st.Message
	}
	attrs := map[string]any{}
	for _, kv := range ps.Attributes {
		attrs[kv.Key] = anyValue(kv.GetValue(), 0)
	}
	rest := setFields(&s, attrs)
	for _, ev := range ps.Events {
		if ev.Name == "exception" && s.ErrorType == "" {
			for _, kv := range ev.Attributes {
				if kv.Key == "exception.type" {
					s.ErrorType = kv.GetValue().GetStringValue()
				}
			}
			if s.ErrorType == "" {
				s.ErrorType = "exception"
			}
		}
		e := map[string]any{"name": ev.Name, "time_unix_nano": ev.TimeUnixNano}
		for _, kv := range ev.Attributes {
			e[kv.Key] = anyValue(kv.GetValue(), 0)
		}
		ev := rest["events"]
		list, _ := ev.([]any)
		rest["events"] = append(list, e)
	}
	for k, v := range resource {
		rest["resource."+k] = v
	}
	if len(rest) > 0 {
		b, _ := json.Marshal(rest)
		s.Attributes = string(b)
	}
	return s, nil
}

// anyValue is an OTLP value as a plain Go value (string, bool, int64,
// float64, []byte, []any, map[string]any).
func anyValue(v *commonpb.AnyValue, depth int) any {
	if depth > maxValueDepth {
		return nil
	}
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BytesValue:
		return x.BytesValue
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, len(x.ArrayValue.GetValues()))
		for i, e := range x.ArrayValue.GetValues() {
			out[i] = anyValue(e, depth+1)
		}
		return out
	case *commonpb.AnyValue_KvlistValue:
		out := map[string]any{}
		for _, kv := range x.KvlistValue.GetValues() {
			out[kv.Key] = anyValue(kv.GetValue(), depth+1)
		}
		return out
	}
	return nil
}

// setFields moves the attributes Span has fields for into s and returns
// the rest.
func setFields(s *Span, attrs map[string]any) map[string]any {
	str := map[string]*string{
		AttrOperation: &s.Operation, AttrProvider: &s.Provider, AttrRequestModel: &s.RequestModel,
		AttrResponseModel: &s.ResponseModel, AttrConversationID: &s.ConversationID, AttrAgentName: &s.AgentName,
		AttrToolName: &s.ToolName, AttrToolCallID: &s.ToolCallID, AttrErrorType: &s.ErrorType,
		AttrRunID: &s.RunID, AttrPolicy: &s.Policy, AttrSource: &s.Source,
	}
	jsonStr := map[string]*string{
		AttrInputMessages: &s.InputMessages, AttrOutputMessages: &s.OutputMessages,
		AttrToolArguments: &s.ToolArguments, AttrToolResult: &s.ToolResult,
	}
	ints := map[string]*int64{
		AttrInputTokens: &s.InputTokens, AttrOutputTokens: &s.OutputTokens, AttrStep: &s.Step,
		AttrEpisode: &s.Episode, AttrTurn: &s.Turn, AttrWeightVersion: &s.WeightVersion,
	}
	rest := map[string]any{}
	reasons := map[string]string{}
	rewards := map[string]float64{}
	for k, v := range attrs {
		if p, ok := str[k]; ok {
			if x, ok := v.(string); ok {
				*p = x
				continue
			}
		}
		if p, ok := jsonStr[k]; ok {
			if x, ok := v.(string); ok {
				*p = x
			} else {
				b, _ := json.Marshal(v)
				*p = string(b)
			}
			continue
		}
		if p, ok := ints[k]; ok {
			if x, ok := asInt(v); ok && x >= 0 {
				*p = x
				continue
			}
		}
		switch k {
		case AttrFinishReasons:
			if l, ok := v.([]any); ok {
				for _, e := range l {
					if x, ok := e.(string); ok {
						s.FinishReasons = append(s.FinishReasons, x)
					}
				}
				continue
			}
		case AttrPromptTokenIDs, AttrOutputTokenIDs:
			if ids, ok := int32s(v); ok {
				if k == AttrPromptTokenIDs {
					s.PromptTokenIDs = ids
				} else {
					s.OutputTokenIDs = ids
				}
				continue
			}
		case AttrOutputLogprobs:
			if l, ok := v.([]any); ok {
				lp := make([]float32, 0, len(l))
				for _, e := range l {
					f, ok := asFloat(e)
					if !ok {
						break
					}
					lp = append(lp, float32(f))
				}
				if len(lp) == len(l) {
					s.OutputLogprobs = lp
					continue
				}
			}
		}
		if name, ok := strings.CutPrefix(k, AttrRewardPrefix); ok && name != "" {
			if n, ok := strings.CutSuffix(name, AttrReasonSuffix); ok {
				if x, ok := v.(string); ok {
					reasons[n] = x
					continue
				}
			} else if f, ok := asFloat(v); ok && !math.IsNaN(f) && !math.IsInf(f, 0) {
				rewards[name] = f
				continue
			}
		}
		rest[k] = v
	}
	names := make([]string, 0, len(rewards))
	for n := range rewards {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s.Rewards = append(s.Rewards, Reward{Name: n, Value: rewards[n], Reason: reasons[n]})
		delete(reasons, n)
	}
	for n, r := range reasons {
		rest[AttrRewardPrefix+n+AttrReasonSuffix] = r
	}
	return rest
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), true
		}
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func int32s(v any) ([]int32, bool) {
	l, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]int32, len(l))
	for i, e := range l {
		x, ok := asInt(e)
		if !ok || x < math.MinInt32 || x > math.MaxInt32 {
			return nil, false
		}
		out[i] = int32(x)
	}
	return out, true
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// ToOTLP is spans as an OTLP export request, one resource per source
// (service.name and rlnode.source set to it); rewards become
// rlnode.reward.NAME attributes. SpansFromOTLP reads it back to the same
// spans, except that Attributes' "resource.*" and "events" keys are not
// turned back into resource attributes and events.
func ToOTLP(spans []Span) *tracepb.TracesData {
	td := &tracepb.TracesData{}
	bySource := map[string]*tracepb.ScopeSpans{}
	for i := range spans {
		s := &spans[i]
		ss := bySource[s.Source]
		if ss == nil {
			ss = &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: "rlnode"}}
			bySource[s.Source] = ss
			td.ResourceSpans = append(td.ResourceSpans, &tracepb.ResourceSpans{
				Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
					strKV(AttrServiceName, s.Source), strKV(AttrSource, s.Source)}},
				ScopeSpans: []*tracepb.ScopeSpans{ss},
				SchemaUrl:  "https://opentelemetry.io/schemas/" + SemconvVersion,
			})
		}
		ps := &tracepb.Span{TraceId: bytes.Clone(s.TraceID[:]), SpanId: bytes.Clone(s.SpanID[:]), Name: s.Name,
			StartTimeUnixNano: uint64(s.Start.UnixNano()), EndTimeUnixNano: uint64(s.End.UnixNano()),
			Kind: tracepb.Span_SPAN_KIND_INTERNAL}
		if s.ParentID.IsValid() {
			ps.ParentSpanId = bytes.Clone(s.ParentID[:])
		}
		if s.Status != StatusUnset || s.StatusMessage != "" {
			ps.Status = &tracepb.Status{Code: tracepb.Status_StatusCode(s.Status), Message: s.StatusMessage}
		}
		ps.Attributes = attributesOf(s)
		ss.Spans = append(ss.Spans, ps)
	}
	return td
}

func strKV(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func intKV(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func attributesOf(s *Span) []*commonpb.KeyValue {
	var kvs []*commonpb.KeyValue
	for _, f := range []struct{ k, v string }{
		{AttrOperation, s.Operation}, {AttrProvider, s.Provider}, {AttrRequestModel, s.RequestModel},
		{AttrResponseModel, s.ResponseModel}, {AttrConversationID, s.ConversationID}, {AttrAgentName, s.AgentName},
		{AttrInputMessages, s.InputMessages}, {AttrOutputMessages, s.OutputMessages},
		{AttrToolName, s.ToolName}, {AttrToolCallID, s.ToolCallID}, {AttrToolArguments, s.ToolArguments},
		{AttrToolResult, s.ToolResult}, {AttrErrorType, s.ErrorType}, {AttrRunID, s.RunID}, {AttrPolicy, s.Policy},
	} {
		if f.v != "" {
			kvs = append(kvs, strKV(f.k, f.v))
		}
	}
	for _, f := range []struct {
		k string
		v int64
	}{
		{AttrInputTokens, s.InputTokens}, {AttrOutputTokens, s.OutputTokens}, {AttrStep, s.Step},
		{AttrEpisode, s.Episode}, {AttrTurn, s.Turn}, {AttrWeightVersion, s.WeightVersion},
	} {
		if f.v >= 0 {
			kvs = append(kvs, intKV(f.k, f.v))
		}
	}
	arr := func(k string, n int, at func(i int) *commonpb.AnyValue) {
		a := &commonpb.ArrayValue{}
		for i := range n {
			a.Values = append(a.Values, at(i))
		}
		kvs = append(kvs, &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: a}}})
	}
	if s.FinishReasons != nil {
		arr(AttrFinishReasons, len(s.FinishReasons), func(i int) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s.FinishReasons[i]}}
		})
	}
	for _, ids := range []struct {
		k string
		v []int32
	}{{AttrPromptTokenIDs, s.PromptTokenIDs}, {AttrOutputTokenIDs, s.OutputTokenIDs}} {
		if ids.v != nil {
			arr(ids.k, len(ids.v), func(i int) *commonpb.AnyValue {
				return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(ids.v[i])}}
			})
		}
	}
	if s.OutputLogprobs != nil {
		arr(AttrOutputLogprobs, len(s.OutputLogprobs), func(i int) *commonpb.AnyValue {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: float64(s.OutputLogprobs[i])}}
		})
	}
	for _, r := range s.Rewards {
		kvs = append(kvs, &commonpb.KeyValue{Key: AttrRewardPrefix + r.Name, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: r.Value}}})
		if r.Reason != "" {
			kvs = append(kvs, strKV(AttrRewardPrefix+r.Name+AttrReasonSuffix, r.Reason))
		}
	}
	if s.Attributes != "" {
		var rest map[string]any
		if json.Unmarshal([]byte(s.Attributes), &rest) == nil {
			keys := make([]string, 0, len(rest))
			for k := range rest {
				if k != "events" && !strings.HasPrefix(k, "resource.") {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				kvs = append(kvs, &commonpb.KeyValue{Key: k, Value: goValue(rest[k], 0)})
			}
		}
	}
	return kvs
}

// goValue is a decoded JSON value as an OTLP value.
func goValue(v any, depth int) *commonpb.AnyValue {
	if depth > maxValueDepth {
		return &commonpb.AnyValue{}
	}
	switch x := v.(type) {
	case string:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: x}}
	case bool:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: x}}
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(x)}}
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: x}}
	case []any:
		a := &commonpb.ArrayValue{}
		for _, e := range x {
			a.Values = append(a.Values, goValue(e, depth+1))
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: a}}
	case map[string]any:
		kl := &commonpb.KeyValueList{}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			kl.Values = append(kl.Values, &commonpb.KeyValue{Key: k, Value: goValue(x[k], depth+1)})
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: kl}}
	}
	return &commonpb.AnyValue{}
}

// EncodeOTLPJSON writes td in the OTLP/HTTP JSON encoding.
func EncodeOTLPJSON(td *tracepb.TracesData) ([]byte, error) {
	var jt jsonTraces
	for _, rs := range td.ResourceSpans {
		jrs := jsonResourceSpans{SchemaURL: rs.SchemaUrl, Resource: &jsonResource{Attributes: jsonKVs(rs.GetResource().GetAttributes())}}
		for _, ss := range rs.ScopeSpans {
			jss := jsonScopeSpans{SchemaURL: ss.SchemaUrl}
			if ss.Scope != nil {
				jss.Scope = &jsonScope{Name: ss.Scope.Name, Version: ss.Scope.Version}
			}
			for _, s := range ss.Spans {
				js := jsonSpan{TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					ParentSpanID: hex.EncodeToString(s.ParentSpanId), Name: s.Name, Kind: int32(s.Kind),
					StartTimeUnixNano: jsonUint{v: s.StartTimeUnixNano}, EndTimeUnixNano: jsonUint{v: s.EndTimeUnixNano},
					Attributes: jsonKVs(s.Attributes)}
				if s.Status != nil {
					js.Status = &jsonStatus{Code: int32(s.Status.Code), Message: s.Status.Message}
				}
				jss.Spans = append(jss.Spans, js)
			}
			jrs.ScopeSpans = append(jrs.ScopeSpans, jss)
		}
		jt.ResourceSpans = append(jt.ResourceSpans, jrs)
	}
	return json.Marshal(jt)
}

func jsonKVs(kvs []*commonpb.KeyValue) []jsonKeyValue {
	out := make([]jsonKeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = jsonKeyValue{Key: kv.Key, Value: jsonValue(kv.GetValue())}
	}
	return out
}

func jsonValue(v *commonpb.AnyValue) jsonAnyValue {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return jsonAnyValue{StringValue: &x.StringValue}
	case *commonpb.AnyValue_BoolValue:
		return jsonAnyValue{BoolValue: &x.BoolValue}
	case *commonpb.AnyValue_IntValue:
		i := jsonInt{v: x.IntValue}
		return jsonAnyValue{IntValue: &i}
	case *commonpb.AnyValue_DoubleValue:
		return jsonAnyValue{DoubleValue: &jsonDouble{v: x.DoubleValue}}
	case *commonpb.AnyValue_BytesValue:
		b := base64.StdEncoding.EncodeToString(x.BytesValue)
		return jsonAnyValue{BytesValue: &b}
	case *commonpb.AnyValue_ArrayValue:
		a := &jsonArrayValue{Values: []jsonAnyValue{}}
		for _, e := range x.ArrayValue.GetValues() {
			a.Values = append(a.Values, jsonValue(e))
		}
		return jsonAnyValue{ArrayValue: a}
	case *commonpb.AnyValue_KvlistValue:
		return jsonAnyValue{KvlistValue: &jsonKvlist{Values: jsonKVs(x.KvlistValue.GetValues())}}
	}
	return jsonAnyValue{}
}
