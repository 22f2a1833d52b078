package traces

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	"github.com/rlnode/rlnode/internal/bodyslot"
	"github.com/rlnode/rlnode/internal/ratelog"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
)

// Sink takes spans. Add must be safe for concurrent use and return
// quickly (Writer buffers).
type Sink interface {
	Add(spans ...Span) error
}

// OTLPPath is where OTLP/HTTP exporters send traces.
const OTLPPath = "/v1/traces"

// DefaultMaxOTLPBytes bounds an OTLP request body, after gzip.
const DefaultMaxOTLPBytes = 16 << 20

// OTLPReceiver accepts OTLP/HTTP trace exports (POST, protobuf or JSON,
// optionally gzip) and adds their spans to Sink. A malformed request is
// answered 400 with a message naming the field; nothing of it is kept.
// A body declared over MaxBytes is answered 413 unread, and bodies are
// read and decoded a few at a time (Bodies), so that clients sending large
// ones at once hold a few bodies' memory, not one per connection. A body
// whose messages would take more than 16 × MaxBytes decoded (estimated
// from their count and kind before decoding: an empty span is 2 bytes) is
// answered 413 too. A body that trickles in is cut off (408), so slow
// senders cannot hold those places.
type OTLPReceiver struct {
	Sink Sink
	// Source is the partition of spans that name no run, agent, service
	// or rlnode.source.
	Source   string
	MaxBytes int64 // default DefaultMaxOTLPBytes
	// Bodies bounds the bodies read and decoded at once, those of one
	// address, and how slowly a body may arrive (its zero value: the
	// bodyslot defaults).
	Bodies bodyslot.Gate
	Log    *slog.Logger // refusals, rate-limited; nil: none

	warn ratelog.Limiter
}

func (o *OTLPReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "OTLP/HTTP traces: POST only", http.StatusMethodNotAllowed)
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	isJSON := ct == "application/json"
	if !isJSON && ct != "application/x-protobuf" {
		http.Error(w, fmt.Sprintf("OTLP/HTTP traces: Content-Type %q: want application/x-protobuf or application/json", ct), http.StatusUnsupportedMediaType)
		return
	}
	limit := o.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxOTLPBytes
	}
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close") // rather than read the body to keep the connection
		o.refuse(w, r, isJSON, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes (Content-Length %d)", limit, r.ContentLength))
		return
	}
	place, ok := o.Bodies.Take(r)
	if !ok {
		return
	}
	defer place.Release()
	var body io.Reader = http.MaxBytesReader(w, place.Body(w, r), limit)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(body)
		if err != nil {
			o.fail(w, isJSON, http.StatusBadRequest, fmt.Sprintf("gzip body: %v", err))
			return
		}
		body = io.LimitReader(gz, limit+1)
	default:
		o.fail(w, isJSON, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Encoding %q: want gzip or none", enc))
		return
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 0)+bytes.MinRead))
	_, err := buf.ReadFrom(body)
	data := buf.Bytes()
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig) || int64(len(data)) > limit:
		o.refuse(w, r, isJSON, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", limit))
		return
	case errors.Is(err, bodyslot.ErrTooSlow):
		w.Header().Set("Connection", "close")
		o.refuse(w, r, isJSON, http.StatusRequestTimeout, err.Error())
		return
	}
	if err != nil {
		o.fail(w, isJSON, http.StatusBadRequest, fmt.Sprintf("reading body: %v", err))
		return
	}
	most := decodedPerBodyByte * limit
	cost := protoDecodedCost
	if isJSON {
		cost = jsonDecodedCost
	}
	if c := cost(data, most); c > most {
		o.refuse(w, r, isJSON, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"its spans, attributes and values would take over %d MiB decoded (%d× the %d-byte body bound); send fewer per request", most>>20, decodedPerBodyByte, limit))
		return
	}
	var td *tracepb.TracesData
	if isJSON {
		td, err = DecodeOTLPJSON(data)
	} else {
		td, err = DecodeOTLPProto(data)
	}
	var spans []Span
	if err == nil {
		spans, err = SpansFromOTLP(td, o.Source)
	}
	if err != nil {
		o.fail(w, isJSON, http.StatusBadRequest, err.Error())
		return
	}
	if err := o.Sink.Add(spans...); err != nil {
		o.fail(w, isJSON, http.StatusServiceUnavailable, err.Error())
		return
	}
	// An empty ExportTraceServiceResponse: full success.
	if isJSON {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// refuse answers a request refused for one of the receiver's bounds, and
// logs whom (rate-limited: the refused may be a flood).
func (o *OTLPReceiver) refuse(w http.ResponseWriter, r *http.Request, isJSON bool, code int, msg string) {
	if o.Log != nil {
		o.warn.Warn(o.Log, "refusing a request", "peer", r.RemoteAddr, "path", r.URL.Path, "status", code, "why", msg)
	}
	o.fail(w, isJSON, code, msg)
}

// fail answers with a google.rpc.Status, as OTLP/HTTP asks, in the
// request's encoding.
func (o *OTLPReceiver) fail(w http.ResponseWriter, isJSON bool, code int, msg string) {
	msg = "OTLP/HTTP traces: " + msg
	if isJSON {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, "{\"code\":3,\"message\":%q}\n", msg)
		return
	}
	// google.rpc.Status{code=3 (INVALID_ARGUMENT), message=msg}, encoded by hand
	// to keep genproto's status package out of the build.
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 3)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, msg)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(code)
	w.Write(b)
}
