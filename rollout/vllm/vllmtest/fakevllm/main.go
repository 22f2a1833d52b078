// Command fakevllm stands in for `vllm serve` where vLLM cannot run: it
// takes vLLM's command line (serve MODEL --served-model-name NAME --host
// HOST --port PORT, and more options, which it records), serves
// vllmtest's answers in vLLM's shapes there, and runs until SIGTERM. The
// vocabulary is MODEL/config.json's vocab_size where there is one.
//
// FAKEVLLM_RECORD=DIR writes DIR/PORT.json with its arguments, the
// environment variables vLLM reads (CUDA_VISIBLE_DEVICES,
// VLLM_SERVER_DEV_MODE, whether VLLM_API_KEY is set) and the SHA-256 of
// each file of MODEL, and appends to DIR/PORT.events.jsonl a line for
// every weight update it finished (with the SHA-256 of each file of the
// folder it read, and how many entries that folder's parent holds) and
// every generation it answers; FAKEVLLM_READ_FILES=1 reads MODEL's
// config.json (exiting 1 without it) and every checkpoint and adapter it
// is told to load, as vLLM does (vllmtest.Options.ReadFiles);
// FAKEVLLM_FAIL=TEXT prints TEXT and exits 1 before serving, as a vLLM
// that runs out of memory loading the model.
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
	readFiles := os.Getenv("FAKEVLLM_READ_FILES") == "1"
	opts.ReadFiles = readFiles
	if _, err := os.Stat(filepath.Join(model, "config.json")); err != nil && readFiles {
		fmt.Fprintln(os.Stderr, "fakevllm: model", model+":", err)
		os.Exit(1)
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
			"dev_mode": os.Getenv("VLLM_SERVER_DEV_MODE"), "api_key_set": keySet, "pid": os.Getpid(),
			"model_files": hashes(model)})
		if err := os.WriteFile(filepath.Join(dir, port+".json"), rec, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "fakevllm:", err)
			os.Exit(1)
		}
		events, err := os.OpenFile(filepath.Join(dir, port+".events.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakevllm:", err)
			os.Exit(1)
		}
		defer events.Close()
		opts.Events = func(e vllmtest.Event) {
			line := map[string]any{"op": e.Op, "path": e.Path, "version": e.Version, "weights": e.Weights}
			if e.Path != "" {
				line["files"] = hashes(e.Path)
				sib, _ := os.ReadDir(filepath.Dir(e.Path))
				line["siblings"] = len(sib)
			}
			b, _ := json.Marshal(line)
			_, _ = events.Write(append(b, '\n'))
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

// hashes is the SHA-256 of each regular file in dir, by name (empty
// where dir cannot be read).
func hashes(dir string) map[string]string {
	h, err := vllmtest.FolderHashes(dir)
	if err != nil {
		return map[string]string{}
	}
	return h
}
