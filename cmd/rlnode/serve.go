package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/rlnode/rlnode/internal/bodyslot"
	"github.com/rlnode/rlnode/internal/connlimit"
	"github.com/rlnode/rlnode/recipes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rlnode/rlnode/rollout/native"
)

func init() { commands["serve"] = serveCommand }

func serveCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelDir := fs.String("model", "", "checkpoint directory (config.json, safetensors weights, tokenizer.json), or a hub id ORG/NAME from the local Hugging Face cache")
	listen := fs.String("listen", "127.0.0.1:8000", "HTTP address HOST:PORT (port 0 picks a free one)")
	name := fs.String("served-model-name", "", "model name clients ask for (default: the --model argument, as vLLM does)")
	maxBatch := fs.Int("max-batch", 64, "sequences decoded together")
	device := fs.String("device", "cpu", "where the model, KV caches and activations live: cpu, cuda or cuda-bf16, with an optional device index (cuda:1)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	maxBody := fs.Int64("max-body-bytes", native.DefaultMaxBodyBytes, "largest request body; larger ones are answered 413")
	maxRequests := fs.Int("max-requests", 0, fmt.Sprintf("generation requests in progress at once; more are answered 429 (default 4 × --max-batch; with --upstream, requests proxied at once, default %d)", defaultProxyRequests))
	maxInflight := fs.Int64("max-inflight-bytes", defaultProxyInflightBytes, "with --upstream: bytes of the request bodies being proxied, by Content-Length (a body without one counts as --max-body-bytes), and of the answers recorded, all clients together; requests past it are answered 429, answers past it are recorded truncated. With --model and --traces: bytes of the requests and answers in progress that the recorder keeps, all clients together; calls past it are recorded truncated")
	maxTokens := fs.Int("max-queued-tokens", 0, "tokens of the requests in progress, prompts plus n × max_tokens; more are answered 429 (default 2 × --max-batch × the model's context)")
	readTimeout := fs.Duration("read-timeout", 30*time.Second, "time to read a request's headers, and its body")
	idleTimeout := fs.Duration("idle-timeout", 30*time.Second, "time a keep-alive connection may wait for its next request")
	connsPerAddr := fs.Int("max-conns-per-addr", 64, "connections one client address (an IPv6 one with its /64) may hold open; more are closed at once (0: no cap)")
	writeTimeout := fs.Duration("write-timeout", 30*time.Second, "time each write of an answer may wait for a client that does not read")
	tf := addTraceFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: rlnode serve --model DIR [--listen 127.0.0.1:8000] [--served-model-name NAME] [--traces STORE]\n"+
			"       rlnode serve --upstream URL --traces STORE [--listen 127.0.0.1:8000]\n\n"+
			"Serves the model with the native engine as an OpenAI-compatible HTTP server:\n"+
			"/v1/completions, /v1/chat/completions, /v1/models, /health. With --upstream it is\n"+
			"a proxy to another such server instead. With --traces every call is recorded.\n\n")
		fs.PrintDefaults()
	}
	err := parseFlags(fs, args)
	if err == nil && *modelDir == "" && *tf.upstream == "" {
		err = usageError{fmt.Errorf("--model is required (or --upstream URL)")}
	}
	if err == nil && *modelDir != "" && *tf.upstream != "" {
		err = usageError{fmt.Errorf("--model and --upstream exclude each other")}
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "rlnode serve: %v\n", err)
		fs.Usage()
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "rlnode serve: --log-level: %v\n", err)
		return 2
	}
	bad := ""
	switch {
	case *maxBatch <= 0:
		bad = fmt.Sprintf("--max-batch must be positive, got %d", *maxBatch)
	case *maxBody <= 0:
		bad = fmt.Sprintf("--max-body-bytes must be positive, got %d", *maxBody)
	case *maxInflight <= 0:
		bad = fmt.Sprintf("--max-inflight-bytes must be positive, got %d", *maxInflight)
	case *tf.upstream != "" && *maxInflight < *maxBody:
		bad = fmt.Sprintf("--max-inflight-bytes (%d) must be at least --max-body-bytes (%d)", *maxInflight, *maxBody)
	case *maxRequests < 0 || *maxTokens < 0:
		bad = fmt.Sprintf("--max-requests and --max-queued-tokens must be ≥ 0 (0: the default), got %d and %d", *maxRequests, *maxTokens)
	case *readTimeout <= 0 || *idleTimeout <= 0 || *writeTimeout <= 0:
		bad = fmt.Sprintf("--read-timeout, --idle-timeout and --write-timeout must be positive, got %v, %v and %v", *readTimeout, *idleTimeout, *writeTimeout)
	default:
		bad = tf.check()
	}
	if bad != "" {
		fmt.Fprintf(stderr, "rlnode serve: %s\n", bad)
		return 2
	}
	if *name == "" {
		*name = *modelDir
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	store, err := tf.openStore(log)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode serve: %v\n", err)
		return 1
	}
	defer closeStore(store, stdout, stderr)
	if *tf.upstream != "" {
		lim := &proxyLimits{requests: *maxRequests, maxBody: *maxBody, bodies: bodyslot.Gate{MaxTime: *readTimeout},
			kept: recordBudget{bytes: *maxInflight, held: "bodies and kept answers"}}
		if lim.requests == 0 {
			lim.requests = defaultProxyRequests
		}
		return serveListener(*listen, connsPerAddr, &http.Server{Handler: writeDeadline(tf.proxyHandler(store, lim, log), *writeTimeout),
			ReadHeaderTimeout: *readTimeout, ReadTimeout: *readTimeout, IdleTimeout: *idleTimeout},
			fmt.Sprintf("proxying to %s", *tf.upstream), stdout, stderr, log)
	}
	if err := verifyModel("--model", *modelDir); err != nil {
		fmt.Fprintf(stderr, "rlnode serve: %v\n", err)
		return 1
	}
	// A LoRA checkpoint (base + PEFT adapter) is served merged.
	dir, err := recipes.ModelDir(*modelDir)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode serve: --model: %v\n", err)
		return 1
	}
	e, err := native.Load(dir, native.Config{MaxBatch: *maxBatch, Device: *device})
	if err != nil {
		fmt.Fprintf(stderr, "rlnode serve: %v\n", err)
		return 1
	}
	defer e.Close()
	srv := native.NewServer(e, *name, native.Limits{MaxBodyBytes: *maxBody, MaxRequests: *maxRequests,
		MaxQueuedTokens: *maxTokens, ReadTimeout: *readTimeout, IdleTimeout: *idleTimeout, WriteTimeout: *writeTimeout}, log).HTTPServer()
	kept := &recordBudget{bytes: *maxInflight, held: "kept requests and answers", log: log}
	srv.Handler = tf.traced(srv.Handler, store, "serve", "rlnode", kept, kept, log)
	cfg := e.Model()
	return serveListener(*listen, connsPerAddr, srv, fmt.Sprintf("serving %q (%s, %d parameters, context %d)",
		*name, cfg.Architecture, cfg.NumParams(), cfg.MaxPositions), stdout, stderr, log)
}

// serveListener serves srv on listen until SIGINT or SIGTERM, printing
// what it serves and the address.
func serveListener(listen string, connsPerAddr *int, srv *http.Server, what string, stdout, stderr io.Writer, log *slog.Logger) int {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode serve: --listen: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s on http://%s\n", what, ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	capped := connlimit.Limit(ln, *connsPerAddr)
	capped.LogRefused(log, "refusing a connection")
	go func() { served <- srv.Serve(capped) }()
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "rlnode serve: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	// Requests in flight get a little time to finish; the engine then
	// fails whatever is left.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown", "err", err)
		srv.Close()
	}
	fmt.Fprintln(stdout, "stopped")
	return 0
}
