package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

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

// traced wraps a server's handler: its calls are recorded in w, and
// /v1/traces receives OTLP/HTTP. Without a store it is next.
func (tf *traceFlags) traced(next http.Handler, w *traces.Writer, defaultSource, provider string, log *slog.Logger) http.Handler {
	if w == nil {
		return next
	}
	source := *tf.source
	if source == "" {
		source = defaultSource
	}
	mux := http.NewServeMux()
	mux.Handle(traces.OTLPPath, &traces.OTLPReceiver{Sink: w, Source: source})
	mux.Handle("/", &traces.Recorder{Next: next, Sink: w, Source: source, Provider: provider, Log: log})
	return mux
}

// proxyHandler is the recording proxy's handler to upstream.
func (tf *traceFlags) proxyHandler(w *traces.Writer, maxBody int64, log *slog.Logger) http.Handler {
	u, _ := url.Parse(*tf.upstream)
	return http.MaxBytesHandler(tf.traced(traces.NewProxy(u, log), w, "proxy", "openai", log), maxBody)
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
