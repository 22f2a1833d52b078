// Command fakevllm stands in for `vllm serve` where vLLM cannot run: it
// takes vLLM's command line (serve MODEL --served-model-name NAME --host
// HOST --port PORT, and more options, which it records), serves
// vllmtest's answers in vLLM's shapes there, and runs until SIGTERM. The
// vocabulary is MODEL/config.json's vocab_size where there is one.
//
// FAKEVLLM_RECORD=DIR writes DIR/PORT.json with its arguments and the
// environment variables vLLM reads (CUDA_VISIBLE_DEVICES,
// VLLM_SERVER_DEV_MODE, whether VLLM_API_KEY is set); FAKEVLLM_FAIL=TEXT
// prints TEXT and exits 1 before serving, as a vLLM that runs out of
// memory loading the model.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

func main() {
	args := os.Args[1:]
	if len(args) < 2 || args[0] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: fakevllm serve MODEL [--served-model-name NAME] [--host HOST] [--port PORT] [options]")
		os.Exit(2)
	}
	model := args[1]
	opts := vllmtest.Options{Model: model, APIKey: os.Getenv("VLLM_API_KEY")}
	host, port := "127.0.0.1", "8000"
	var rest []string
	for i := 2; i < len(args); i++ {
		switch args[i] {
		case "--served-model-name", "--host", "--port":
			if i+1 >= len(args) {
				fmt.Fprintf(os.Stderr, "fakevllm: %s needs a value\n", args[i])
				os.Exit(2)
			}
			switch args[i] {
			case "--served-model-name":
				opts.Model = args[i+1]
			case "--host":
				host = args[i+1]
			case "--port":
				port = args[i+1]
			}
			i++
		default:
			rest = append(rest, args[i])
		}
	}
	if b, err := os.ReadFile(filepath.Join(model, "config.json")); err == nil {
		var c struct {
			VocabSize int `json:"vocab_size"`
		}
		if json.Unmarshal(b, &c) == nil && c.VocabSize > 0 {
			opts.Vocab = c.VocabSize
		}
	}
	if dir := os.Getenv("FAKEVLLM_RECORD"); dir != "" {
		_, keySet := os.LookupEnv("VLLM_API_KEY")
		rec, _ := json.Marshal(map[string]any{"model": model, "served_model_name": opts.Model, "host": host, "port": port,
			"options": rest, "cuda_visible_devices": os.Getenv("CUDA_VISIBLE_DEVICES"),
			"dev_mode": os.Getenv("VLLM_SERVER_DEV_MODE"), "api_key_set": keySet, "pid": os.Getpid()})
		if err := os.WriteFile(filepath.Join(dir, port+".json"), rec, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "fakevllm:", err)
			os.Exit(1)
		}
	}
	if msg := os.Getenv("FAKEVLLM_FAIL"); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
	opts.Addr = host + ":" + port
	s, err := vllmtest.NewAt(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakevllm:", err)
		os.Exit(1)
	}
	fmt.Println("INFO: serving", opts.Model, "at", s.URL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	s.Close()
}
