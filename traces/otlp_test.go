package traces

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
)

func TestDecodeOTLPJSONNamesTheField(t *testing.T) {
	const ok = `"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708"`
	for _, c := range []struct {
		name, body, want string
	}{
		{"not JSON", `{"resourceSpans":[`, "not JSON at byte"},
		{"short trace id", `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102","spanId":"0102030405060708"}]}]}]}`,
			"resourceSpans[0].scopeSpans[0].spans[0].traceId: want 32 hex digits"},
		{"bad span id", `{"resourceSpans":[{"scopeSpans":[{},{"spans":[{},{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"zz"}]}]}]}`,
			"resourceSpans[0].scopeSpans[1].spans[0].traceId"},
		{"second span's span id", `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + ok + `},{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"zz"}]}]}]}`,
			"resourceSpans[0].scopeSpans[0].spans[1].spanId: want 16 hex digits"},
		{"parent id", `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + ok + `,"parentSpanId":"01"}]}]}]}`,
			"spans[0].parentSpanId: want 16 hex digits"},
		{"time as text", `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + ok + `,"startTimeUnixNano":"soon"}]}]}]}`,
			`field resourceSpans[0].scopeSpans[0].spans[0].startTimeUnixNano: want an unsigned 64-bit integer, got "soon"`},
		{"second span's end time", `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + ok + `},{` + ok + `,"endTimeUnixNano":-5}]}]}]}`,
			"field resourceSpans[0].scopeSpans[0].spans[1].endTimeUnixNano: want an unsigned 64-bit integer, got -5"},
		{"event time", `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + ok + `,"events":[{"name":"e","timeUnixNano":1},{"timeUnixNano":"x"}]}]}]}]}`,
			"field resourceSpans[0].scopeSpans[0].spans[0].events[1].timeUnixNano: want an unsigned 64-bit integer"},
		{"kind as text", `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + ok + `,"kind":"SERVER"}]}]}]}`,
			"field resourceSpans[0].scopeSpans[0].spans[0].kind: want int32"},
		{"trace id as a number, third resource", `{"resourceSpans":[{},{"scopeSpans":[]},{"scopeSpans":[{"spans":[{"traceId":5}]}]}]}`,
			"field resourceSpans[2].scopeSpans[0].spans[0].traceId: want string"},
		{"attribute value as a list", `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + ok + `,"attributes":[{"key":"a","value":{}},{"key":"k","value":[1]}]}]}]}]}`,
			"field resourceSpans[0].scopeSpans[0].spans[0].attributes[1].value: want a JSON object, got JSON array"},
		{"a list, not a request", `[]`, "the request: want a JSON object, got JSON array"},
		{"attribute bytes", `{"resourceSpans":[{"scopeSpans":[{"spans":[{` + ok + `,"attributes":[{"key":"k","value":{"bytesValue":"%%"}}]}]}]}]}`,
			"spans[0].attributes[0].value.bytesValue: want base64"},
		{"resource attribute int", `{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"intValue":"x"}}]}}]}`,
			`field resourceSpans[0].resource.attributes[0].value.intValue: want a 64-bit integer, got "x"`},
		{"attribute double as text", `{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"doubleValue":"lots"}}]}}]}`,
			`field resourceSpans[0].resource.attributes[0].value.doubleValue: want a number, got "lots"`},
		{"attribute double as inf", `{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"doubleValue":"inf"}}]}}]}`,
			`value.doubleValue: want a number, got "inf"`},
	} {
		td, err := DecodeOTLPJSON([]byte(c.body))
		if err == nil {
			_, err = SpansFromOTLP(td, "x")
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// Doubles as protobuf's JSON mapping writes them: numbers, numbers in
// strings, "NaN" and the infinities by name; they come back out the same.
func TestOTLPJSONDoubles(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
	}{{`1.5`, 1.5}, {`"1.5"`, 1.5}, {`"-2e3"`, -2000}, {`"NaN"`, math.NaN()}, {`"Infinity"`, math.Inf(1)}, {`"-Infinity"`, math.Inf(-1)}} {
		body := `{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"doubleValue":` + c.in + `}}]}}]}`
		td, err := DecodeOTLPJSON([]byte(body))
		if err != nil {
			t.Errorf("doubleValue %s: %v", c.in, err)
			continue
		}
		got := td.ResourceSpans[0].Resource.Attributes[0].Value.GetDoubleValue()
		if got != c.want && !(math.IsNaN(got) && math.IsNaN(c.want)) {
			t.Errorf("doubleValue %s: %v, want %v", c.in, got, c.want)
		}
		out, err := json.Marshal(jsonValue(td.ResourceSpans[0].Resource.Attributes[0].Value))
		if err != nil {
			t.Errorf("doubleValue %s back to JSON: %v", c.in, err)
			continue
		}
		var back jsonAnyValue
		if err := json.Unmarshal(out, &back); err != nil || back.DoubleValue == nil || back.DoubleValue.bad != "" ||
			(back.DoubleValue.v != c.want && !(math.IsNaN(back.DoubleValue.v) && math.IsNaN(c.want))) {
			t.Errorf("doubleValue %s written as %s, read back %+v, %v", c.in, out, back.DoubleValue, err)
		}
	}
}

func TestSpansFromOTLPChecksIDs(t *testing.T) {
	s := sampleSpan(1, 1, time.Unix(1e9, 0), "a")
	td := ToOTLP([]Span{s})
	td.ResourceSpans[0].ScopeSpans[0].Spans[0].TraceId = make([]byte, 16)
	if _, err := SpansFromOTLP(td, "x"); err == nil || !strings.Contains(err.Error(), "resourceSpans[0].scopeSpans[0].spans[0].traceId: want 16 bytes, not all zero") {
		t.Errorf("zero trace id: %v", err)
	}
	td.ResourceSpans[0].ScopeSpans[0].Spans[0].TraceId = s.TraceID[:]
	td.ResourceSpans[0].ScopeSpans[0].Spans[0].SpanId = []byte{1}
	if _, err := SpansFromOTLP(td, "x"); err == nil || !strings.Contains(err.Error(), "spans[0].spanId: want 8 bytes") {
		t.Errorf("short span id: %v", err)
	}
}

// TestOTLPRoundTrip: spans → OTLP (protobuf bytes and JSON) → spans.
func TestOTLPRoundTrip(t *testing.T) {
	day := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	a, b := sampleSpan(1, 1, day, "run-1"), sampleSpan(1, 2, day.Add(time.Second), "agent")
	b.Attributes = `{"custom.list":[1,"x",true],"custom.map":{"k":2.5}}`
	b.Status, b.StatusMessage = StatusError, "boom"
	want := []Span{a, b}
	pb, err := proto.Marshal(ToOTLP(want))
	if err != nil {
		t.Fatal(err)
	}
	jb, err := EncodeOTLPJSON(ToOTLP(want))
	if err != nil {
		t.Fatal(err)
	}
	for name, decode := range map[string]func() ([]Span, error){
		"protobuf": func() ([]Span, error) {
			td, err := DecodeOTLPProto(pb)
			if err != nil {
				return nil, err
			}
			return SpansFromOTLP(td, "x")
		},
		"JSON": func() ([]Span, error) {
			td, err := DecodeOTLPJSON(jb)
			if err != nil {
				return nil, err
			}
			return SpansFromOTLP(td, "x")
		},
	} {
		got, err := decode()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range got {
			// The resource attributes come back as "resource.*" entries.
			if !strings.Contains(got[i].Attributes, `"resource.service.name":"`+want[i].Source+`"`) {
				t.Errorf("%s: span %d attributes %s lack the resource", name, i, got[i].Attributes)
			}
			got[i].Attributes = want[i].Attributes
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("%s: span %d\n%+v\nwant\n%+v", name, i, got[i], want[i])
			}
		}
	}
}

// sinkFunc is a Sink that collects spans.
type collect struct {
	mu    sync.Mutex
	spans []Span
}

func (c *collect) Add(s ...Span) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, s...)
	return nil
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func TestOTLPReceiverHTTP(t *testing.T) {
	sink := &collect{}
	url := serve(t, &OTLPReceiver{Sink: sink, Source: "otlp", MaxBytes: 4096}) + OTLPPath
	s := sampleSpan(1, 1, time.Unix(1e9, 0), "a")
	s.RunID, s.AgentName = "", ""
	pb, _ := proto.Marshal(ToOTLP([]Span{s}))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(pb)
	zw.Close()
	post := func(ct, enc string, body []byte) (int, string) {
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		name, ct, enc string
		body          []byte
		code          int
		want          string
		spans         int
	}{
		{"protobuf", "application/x-protobuf", "", pb, 200, "", 1},
		{"gzip protobuf", "application/x-protobuf", "gzip", gz.Bytes(), 200, "", 1},
		{"JSON", "application/json", "", []byte(`{"resourceSpans":[]}`), 200, "{}", 0},
		{"garbage protobuf", "application/x-protobuf", "", []byte{0xff, 0xff, 0xff}, 400, "protobuf ExportTraceServiceRequest", 0},
		{"bad JSON field", "application/json", "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"01"}]}]}]}`), 400,
			`resourceSpans[0].scopeSpans[0].spans[0].traceId`, 0},
		{"too big", "application/json", "", bytes.Repeat([]byte(" "), 5000), 413, "body over 4096 bytes", 0},
		{"gzip bomb", "application/x-protobuf", "gzip", gzipOf(bytes.Repeat([]byte{0}, 1<<20)), 413, "body over 4096 bytes", 0},
		{"other type", "text/plain", "", pb, 415, "want application/x-protobuf or application/json", 0},
	} {
		before := len(sink.spans)
		code, body := post(c.ct, c.enc, c.body)
		if code != c.code || !strings.Contains(body, c.want) || len(sink.spans)-before != c.spans {
			t.Errorf("%s: %d %q, %d spans; want %d containing %q, %d spans", c.name, code, body, len(sink.spans)-before, c.code, c.want, c.spans)
		}
	}
	if got := sink.spans[0]; got.Source != "a" || got.TraceID != (oteltrace.TraceID{1, 1}) {
		t.Errorf("received span %+v", got)
	}
}

