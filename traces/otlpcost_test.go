package traces

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// denseExport is an export request of n spans, each with ids, times and
// attrs integer attributes with keys as short as the semantic
// conventions' (app.attr.NN): as many messages per byte as real exports
// hold.
func denseExport(n, attrs int) *tracepb.TracesData {
	ss := &tracepb.ScopeSpans{}
	for i := range n {
		s := &tracepb.Span{TraceId: []byte{1, byte(i), byte(i >> 8), byte(i >> 16), 15: 1}, SpanId: []byte{2, byte(i), byte(i >> 8), byte(i >> 16), 7: 1},
			Name: "op", StartTimeUnixNano: 1e18, EndTimeUnixNano: 1e18 + 1000}
		for a := range attrs {
			s.Attributes = append(s.Attributes, &commonpb.KeyValue{Key: fmt.Sprintf("app.attr.%02d", a), Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(a)}}})
		}
		ss.Spans = append(ss.Spans, s)
	}
	return &tracepb.TracesData{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{ss}}}}
}

// emptyMessages is a protobuf export request whose one scope holds n
// empty spans (2 bytes each), or, with inSpan, one span holding n empty
// attributes.
func emptyMessages(n int, inSpan bool) []byte {
	var inner []byte
	if inSpan {
		inner, _ = proto.Marshal(denseExport(1, 0).ResourceSpans[0].ScopeSpans[0].Spans[0])
	}
	field := protowire.Number(2) // ScopeSpans.spans
	if inSpan {
		field = 9 // Span.attributes
	}
	for range n {
		inner = protowire.AppendTag(inner, field, protowire.BytesType)
		inner = protowire.AppendVarint(inner, 0)
	}
	if inSpan {
		inner = protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), inner)
	}
	ss := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), inner)
	return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), ss)
}

// TestOTLPReceiverBoundsWhatABodyDecodesTo: a body of empty messages (2
// bytes each in protobuf, 3 in JSON, a few hundred decoded) is refused
// with 413 before it is decoded; before, a 16 MiB body of empty spans
// took 2.2 GiB to decode, four at once most of a host's memory. Exports
// as dense as real ones pass at the full body bound.
func TestOTLPReceiverBoundsWhatABodyDecodesTo(t *testing.T) {
	const limit = 1 << 20
	sink := &collect{}
	url := serve(t, &OTLPReceiver{Sink: sink, MaxBytes: limit}) + OTLPPath
	post := func(ct string, body []byte) (int, string) {
		t.Helper()
		if len(body) > limit {
			t.Fatalf("test body of %d bytes is over the %d-byte bound", len(body), limit)
		}
		resp, err := http.Post(url, ct, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	emptyJSON := []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{}` + strings.Repeat(",{}", 300_000) + `]}]}]}`)
	for _, c := range []struct {
		name, ct string
		body     []byte
	}{
		{"empty spans, protobuf", "application/x-protobuf", emptyMessages(400_000, false)},
		{"empty attributes of a span, protobuf", "application/x-protobuf", emptyMessages(400_000, true)},
		{"empty spans, JSON", "application/json", emptyJSON},
		// encoding/json matches keys by case and escapes too.
		{"empty spans, JSON, key spelt otherwise", "application/json", bytes.Replace(emptyJSON, []byte(`"spans"`), []byte(`"Sp\u0061NS"`), 1)},
	} {
		code, msg := post(c.ct, c.body)
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "decoded") {
			t.Errorf("%s (%d bytes): %d %q, want 413 saying what it would take decoded", c.name, len(c.body), code, msg)
		}
	}
	if len(sink.spans) != 0 {
		t.Fatalf("%d spans kept from refused bodies", len(sink.spans))
	}

	// Real exports' density: the largest body of such spans under the
	// bound passes, in either encoding.
	for _, enc := range []string{"protobuf", "JSON"} {
		encode := func(td *tracepb.TracesData) []byte {
			if enc == "JSON" {
				b, err := EncodeOTLPJSON(td)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			b, _ := proto.Marshal(td)
			return b
		}
		n := 1
		for len(encode(denseExport(2*n, 20))) <= limit {
			n *= 2
		}
		for step := n / 2; step > 0; step /= 2 {
			if len(encode(denseExport(n+step, 20))) <= limit {
				n += step
			}
		}
		body := encode(denseExport(n, 20))
		before := len(sink.spans)
		ct := "application/x-protobuf"
		if enc == "JSON" {
			ct = "application/json"
		}
		if code, msg := post(ct, body); code != 200 || len(sink.spans)-before != n {
			t.Errorf("%s: %d spans of 20 attributes in %d bytes: %d %q, %d spans kept; want 200 and every span", enc, n, len(body), code, msg, len(sink.spans)-before)
		}
	}
}

// TestJSONDecodedCostReadsKeysAsDecodingDoes: a key spelt with other
// cases or escapes names the same field for encoding/json, so it costs
// the same; strings holding JSON's own punctuation are only strings.
func TestJSONDecodedCostReadsKeysAsDecodingDoes(t *testing.T) {
	plain := `{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"a,[{\"b"},{}]}]}]}`
	want := jsonDecodedCost([]byte(plain), 1<<40)
	if spans := 2 * jsonSpanCost; want < spans {
		t.Fatalf("cost %d of two spans, want at least %d", want, spans)
	}
	for _, key := range []string{`"SPANS"`, `"sp\u0061ns"`, `"Sp\u0041ns"`} {
		b := strings.Replace(plain, `"spans"`, key, 1)
		if got := jsonDecodedCost([]byte(b), 1<<40); got != want {
			t.Errorf("key %s: cost %d, want %d as for \"spans\"", key, got, want)
		}
	}
}
