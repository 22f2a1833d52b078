package traces

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/internal/bodyslot"
	"github.com/rlnode/rlnode/internal/ratelog"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// DefaultMaxRecordBytes bounds what a recorder keeps of one request and of
// one answer; larger ones pass through whole but are kept truncated.
const DefaultMaxRecordBytes = 8 << 20

// Headers an agent may send to label its calls (all optional): the agent's
// name, its conversation, its run, and the store partition. A W3C
// traceparent header makes the call's span a child of the caller's span.
const (
	HeaderAgent        = "X-Rlnode-Agent"
	HeaderConversation = "X-Rlnode-Conversation"
	HeaderRun          = "X-Rlnode-Run"
	HeaderSource       = "X-Rlnode-Source"
)

// Recorder serves Next and records each chat or completion call
// (POST /v1/chat/completions, /v1/completions) as a span added to Sink,
// after the answer is complete. Other requests pass through unrecorded.
type Recorder struct {
	Next     http.Handler
	Sink     Sink
	Source   string // partition of calls that name none (default "serve")
	Provider string // gen_ai.provider.name of the answering server
	MaxBytes int    // default DefaultMaxRecordBytes
	Log      *slog.Logger
	// Budget, when set, is memory shared with other holders: each byte
	// kept of an answer is taken from it, and given back once the call is
	// recorded. An answer kept when the budget is spent is kept truncated.
	Budget Budget
	// RequestBudget, when set, is the same for the bytes kept of request
	// bodies: a request kept when it is spent is kept truncated. (The
	// proxy counts whole bodies before they reach the recorder and leaves
	// it nil.)
	RequestBudget Budget
}

// Budget is memory shared by those that hold request data. Take reports
// whether n more bytes may be held (and counts them); Put gives n back.
// Both must be safe for concurrent use.
type Budget interface {
	Take(n int64) bool
	Put(n int64)
}

func recorded(r *http.Request) bool {
	return r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/chat/completions") || strings.HasSuffix(r.URL.Path, "/completions"))
}

func (rc *Recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !recorded(r) {
		rc.Next.ServeHTTP(w, r)
		return
	}
	max := rc.MaxBytes
	if max <= 0 {
		max = DefaultMaxRecordBytes
	}
	start := time.Now()
	// The request is kept as Next reads it, not read ahead: Next bounds
	// bodies and how many it reads at once (rlnode serve answers an
	// oversize body 413 unread), so the recorder holds no more than that.
	body := &teeBody{ReadCloser: r.Body, max: max, budget: rc.RequestBudget}
	r.Body = body
	if rc.RequestBudget != nil {
		defer func() { rc.RequestBudget.Put(body.release()) }()
	}
	tw := &teeWriter{ResponseWriter: w, max: max, budget: rc.Budget}
	if rc.Budget != nil {
		defer func() { rc.Budget.Put(int64(tw.buf.Len())) }()
	}
	rc.Next.ServeHTTP(tw, r)
	req, reqTruncated := body.kept()
	s := SpanOfExchange(Exchange{Path: r.URL.Path, Request: req, Status: tw.status(), ContentType: tw.Header().Get("Content-Type"),
		Response: tw.buf.Bytes(), Truncated: tw.truncated || reqTruncated, Start: start, End: time.Now()})
	s.Provider = rc.Provider
	s.AgentName = header(r, HeaderAgent)
	s.ConversationID = header(r, HeaderConversation)
	s.RunID = header(r, HeaderRun)
	s.TraceID, s.ParentID = traceParent(r.Header.Get("traceparent"))
	if !s.TraceID.IsValid() {
		rand.Read(s.TraceID[:])
	}
	rand.Read(s.SpanID[:])
	source := rc.Source
	if source == "" {
		source = "serve"
	}
	s.Source = header(r, HeaderSource)
	if s.Source == "" {
		s.Source = SourceOf(&s, "", source)
	}
	if err := rc.Sink.Add(s); err != nil && rc.Log != nil {
		rc.Log.Warn("trace not recorded", "path", r.URL.Path, "err", err)
	}
}

// header is a request header's value, bounded to 256 bytes.
func header(r *http.Request, name string) string { return truncate(r.Header.Get(name), 256) }

// traceParent parses a W3C traceparent header (version 00).
func traceParent(h string) (oteltrace.TraceID, oteltrace.SpanID) {
	var tid oteltrace.TraceID
	var sid oteltrace.SpanID
	f := strings.Split(strings.TrimSpace(h), "-")
	if len(f) != 4 || f[0] != "00" || len(f[1]) != 32 || len(f[2]) != 16 {
		return tid, sid
	}
	if _, err := hex.Decode(tid[:], []byte(f[1])); err != nil {
		return oteltrace.TraceID{}, sid
	}
	if _, err := hex.Decode(sid[:], []byte(f[2])); err != nil {
		return oteltrace.TraceID{}, oteltrace.SpanID{}
	}
	return tid, sid
}

