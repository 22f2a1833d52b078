package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
	"github.com/rlnode/rlnode/train"
)

// `rlnode run --address` with engines.policy.vllm.launch on a cluster
// whose node was started with --vllm (here fakevllm, on 2 declared GPUs):
// the run starts two servers there, one GPU each, generates on them and
// stops them when it ends. A node that carries the launch label without
// --vllm is refused.
func TestRunLaunchesVLLMOnANode(t *testing.T) {
	fake := vllmtest.BuildFakeVLLM(t)
	rec := t.TempDir()
	t.Setenv("FAKEVLLM_RECORD", rec)
	home := t.TempDir()
	if _, stderr, code := runRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--label", "rlnode.vllm=on"); code != 2 || !strings.Contains(stderr, "give --vllm COMMAND") {
		t.Fatalf("start with the launch label and no --vllm: exit %d, %s", code, stderr)
	}
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head", "--gpus", "2", "--vllm", fake+" serve")
	dumpOnFailure(t, head)
	key := filepath.Join(home, "cluster.key")
	model := t.TempDir()
	if _, err := learner.InitCheckpoint(train.Quickstart("").Model, "quickstart", model, 1); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "run")
	stdout, stderr, code := runRlnode(t, home, "run", "quickstart", "--address", head.gossip, "--key-file", key, "--bind", "127.0.0.1:0", "--out", out,
		"--set", "deterministic=false", "--set", "engines.policy.kind=vllm",
		"--set", "engines.policy.vllm={model: served, launch: {count: 2, gpus: 1}}",
		"--set", fmt.Sprintf("models.policy={path: %q}", model),
		"--set", "sft.steps=1", "--set", "schedule.steps=2", "--set", "eval.held_out=4", "--set", "schedule.eval_every=2",
		"--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	recs := vllmtest.FakeRecords(t, rec)
	if len(recs) != 2 {
		t.Fatalf("%d servers started, want 2", len(recs))
	}
	var devices []string
	for _, r := range recs {
		if r.Model != model {
			t.Errorf("server of %s, want %s", r.Model, model)
		}
		devices = append(devices, r.Devices)
		if err := syscall.Kill(r.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("server process %d still there after the run (%v)", r.PID, err)
		}
	}
	slices.Sort(devices)
	if !slices.Equal(devices, []string{"0", "1"}) {
		t.Errorf("the servers got CUDA_VISIBLE_DEVICES %v, want 0 and 1", devices)
	}
	if len(readLines(t, filepath.Join(out, "metrics.jsonl"))) != 3 {
		t.Errorf("metrics: want 3 lines (1 warm-up and 2 RL steps)")
	}
}
