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

// TestRunAgentAcrossNodes: agent episodes on a cluster of real processes.
// `rlnode run --address` drives the Python reference environment server
// from the driver's node (the head, where the learner runs) while the
// policy generates on two rollout actors, one on each of two `rlnode join`
// nodes that cannot read the run directory: every RL step lands in
// metrics.jsonl with both actors live, the agent figures and the
// environment steps it took.
func TestRunAgentAcrossNodes(t *testing.T) {
	url, _ := envtest.GuessServer(t)
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head", "--resource", "learner=1")
	key := filepath.Join(home, "cluster.key")
	outParent := t.TempDir()
	out := filepath.Join(outParent, "run")
	var nodes []*runningNode
	for _, id := range []string{"roll-a", "roll-b"} {
		nodes = append(nodes, startHidden(t, outParent, "join", head.gossip, "--bind", "127.0.0.1:0", "--key-file", key, "--node-id", id, "--resource", "rollout=1"))
	}
	dumpOnFailure(t, append(nodes, head)...)
	const steps = 4
	run := startRun(t, home, "run", agentHTTPRecipe(t, url, steps), "--address", head.gossip, "--key-file", key, "--bind", "127.0.0.1:0", "--out", out,
		"--set", "deterministic=false", "--set", "engines.policy.replicas=2",
		"--set", "placement.rollout={cpus: 0, custom: {rollout: 1}}", "--set", "placement.learner.custom={learner: 1}")
	if code := run.wait(t); code != 0 {
		t.Fatalf("run exit %d\nstderr:\n%s", code, run.stderr)
	}
	lines := readLines(t, filepath.Join(out, "metrics.jsonl"))
	if len(lines) != steps {
		t.Fatalf("%d metrics lines, want %d", len(lines), steps)
	}
	for i, m := range lines {
		live, _ := m["rollout_live"].(float64)
		ape, _ := m["actions_per_episode"].(float64)
		_, cr := m["completion_rate"].(float64)
		if m["phase"] != "rl" || live != 2 || ape < 1 || !cr {
			t.Errorf("line %d: phase %v, rollout_live %v, actions_per_episode %v, completion_rate %v", i+1, m["phase"], m["rollout_live"], m["actions_per_episode"], m["completion_rate"])
		}
		// Every action of the step's 4 episodes (2 games × 2) stepped the
		// server once, timed.
		steps, _ := m["env_steps"].(float64)
		sec, _ := m["env_step_s"].(float64)
		if steps != ape*4 || !(sec > 0) {
			t.Errorf("line %d: env_steps %v, env_step_s %v, want %v steps and a time", i+1, m["env_steps"], m["env_step_s"], ape*4)
		}
	}
}

// TestRunAgentHTTPEnvHugeRewards: a server whose step rewards are each
// finite but sum past the largest float (1e308 a step) fails the episodes,
// not the run: each episode ends at the step whose reward passes the
// bound (the error in its turn's note: TestHTTPHugeRewards), and
// metrics.jsonl counts those steps in env_errors. Before,
// the run ended at its first RL step ("agent returns: episode ...: total
// reward +Inf").
func TestRunAgentHTTPEnvHugeRewards(t *testing.T) {
	url, _ := envtest.GuessServer(t, "--step-reward", "1e308")
	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "run")
	stdout, stderr, code := runRlnode(t, home, "run", agentHTTPRecipe(t, url, 2), "--out", dir)
	if code != 0 {
		t.Fatalf("rlnode run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if n := rlSteps(t, dir); n != 2 {
		t.Fatalf("metrics.jsonl has %d RL steps, want 2\nstderr:\n%s", n, stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct {
			Phase     string   `json:"phase"`
			EnvErrors *int     `json:"env_errors"`
			Return    *float64 `json:"episode_return"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		// 2 prompts × 2 episodes, each ended at its first step.
		if m.Phase == "rl" && (m.EnvErrors == nil || *m.EnvErrors != 4 || m.Return == nil || *m.Return != 0) {
			t.Fatalf("an RL step's env_errors and episode_return: %s; want 4 and 0", l)
		}
	}
}
