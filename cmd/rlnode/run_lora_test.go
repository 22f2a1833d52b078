package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rlnode/rlnode/train"
)

// loraArgs train rank-4 adapters (with dropout, so its random state must
// travel) in the RL steps; reward-weighted SFT makes every sample count at
// this size, where the reward is mostly zero, so the adapters move at
// every step.
var loraArgs = []string{"--set", "models.policy.lora={rank: 4, alpha: 8, dropout: 0.05}", "--set", "algorithm.name=rw_sft", "--set", "algorithm.lr=1e-2"}

// A LoRA run SIGKILLed after a checkpoint and resumed with --resume ends
// with the same bytes as an uninterrupted run in the base, the adapter and
// the adapters' optimizer state; rlnode eval on its last checkpoint
// (base + PEFT adapter, merged for serving) scores the run's own last
// eval_accuracy.
func TestRunLoRAKilledThenResumed(t *testing.T) {
	const rlSteps = 24
	home := t.TempDir()
	whole, killed := filepath.Join(t.TempDir(), "whole"), filepath.Join(t.TempDir(), "killed")
	args := append(deterministicRun(rlSteps), loraArgs...)
	if stdout, stderr, code := runRlnode(t, home, append([]string{"run", "quickstart", "--out", whole}, args...)...); code != 0 {
		t.Fatalf("uninterrupted run: exit %d\n%s%s", code, stdout, stderr)
	}
	last := fmt.Sprintf("step-%d", 2+rlSteps)
	run := startRun(t, home, append([]string{"run", "quickstart", "--out", killed}, args...)...)
	firstRL := filepath.Join(killed, "checkpoints", "step-4", train.DriverStateFile)
	run.waitFor(t, "checkpoint step-4", func() bool { _, err := os.Stat(firstRL); return err == nil })
	select {
	case <-run.done:
		t.Fatalf("the run ended before the kill: nothing to resume\nstderr:\n%s", run.stderr)
	default:
	}
	if err := run.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := run.wait(t); code != -1 {
		t.Fatalf("killed run exit code %d, want -1 (signal)", code)
	}
	if _, err := os.Stat(filepath.Join(killed, "checkpoints", last)); err == nil {
		t.Fatal("the killed run reached its last checkpoint before the kill: nothing was resumed")
	}
	stdout, stderr, code := runRlnode(t, home, "run", filepath.Join(killed, "recipe.yaml"), "--out", killed, "--resume")
	if code != 0 {
		t.Fatalf("resumed run: exit %d\n%s%s", code, stdout, stderr)
	}
	before := fmt.Sprintf("step-%d", rlSteps)
	if bytes.Equal(readFile(t, whole, before, "adapter_model.safetensors"), readFile(t, whole, last, "adapter_model.safetensors")) {
		t.Fatalf("the adapter at %s and %s is equal: the comparison below would prove nothing", before, last)
	}
	if !bytes.Equal(readFile(t, whole, before, "model.safetensors"), readFile(t, whole, last, "model.safetensors")) {
		t.Errorf("the base moved between %s and %s", before, last)
	}
	for _, f := range []string{"model.safetensors", "adapter_model.safetensors", "adapter_config.json", "optimizer.safetensors"} {
		if a, b := readFile(t, whole, last, f), readFile(t, killed, last, f); !bytes.Equal(a, b) {
			t.Errorf("%s after kill and resume differs from the uninterrupted run's (%d vs %d bytes)", f, len(b), len(a))
		}
	}

	// rlnode eval: base + adapter, the run's last evaluation.
	out := filepath.Join(t.TempDir(), "eval.json")
	ck := filepath.Join(whole, "checkpoints", last)
	stdout, stderr, code = runRlnode(t, home, "eval", "--model", ck, "--recipe", filepath.Join(whole, "recipe.yaml"), "--out", out)
	if code != 0 {
		t.Fatalf("rlnode eval: exit %d\n%s%s", code, stdout, stderr)
	}
	var res evalResult
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(readFileAt(t, filepath.Join(whole, "metrics.jsonl")))), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatal(err)
	}
	if res.Problems != 4 || res.Accuracy != m["eval_accuracy"] {
		t.Errorf("eval: %+v; the run's last eval_accuracy %v on 4 problems", res, m["eval_accuracy"])
	}
}

func readFileAt(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