// teeBody passes a request body through to the handler that reads it and
// keeps its first max bytes. A proxy's transport may still read it after
// the answer is in, hence the lock.
type teeBody struct {
	io.ReadCloser
	max       int
	budget    Budget // nil: none
	mu        sync.Mutex
	buf       bytes.Buffer
	truncated bool
	released  bool // the call is recorded: nothing more is kept
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - t.buf.Len(); room > 0 && n > 0 && !t.truncated && !t.released {
		keep := min(room, n)
		if t.budget == nil || t.budget.Take(int64(keep)) {
			t.buf.Write(p[:keep])
			t.truncated = room < n
		} else {
			t.truncated = true
		}
	} else if n > 0 {
		t.truncated = true
	}
	return n, err
}

// release ends the keeping and returns how many bytes were kept (to give
// back to the budget).
func (t *teeBody) release() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.released = true
	return int64(t.buf.Len())
}

// kept is a copy of what was kept so far, and whether more was read.
func (t *teeBody) kept() ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf.Bytes()), t.truncated
}

// teeWriter passes an answer through and keeps its first max bytes.
// Unwrap lets http.ResponseController reach the connection (flushes and
// write deadlines).
type teeWriter struct {
	http.ResponseWriter
	max       int
	budget    Budget // nil: none
	buf       bytes.Buffer
	code      int
	truncated bool
}

func (t *teeWriter) WriteHeader(code int) {
	if t.code == 0 {
		t.code = code
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *teeWriter) Write(p []byte) (int, error) {
	if t.code == 0 {
		t.code = http.StatusOK
	}
	if room := t.max - t.buf.Len(); room > 0 && !t.truncated {
		keep := min(room, len(p))
		if t.budget == nil || t.budget.Take(int64(keep)) {
			t.buf.Write(p[:keep])
			t.truncated = room < len(p)
		} else {
			t.truncated = true
		}
	} else if len(p) > 0 {
		t.truncated = true
	}
	return t.ResponseWriter.Write(p)
}

func (t *teeWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (t *teeWriter) status() int {
	if t.code == 0 {
		return http.StatusOK
	}
	return t.code
}

// NewProxy is a reverse proxy to an OpenAI-compatible server at upstream
// (its base URL, with or without /v1): every request is forwarded as it
// came, answers (streams included) pass back as they arrive.
func NewProxy(upstream *url.URL, log *slog.Logger) *httputil.ReverseProxy {
	base := strings.TrimSuffix(strings.TrimSuffix(upstream.Path, "/"), "/v1")
	var warn ratelog.Limiter // refusals of clients, who may be a flood
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = upstream.Scheme
			pr.Out.URL.Host = upstream.Host
			pr.Out.URL.Path = base + pr.In.URL.Path
			pr.Out.URL.RawPath = ""
			pr.Out.Host = upstream.Host
			if upstream.User != nil && pr.Out.Header.Get("Authorization") == "" {
				if pw, ok := upstream.User.Password(); ok {
					pr.Out.Header.Set("Authorization", "Bearer "+pw)
				}
			}
		},
		FlushInterval: -1,
		ErrorLog:      stdlog.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if slow := bodyslot.Failure(r.Context()); slow != nil {
				// The transport may have seen the request's context
				// cancelled (net/http does that as the read fails) before
				// the read's own error.
				err = slow
			}
			if errors.Is(err, bodyslot.ErrTooSlow) {
				// The client's fault, not the upstream's.
				if log != nil {
					warn.Warn(log, "refusing a request", "peer", r.RemoteAddr, "path", r.URL.Path, "status", http.StatusRequestTimeout, "why", err.Error())
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Connection", "close")
				w.WriteHeader(http.StatusRequestTimeout)
				io.WriteString(w, `{"error":{"message":"`+jsonEscape(err.Error())+`","type":"invalid_request_error","param":null,"code":"request_timeout"}}`)
				return
			}
			if log != nil {
				log.Warn("upstream failed", "url", upstream.Redacted(), "path", r.URL.Path, "err", err)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, `{"error":{"message":"upstream `+jsonEscape(upstream.Redacted())+` failed: `+jsonEscape(err.Error())+`","type":"upstream_error"}}`)
		},
	}
	if log != nil {
		p.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	return p
}

func jsonEscape(s string) string {
	b := []byte(marshal(s))
	return string(b[1 : len(b)-1])
}
