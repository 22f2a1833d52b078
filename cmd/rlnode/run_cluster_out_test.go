package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunOnClusterRelativeOut: `rlnode run --address` with a relative
// --out, started in another folder than the node that hosts its learner.
// The learner writes its checkpoint files where the driver writes the
// rest of the checkpoint (tokenizer, driver state, manifest): in the
// driver's folder, not under the learner node's working directory.
// Before, the learner wrote OUT/checkpoints/step-N in its own working
// directory and the run failed at its first checkpoint ("open
// .../tokenizer.json: no such file or directory").
func TestRunOnClusterRelativeOut(t *testing.T) {
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "head", "--resource", "learner=1")
	key := filepath.Join(home, "cluster.key")
	const rel = "relative-out-test-run"
	nodeDir, err := os.Getwd() // the head node's working directory
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(nodeDir, rel)) })

	ctx, cancel := context.WithTimeout(context.Background(), runGuard)
	defer cancel()
	cmd := rlnodeCmd(t, home, "run", "quickstart", "--address", head.gossip, "--key-file", key, "--bind", "127.0.0.1:0", "--out", rel,
		"--set", "placement.learner.custom={learner: 1}",
		"--set", "sft.steps=2", "--set", "schedule.steps=2", "--set", "eval.held_out=8", "--set", "schedule.eval_every=2")
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	cmd.Env = append(os.Environ(), "RLNODE_CLI_MAIN=1", "RLNODE_HOME="+home)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rlnode run --out %s on the cluster: %v\n%s", rel, err, out)
	}
	ck := filepath.Join(cmd.Dir, rel, "checkpoints", "step-4")
	for _, f := range []string{"model.safetensors", "tokenizer.json", "driver_state.json"} {
		if _, err := os.Stat(filepath.Join(ck, f)); err != nil {
			t.Errorf("checkpoint file: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(nodeDir, rel)); err == nil {
		t.Errorf("the learner wrote %s under its node's working directory %s", rel, nodeDir)
	}
	// The run says where its actors landed: the learner (pinned to head by
	// its custom resource) with its node, host and device, the rollout
	// actors with their nodes. It said only "rollout actors
	// nodes=NODE×1", and nothing of the learner.
	host, _ := os.Hostname()
	for _, want := range []string{`msg="learner placed" policy=solver shards=1`, "node head, host " + host + ", device cpu",
		`msg="rollout actors placed" policy=solver actors=1`, "device=cpu", "-0 on node "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the run's output lacks %q:\n%s", want, out)
		}
	}
	// No rollout actor was lost, so the run says nothing of lost ones
	// (it printed "rollout: 0 generation chunks regenerated after lost
	// rollout actors" after every run on a cluster).
	if !strings.Contains(string(out), "rollout actors") || strings.Contains(string(out), "after lost rollout actors") {
		t.Errorf("a run that lost no rollout actor speaks of lost ones, or placed none:\n%s", out)
	}
}
