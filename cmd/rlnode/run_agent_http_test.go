package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/rollout/env/envtest"
)

// `rlnode run` on an agent recipe whose environment is served over HTTP:
// the reference server rollout/env/testdata/guess_server.py, a real
// python3 process on 127.0.0.1.

// agentHTTPRecipe writes a tiny agent recipe playing the server at url
// for rlSteps RL steps, with no warm-up (the server has no teacher).
func agentHTTPRecipe(t *testing.T, url string, rlSteps int) string {
	t.Helper()
	text := `name: agent_http_test
seed: 3
deterministic: true
models:
  policy:
    init: {architecture: qwen2, vocab_size: 512, hidden_size: 32, intermediate_size: 64, layers: 1, heads: 2, kv_heads: 1, max_positions: 128}
engines:
  policy: {kind: native, replicas: 1, max_batch: 64}
episode:
  type: agent
  agent:
    env: http
    url: ` + url + `
    timeout_seconds: 10
    retries: 2
    max_steps: 3
    returns: episode
    template: "{{.Observation}}\n"
algorithm: {name: grpo, group_size: 2, batch_prompts: 2, max_tokens: 8, temperature: 1.0, lr: 1.0e-4, micro_batch: 16}
schedule: {steps: ` + fmt.Sprint(rlSteps) + `, eval_every: 0, checkpoint_every: 0}
eval: {held_out: 2}
checkpoint: {keep: 0}
`
	p := filepath.Join(t.TempDir(), "agent_http.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// rlSteps counts metrics.jsonl's RL steps in dir.
func rlSteps(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		var m struct {
			Phase      string   `json:"phase"`
			RewardMean *float64 `json:"reward_mean"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Phase == "rl" {
			if m.RewardMean == nil {
				t.Fatalf("an RL step without reward_mean in metrics.jsonl: %s", l)
			}
			n++
		}
	}
	return n
}

// TestRunAgentHTTPEnv: rlnode run trains through the HTTP environment:
// every RL step lands in metrics.jsonl.
func TestRunAgentHTTPEnv(t *testing.T) {
	url, _ := envtest.GuessServer(t)
	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "run")
	stdout, stderr, code := runRlnode(t, home, "run", agentHTTPRecipe(t, url, 3), "--out", dir)
	if code != 0 {
		t.Fatalf("rlnode run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if n := rlSteps(t, dir); n != 3 {
		t.Fatalf("metrics.jsonl has %d RL steps, want 3\nstderr:\n%s", n, stderr)
	}
}

// TestRunAgentHTTPEnvKilled: when the environment server dies mid-run,
// rlnode run ends with a non-zero status and an error naming the server's
// URL, instead of waiting on it.
func TestRunAgentHTTPEnvKilled(t *testing.T) {
	url, server := envtest.GuessServer(t)
	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "run")
	run := startRun(t, home, "run", agentHTTPRecipe(t, url, 100000), "--out", dir)
	run.waitFor(t, "an RL step in metrics.jsonl", func() bool { return rlSteps(t, dir) > 0 })
	if err := server.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = server.Wait()
	code := run.wait(t)
	if code == 0 {
		t.Fatalf("rlnode run exited 0 after its environment server was killed\nstderr:\n%s", run.stderr)
	}
	if !strings.Contains(run.stderr.String(), url) {
		t.Fatalf("the error does not name the server %s\nstderr:\n%s", url, run.stderr)
	}
	lines := strings.Split(strings.TrimSpace(run.stderr.String()), "\n")
	t.Logf("exit %d: %s", code, lines[len(lines)-1])
}
