package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/rlnode/rlnode/internal/bodyslot"
	"github.com/rlnode/rlnode/internal/ratelog"
	"github.com/rlnode/rlnode/traces"
)

// traceFlags are rlnode serve's flags for recording traces and for the
// recording proxy.
type traceFlags struct {
	upstream *string
	store    *string
	source   *string
	flush    *time.Duration
}

func addTraceFlags(fs *flag.FlagSet) *traceFlags {
	return &traceFlags{
		upstream: fs.String("upstream", "", "base URL of an OpenAI-compatible server to proxy to (vLLM, a hosted API) instead of serving --model; with --traces each call is recorded"),
		store:    fs.String("traces", "", "trace store folder: record every chat/completion call as a span, and accept OTLP/HTTP traces on /v1/traces"),
		source:   fs.String("trace-source", "", "store partition of calls that name no agent or run (default: serve, or proxy with --upstream)"),
		flush:    fs.Duration("trace-flush", time.Second, "longest a recorded span waits in memory before it is in a Parquet file"),
	}
}

// check validates the trace flags; it returns a usage message or "".
func (tf *traceFlags) check() string {
	if *tf.flush <= 0 {
		return fmt.Sprintf("--trace-flush must be positive, got %v", *tf.flush)
	}
	if *tf.upstream != "" {
		u, err := url.Parse(*tf.upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Sprintf("--upstream %q: want an http:// or https:// URL", *tf.upstream)
		}
	}
	return ""
}

// openStore takes the trace store for writing, or returns nil without
// --traces.
func (tf *traceFlags) openStore(log *slog.Logger) (*traces.Writer, error) {
	if *tf.store == "" {
		return nil, nil
	}
	w, err := traces.OpenWriter(*tf.store, traces.WriterOptions{FlushInterval: *tf.flush,
		OnError: func(err error) { log.Error("trace flush", "err", err) }})
	if err != nil {
		return nil, fmt.Errorf("--traces: %w", err)
	}
	return w, nil
}

// traced wraps a server's handler: its calls are recorded in w (what is
// kept of answers in progress taken from answers, and of requests from
// requests, each when not nil), and /v1/traces receives OTLP/HTTP.
// Without a store it is next.
func (tf *traceFlags) traced(next http.Handler, w *traces.Writer, defaultSource, provider string, answers, requests traces.Budget, log *slog.Logger) http.Handler {
	if w == nil {
		return next
	}
	source := *tf.source
	if source == "" {
		source = defaultSource
	}
	mux := http.NewServeMux()
	mux.Handle(traces.OTLPPath, &traces.OTLPReceiver{Sink: w, Source: source, Log: log})
	mux.Handle("/", &traces.Recorder{Next: next, Sink: w, Source: source, Provider: provider, Budget: answers, RequestBudget: requests, Log: log})
	return mux
}

// Defaults of the proxy's global bounds (--max-requests and
// --max-inflight-bytes with --upstream; --max-inflight-bytes also bounds
// what serve --model's recorder keeps).
const (
	defaultProxyRequests      = 256
	defaultProxyInflightBytes = 64 << 20
)

// proxyHandler is the recording proxy's handler to upstream, within lim.
func (tf *traceFlags) proxyHandler(w *traces.Writer, lim *proxyLimits, log *slog.Logger) http.Handler {
	u, _ := url.Parse(*tf.upstream)
	lim.next = http.MaxBytesHandler(tf.traced(traces.NewProxy(u, log), w, "proxy", "openai", &lim.kept, nil, log), lim.maxBody)
	lim.log, lim.kept.log = log, log
	return lim
}

// proxyLimits bounds what clients, all addresses together, can make the
// proxy hold: the requests in progress, and the bytes of request bodies
// being passed on (the recorder keeps a copy of each; counted by
// Content-Length, a body without one as maxBody) and of the answers the
// recorder keeps (as a traces.Budget). Past either bound a request is
// answered 429 in OpenAI's error shape, naming the flag; a body declared
// over maxBody, 413 unread; an answer past the bytes is kept truncated.
type proxyLimits struct {
	requests int
	maxBody  int64
	bodies   bodyslot.Gate // its rate and time for request bodies; no places taken
	kept     recordBudget  // the bytes of bodies and kept answers (--max-inflight-bytes)
	next     http.Handler
	log      *slog.Logger
	warn     ratelog.Limiter

	mu       sync.Mutex
	inFlight int
}