func gzipOf(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func TestDecodeOTLPProtoNamesTheMessage(t *testing.T) {
	spans := []Span{sampleSpan(1, 1, time.Unix(1e9, 0), "a"), sampleSpan(1, 2, time.Unix(1e9, 0), "a")}
	good, _ := proto.Marshal(ToOTLP(spans))
	// A span whose name field claims more bytes than it has: the second
	// span of the first scope of the first resource.
	td := ToOTLP(spans)
	bad := td.ResourceSpans[0].ScopeSpans[0].Spans[1]
	bad.Name = "x"
	b, _ := proto.Marshal(td)
	i := bytes.LastIndex(b, []byte{5<<3 | 2, 1, 'x'})
	if i < 0 {
		t.Fatal("no name field in the encoded span")
	}
	b[i+1] = 100
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"a span", b, "resourceSpans[0].scopeSpans[0].spans[1]"},
		{"cut short", good[:len(good)-3], "resourceSpans[0]"},
		{"garbage", []byte{0xff, 0xff}, "the request"},
	} {
		if _, err := DecodeOTLPProto(c.body); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to name %s", c.name, err, c.want)
		}
	}
}

// TestOTLPReceiverRefusesDeclaredOversizeUnread: a body whose declared
// length is over the bound is answered 413 at once, not read up to the
// bound first (16 MiB held per connection).
func TestOTLPReceiverRefusesDeclaredOversizeUnread(t *testing.T) {
	url := serve(t, &OTLPReceiver{Sink: &collect{}, MaxBytes: 4096})
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST "+OTLPPath+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100000000\r\n\r\n\x0a\x00")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a declared 100 MB body while the rest is not sent: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "body over 4096 bytes (Content-Length 100000000)") {
		t.Errorf("answer %d %q", resp.StatusCode, b)
	}
}
