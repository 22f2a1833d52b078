package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/traces"
)

// tinyCheckpoint writes a small random Qwen2 checkpoint with the built-in
// tokenizer through `rlnode model init`.
func tinyCheckpoint(t *testing.T) string {
	t.Helper()
	return tinyCheckpointContext(t, 128)
}

// tinyCheckpointContext is tinyCheckpoint with a context of positions tokens.
func tinyCheckpointContext(t *testing.T, positions int) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":32,"intermediate_size":64,
		"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":768,
		"max_position_embeddings":%d,"tie_word_embeddings":true}`, positions)), 0o644)
	out := filepath.Join(dir, "ckpt")
	if code, _, stderr := run(t, "model", "init", "--config", cfg, "--out", out, "--seed", "1"); code != 0 {
		t.Fatalf("model init: exit %d: %s", code, stderr)
	}
	return out
}

// startServe runs `rlnode serve` on a free port with args and returns its
// URL, the process and a channel closed when it exits.
func startServe(t *testing.T, args ...string) (string, *exec.Cmd, <-chan struct{}, *bytes.Buffer) {
	t.Helper()
	cmd := rlnodeCmd(t, t.TempDir(), append([]string{"serve", "--listen", "127.0.0.1:0", "--served-model-name", "tiny"}, args...)...)
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); pw.Close(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })

	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case line := <-lines:
		m := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+)$`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("banner %q", line)
		}
		return m[1], cmd, exited, &errb
	case <-time.After(30 * time.Second):
		t.Fatalf("no banner within 30s; stderr: %s", errb.String())
	}
	return "", nil, nil, nil
}

func TestServeAnswersAndStopsOnSignal(t *testing.T) {
	ckpt := tinyCheckpoint(t)
	url, cmd, exited, errb := startServe(t, "--model", ckpt)

	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(url + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", err, resp)
	}
	resp.Body.Close()
	resp, err = client.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"return_token_ids":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Choices []struct {
			TokenIDs     []int  `json:"token_ids"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	err = json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(r.Choices) != 1 || len(r.Choices[0].TokenIDs) == 0 || r.Usage.CompletionTokens != len(r.Choices[0].TokenIDs) {
		t.Fatalf("chat: status %d, %v, %+v", resp.StatusCode, err, r)
	}

	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s of SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit %d after SIGINT; stderr: %s", code, errb.String())
	}
}

func TestServeBadArguments(t *testing.T) {
	ckpt := tinyCheckpoint(t)
	// A run folder: before, "read config: open RUN/config.json: no such file".
	runDir := t.TempDir()
	for _, s := range []string{"step-9", "step-12"} {
		if err := os.MkdirAll(filepath.Join(runDir, "checkpoints", s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A path that is not there, and a folder that is no checkpoint: before,
	// "read config: stat none/config.json: no such file or directory",
	// naming neither the flag nor what was wanted.
	none, empty := filepath.Join(t.TempDir(), "none"), t.TempDir()
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve"}, 2, "--model is required"},
		{[]string{"serve", "--model", none}, 1, "--model " + none + ": no such folder"},
		{[]string{"serve", "--model", "none"}, 1, "--model none: no such folder"},
		{[]string{"serve", "--model", empty}, 1, "--model " + empty + " holds no config.json: not a checkpoint folder"},
		{[]string{"serve", "--model", filepath.Join(ckpt, "config.json")}, 1, "config.json is a file, not a checkpoint folder"},
		{[]string{"env", "rollout", "equations", "--policy", none, "--out", filepath.Join(empty, "e.jsonl")}, 1, "--policy " + none + ": no such folder"},
		// It said: environment url "": want http(s)://host[:port][/path].
		{[]string{"env", "rollout", "http", "--policy", "random", "--out", filepath.Join(empty, "h.jsonl")}, 2, "ENV http needs --url URL"},
		{[]string{"eval", "--model", none}, 2, "--model " + none + ": no such folder"},
		{[]string{"model", "forward", "--model", none, "--input", "in.json", "--out", filepath.Join(empty, "out.safetensors")}, 1, "--model " + none + ": no such folder"},
		{[]string{"serve", "--model", runDir}, 1, "--model " + runDir + " is a run folder, not a checkpoint: give one of its checkpoints, e.g. " + filepath.Join(runDir, "checkpoints", "step-12")},
		// env rollout takes a run folder's newest intact checkpoint (as eval does): these two are empty.
		{[]string{"env", "rollout", "equations", "--policy", runDir, "--out", filepath.Join(runDir, "e.jsonl")}, 1, "--policy " + runDir + " (a run folder): no complete, intact checkpoint in " + filepath.Join(runDir, "checkpoints")},
		{[]string{"serve", "--model", ckpt, "--listen", "127.0.0.1:99999"}, 1, "--listen"},
		{[]string{"serve", "--model", ckpt, "--max-batch", "0"}, 2, "--max-batch must be positive"},
		{[]string{"serve", "--model", ckpt, "--max-body-bytes", "0"}, 2, "--max-body-bytes must be positive"},
		{[]string{"serve", "--model", ckpt, "--max-inflight-bytes", "0"}, 2, "--max-inflight-bytes must be positive"},
		{[]string{"serve", "--model", ckpt, "--max-requests", "-1"}, 2, "--max-requests and --max-queued-tokens must be ≥ 0"},
		{[]string{"serve", "--model", ckpt, "--idle-timeout", "0s"}, 2, "--write-timeout must be positive, got 30s, 0s and 30s"},
		{[]string{"serve", "--model", ckpt, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"serve", "--model", ckpt, "--device", "tpu"}, 1, `device "tpu": want cpu, cuda or cuda-bf16`},
	}
	for _, tc := range tests {
		code, _, stderr := run(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// TestServeModelBoundsKeptAnswers: with --traces, what serve --model's
// recorder keeps of answers in progress counts against
// --max-inflight-bytes, all clients together, as with --upstream: an
// answer past it reaches the client whole but is recorded truncated
// (marked, and logged naming the flag). Before, nothing bounded the sum:
// 256 requests in progress could pin 8 MiB of answer each.
func TestServeModelBoundsKeptAnswers(t *testing.T) {
	ckpt := tinyCheckpoint(t)
	store := t.TempDir()
	url, cmd, exited, errb := startServe(t, "--model", ckpt, "--traces", store, "--trace-flush", "200ms", "--max-inflight-bytes", "64")
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"tiny","prompt":"hello","max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(b) <= 64 || !strings.Contains(string(b), `"choices"`) {
		t.Fatalf("answer %d %s, want 200 and a whole answer of more than 64 bytes", resp.StatusCode, b)
	}
	stopServe(t, cmd, exited)
	all, skipped, err := traces.Load(store, traces.Any())
	if err != nil || len(skipped) > 0 {
		t.Fatalf("load: %v %v\nstderr: %s", err, skipped, errb)
	}
	if len(all) != 1 || len(all[0].Spans) != 1 || !strings.Contains(all[0].Spans[0].Attributes, "rlnode.record.truncated") {
		t.Errorf("recorded %+v, want one call marked rlnode.record.truncated", all)
	}
	if !strings.Contains(errb.String(), "recording a call truncated") || !strings.Contains(errb.String(), "--max-inflight-bytes") {
		t.Errorf("stderr does not log the truncation naming --max-inflight-bytes:\n%s", errb)
	}
}