func (p *proxyLimits) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > p.maxBody {
		w.Header().Set("Connection", "close") // rather than read the body to keep the connection
		p.refuse(w, r, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
			fmt.Sprintf("the request body of %d bytes is larger than the proxy's limit of %d bytes (--max-body-bytes)", r.ContentLength, p.maxBody))
		return
	}
	n := r.ContentLength
	if n < 0 {
		n = p.maxBody
	}
	p.mu.Lock()
	var why string
	if p.inFlight >= p.requests {
		why = fmt.Sprintf("the proxy has %d requests in progress, its limit (--max-requests); retry later", p.inFlight)
	} else if held, ok := p.kept.take(n); !ok {
		why = fmt.Sprintf("the request body needs %d bytes and %d of the proxy's %d for bodies and kept answers in flight are in use (--max-inflight-bytes); retry later", n, held, p.kept.bytes)
	} else {
		p.inFlight++
	}
	p.mu.Unlock()
	if why != "" {
		p.refuse(w, r, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", why)
		return
	}
	defer func() {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
		p.kept.Put(n)
	}()
	if r.ContentLength != 0 {
		// A body that trickles in is cut off: 408 from the proxy's error
		// handler, which finds the failure through Watch's note.
		r = bodyslot.Watch(r)
		r.Body = p.bodies.Body(w, r)
	}
	p.next.ServeHTTP(w, r)
}

// recordBudget bounds bytes held for calls in progress, all clients
// together (--max-inflight-bytes): what rlnode serve --model's recorder
// keeps of requests and answers, and with --upstream the bodies being
// passed on and the answers kept (proxyLimits). A call past it is
// recorded truncated (logged, rate-limited), never refused by it.
type recordBudget struct {
	bytes int64
	held  string // what the bytes are, for the log: "kept requests and answers"
	log   *slog.Logger
	warn  ratelog.Limiter

	mu    sync.Mutex
	taken int64
}

// take counts n more bytes if they fit, and returns the bytes taken
// before (when they do not fit) or after.
func (b *recordBudget) take(n int64) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 && b.taken+n > b.bytes {
		return b.taken, false
	}
	b.taken += n
	return b.taken, true
}

// Take implements traces.Budget.
func (b *recordBudget) Take(n int64) bool {
	taken, ok := b.take(n)
	if !ok {
		b.warn.Warn(b.log, "recording a call truncated", "why", fmt.Sprintf("%d of the %d bytes for %s in flight are in use (--max-inflight-bytes)", taken, b.bytes, b.held))
	}
	return ok
}

// Put implements traces.Budget.
func (b *recordBudget) Put(n int64) {
	b.mu.Lock()
	b.taken -= n
	b.mu.Unlock()
}

// refuse answers a request refused for one of the proxy's bounds, and
// logs whom (rate-limited: the refused may be a flood).
func (p *proxyLimits) refuse(w http.ResponseWriter, r *http.Request, status int, typ, code, msg string) {
	p.warn.Warn(p.log, "refusing a request", "peer", r.RemoteAddr, "path", r.URL.Path, "status", status, "why", msg)
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

// writeDeadline gives each write of an answer d to reach the client, as
// the native server does (--write-timeout): a client that stops reading a
// long or endless answer is dropped, and the upstream's connection with
// it, rather than held for good.
func writeDeadline(next http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: d}, r)
	})
}

type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) FlushError() error {
	w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.rc.Flush()
}

func (w *deadlineWriter) Flush() { w.FlushError() }

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func closeStore(w *traces.Writer, stdout, stderr io.Writer) {
	if w == nil {
		return
	}
	if err := w.Close(); err != nil {
		fmt.Fprintf(stderr, "rlnode serve: trace store: %v\n", err)
		return
	}
	fmt.Fprintf(stdout, "recorded %d spans in %s\n", w.Written(), w.Root())
}
