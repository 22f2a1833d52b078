package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
	modelDir := fs.String("model", "", "checkpoint directory (config.json, safetensors weights, tokenizer.json)")
	listen := fs.String("listen", "127.0.0.1:8000", "HTTP address HOST:PORT (port 0 picks a free one)")
	name := fs.String("served-model-name", "", "model name clients ask for (default: the --model argument, as vLLM does)")
	maxBatch := fs.Int("max-batch", 64, "sequences decoded together")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: rlnode serve --model DIR [--listen 127.0.0.1:8000] [--served-model-name NAME]\n\n"+
			"Serves the model with the native engine as an OpenAI-compatible HTTP server:\n"+
			"/v1/completions, /v1/chat/completions, /v1/models, /health.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, "model"); err != nil {
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
	if *maxBatch <= 0 {
		fmt.Fprintf(stderr, "rlnode serve: --max-batch must be positive, got %d\n", *maxBatch)
		return 2
	}
	if *name == "" {
		*name = *modelDir
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	// A LoRA checkpoint (base + PEFT adapter) is served merged.
	e, err := native.Load(*modelDir, native.Config{MaxBatch: *maxBatch})
	if err != nil {
		fmt.Fprintf(stderr, "rlnode serve: %v\n", err)
		return 1
	}
	defer e.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode serve: --listen: %v\n", err)
		return 1
	}
	srv := &http.Server{Handler: native.NewServer(e, *name, log), ReadHeaderTimeout: 30 * time.Second}
	cfg := e.Model()
	fmt.Fprintf(stdout, "serving %q (%s, %d parameters, context %d) on http://%s\n",
		*name, cfg.Architecture, cfg.NumParams(), cfg.MaxPositions, ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
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
