package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/train"
)

// tinyRun is quickstart at a size that runs in about a second.
var tinyRun = []string{"--set", "sft.steps=4", "--set", "schedule.steps=3", "--set", "schedule.eval_every=2",
	"--set", "schedule.checkpoint_every=2", "--set", "eval.held_out=8", "--set", "algorithm.batch_prompts=4",
	"--set", "algorithm.group_size=4", "--set", "checkpoint.keep=1"}

func TestRunQuickstartThenEval(t *testing.T) {
	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "run")
	stdout, stderr, code := runRlnode(t, home, append([]string{"run", "quickstart", "--out", dir}, tinyRun...)...)
	if code != 0 {
		t.Fatalf("rlnode run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	// metrics.jsonl: one line per step, 4 warm-up then 3 RL, evaluations
	// after the warm-up and at the last step.
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 7 {
		t.Fatalf("metrics.jsonl has %d lines, want 7 (4 warm-up + 3 RL)", len(lines))
	}
	for i, m := range lines {
		if m["step"] != float64(i+1) {
			t.Errorf("line %d: step %v", i+1, m["step"])
		}
		if _, ok := m["reward_mean"]; !ok {
			t.Errorf("line %d: no reward_mean", i+1)
		}
	}
	if lines[4]["phase"] != "rl" || lines[4]["reward_mean"] == nil {
		t.Errorf("step 5 is not an RL step with a reward: %v", lines[4])
	}
	for _, s := range []int{4, 7} {
		if _, ok := lines[s-1]["eval_accuracy"]; !ok {
			t.Errorf("step %d has no eval_accuracy", s)
		}
	}
	// The resolved recipe loads back with the overrides in it.
	js, err := os.ReadFile(filepath.Join(dir, "recipe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), "held_out: 8") {
		t.Errorf("recipe.yaml lacks the override eval.held_out=8:\n%s", js)
	}
	// checkpoint.keep=1: only the last of step-6 and step-7 stays.
	ents, err := os.ReadDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "step-7" {
		t.Fatalf("checkpoints: %v, want only step-7", ents)
	}
	ck := filepath.Join(dir, "checkpoints", "step-7")
	for _, name := range []string{"model.safetensors", "optimizer.safetensors", "tokenizer.json", "driver_state.json"} {
		if _, err := os.Stat(filepath.Join(ck, name)); err != nil {
			t.Errorf("checkpoint: %v", err)
		}
	}
	checkCurves(t, dir)
	// rlnode plot redraws it.
	if err := os.Remove(filepath.Join(dir, "curves.png")); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runRlnode(t, home, "plot", dir); code != 0 || !strings.Contains(out, "curves.png") {
		t.Fatalf("rlnode plot: exit %d\n%s%s", code, out, errOut)
	}
	checkCurves(t, dir)
	if !strings.Contains(stderr, "step 7/7") {
		t.Errorf("no progress line for step 7/7 on stderr:\n%s", stderr)
	}

	// rlnode eval on the checkpoint: the same held-out problems and
	// weights as the run's last evaluation, so the same accuracy.
	out := filepath.Join(t.TempDir(), "eval.json")
	stdout, stderr, code = runRlnode(t, home, "eval", "--model", ck, "--recipe", "quickstart", "--set", "eval.held_out=8", "--out", out)
	if code != 0 {
		t.Fatalf("rlnode eval: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "accuracy ") {
		t.Errorf("rlnode eval printed no accuracy:\n%s", stderr)
	}
	var res evalResult
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.Problems != 8 || res.Accuracy != lines[6]["eval_accuracy"] {
		t.Errorf("eval: %+v; the run's last eval_accuracy %v on 8 problems", res, lines[6]["eval_accuracy"])
	}
	// The run folder itself: its newest checkpoint and its recipe.yaml.
	stdout, stderr, code = runRlnode(t, home, "eval", "--model", dir)
	if code != 0 {
		t.Fatalf("rlnode eval --model RUN_DIR: exit %d\n%s%s", code, stdout, stderr)
	}
	var fromDir evalResult
	if err := json.Unmarshal([]byte(stdout), &fromDir); err != nil {
		t.Fatal(err)
	}
	if fromDir.Problems != 8 || fromDir.Accuracy != res.Accuracy || fromDir.Recipe != filepath.Join(dir, "recipe.yaml") {
		t.Errorf("eval --model RUN_DIR: %+v; want the checkpoint's %+v from %s", fromDir, res, filepath.Join(dir, "recipe.yaml"))
	}
}

func TestRunRecipeErrorBeforeRunDir(t *testing.T) {
	home := t.TempDir()
	dir := filepath.Join(t.TempDir(), "run")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\nalgorithm:\n  lr: -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runRlnode(t, home, "run", bad, "--out", dir)
	if code == 0 {
		t.Fatal("rlnode run of a bad recipe exited 0")
	}
	if !strings.Contains(stderr, bad+":3:") || !strings.Contains(stderr, "algorithm.lr") {
		t.Errorf("error does not give %s:3 and algorithm.lr:\n%s", bad, stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the run directory exists after a recipe error (%v)", err)
	}
	// A feature the driver cannot run yet is refused before the run
	// directory exists too, naming the field.
	_, stderr, code = runRlnode(t, home, "run", "quickstart", "--set", "deterministic=false", "--set", "engines.policy.kind=vllm",
		"--set", `engines.policy.vllm={servers: ["http://127.0.0.1:8000"], model: m}`, "--set", "engines.policy.replicas=2", "--out", dir)
	if code == 0 || !strings.Contains(stderr, "engines.policy.replicas") || !strings.Contains(stderr, "not supported") {
		t.Errorf("vllm with 2 replicas: exit %d, stderr:\n%s", code, stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the run directory exists after a refused recipe (%v)", err)
	}
}

// A run that cannot join the cluster (a key the cluster does not hold, an
// address where no node listens) writes no run directory, so the same
// command runs once the key or address is put right.
func TestRunJoinErrorBeforeRunDir(t *testing.T) {
	home := t.TempDir()
	head := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--gpus", "0")
	wrongKey := filepath.Join(t.TempDir(), "wrong.key")
	if err := os.WriteFile(wrongKey, []byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ address, key string }{
		{head.gossip, wrongKey},
		{fmt.Sprintf("127.0.0.1:%d", freePort(t)), filepath.Join(home, "cluster.key")},
	} {
		dir := filepath.Join(t.TempDir(), "run")
		_, stderr, code := runRlnode(t, home, "run", "quickstart", "--address", c.address, "--key-file", c.key,
			"--bind", "127.0.0.1:0", "--out", dir)
		if code == 0 || !strings.Contains(stderr, "join "+c.address) {
			t.Errorf("run --address %s --key-file %s: exit %d, stderr:\n%s", c.address, c.key, code, stderr)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("run --address %s --key-file %s: the run directory exists after the join failed (%v)", c.address, c.key, err)
		}
	}
}

// checkCurves decodes DIR/curves.png: the size train.WriteCurves draws.
func checkCurves(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "curves.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("curves.png: %v", err)
	}
	if b := img.Bounds(); b.Dx() != train.CurvesWidth || b.Dy() != train.CurvesHeight {
		t.Errorf("curves.png is %v, want %dx%d", b, train.CurvesWidth, train.CurvesHeight)
	}
}

func TestPlotBadRunDir(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	_, stderr, code := runRlnode(t, home, "plot", dir)
	if code != 1 || !strings.Contains(stderr, filepath.Join(dir, "metrics.jsonl")) {
		t.Errorf("plot of an empty directory: exit %d, stderr:\n%s", code, stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte("{\"step\":1,\"reward_mean\":0.5}\n{\"step\":\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runRlnode(t, home, "plot", dir)
	if code != 1 || !strings.Contains(stderr, "metrics.jsonl:2:") {
		t.Errorf("plot of a broken metrics.jsonl: exit %d, stderr:\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "curves.png")); !os.IsNotExist(err) {
		t.Errorf("curves.png written from a broken metrics.jsonl (%v)", err)
	}
	if _, _, code = runRlnode(t, home, "plot"); code != 2 {
		t.Errorf("plot without a directory: exit %d, want 2", code)
	}
}

// TestProgressBar feeds the bar steps on a fake clock: warm-up steps of
// 1 s, then RL steps of 10 s, and checks each line.
func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	bar := newProgressBar(&buf, 2, 5)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bar.lastAt = clock
	bar.now = func() time.Time { return clock }
	f := func(v float64) *float64 { return &v }
	steps := []struct {
		took time.Duration
		m    train.Metrics
		want string
	}{
		{time.Second, train.Metrics{Step: 1, Phase: "warmup", Loss: 2.5, Tokens: 400, TrainSeconds: 0.5},
			"step 1/5 (warm-up 1/2) loss 2.5000 800 tok/s warm-up ETA 1s"},
		{time.Second, train.Metrics{Step: 2, Phase: "warmup", Loss: 2, Tokens: 400, TrainSeconds: 0.5, EvalAccuracy: f(0.25)},
			"step 2/5 (warm-up 2/2) loss 2.0000 eval 0.250 800 tok/s"},
		{10 * time.Second, train.Metrics{Step: 3, Phase: "rl", RewardMean: f(0.5), Tokens: 1000, GenSeconds: 2, TrainSeconds: 3},
			"step 3/5 (RL 1/3) reward 0.500 eval 0.250 (at step 2) 200 tok/s ETA 20s"},
		{10 * time.Second, train.Metrics{Step: 4, Phase: "rl", RewardMean: f(0.75), Tokens: 1000, GenSeconds: 4, TrainSeconds: 1},
			"step 4/5 (RL 2/3) reward 0.750 eval 0.250 (at step 2) 200 tok/s ETA 10s"},
		{10 * time.Second, train.Metrics{Step: 5, Phase: "rl", RewardMean: f(1), EvalAccuracy: f(0.5)},
			"step 5/5 (RL 3/3) reward 1.000 eval 0.500"},
	}
	for _, s := range steps {
		clock = clock.Add(s.took)
		buf.Reset()
		bar.step(s.m)
		if got := strings.TrimRight(buf.String(), "\n"); got != s.want {
			t.Errorf("step %d:\n got %q\nwant %q", s.m.Step, got, s.want)
		}
	}
}

// A warm-up that ends early (sft.until): RL's steps are counted from the
// step after it, and the total shrinks by the warm-up steps not taken.
func TestProgressBarEarlyWarmupEnd(t *testing.T) {
	var buf bytes.Buffer
	bar := newProgressBar(&buf, 10, 13)
	f := func(v float64) *float64 { return &v }
	want := []string{
		"step 1/13 (warm-up 1/10) loss 1.0000",
		"step 2/13 (warm-up 2/10) loss 1.0000",
		"step 3/5 (RL 1/3) reward 0.500",
		"step 4/5 (RL 2/3) reward 0.500",
	}
	for i, m := range []train.Metrics{{Step: 1, Phase: "warmup", Loss: 1}, {Step: 2, Phase: "warmup", Loss: 1},
		{Step: 3, Phase: "rl", RewardMean: f(0.5)}, {Step: 4, Phase: "rl", RewardMean: f(0.5)}} {
		buf.Reset()
		bar.step(m)
		got := strings.TrimRight(buf.String(), "\n")
		if j := strings.Index(got, " warm-up ETA"); j >= 0 {
			got = got[:j]
		}
		if j := strings.Index(got, " ETA"); j >= 0 {
			got = got[:j]
		}
		if got != want[i] {
			t.Errorf("step %d:\n got %q\nwant %q", m.Step, got, want[i])
		}
	}
}

// TestRunMLMTCurves: a tiny MLMT three-turn run; the accuracy panel of
// its curves.png has the turn-1 and turn-3 accuracy curves and no turn-2
// one (SCoRe only): their colours appear in its quarter of the image
// (legend and points) or not.
func TestRunMLMTCurves(t *testing.T) {
	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "run")
	stdout, stderr, code := runRlnode(t, home, "run", "mlmt_math", "--out", dir, "--set", "sft.steps=2", "--set", "schedule.steps=2",
		"--set", "schedule.eval_every=2", "--set", "eval.held_out=4", "--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=2")
	if code != 0 {
		t.Fatalf("rlnode run mlmt_math: exit %d\n%s%s", code, stdout, stderr)
	}
	checkCurves(t, dir)
	f, err := os.Open(filepath.Join(dir, "curves.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	var panel train.CurvePanel
	for _, p := range train.CurvePanels {
		if p.Title == "accuracy per turn" {
			panel = p
		}
	}
	// The panel's quarter of the 2×2 grid.
	w, h := train.CurvesWidth/2, train.CurvesHeight/2
	x0, y0 := panel.Quarter%2*w, panel.Quarter/2*h
	count := map[color.RGBA]int{}
	for y := y0; y < y0+h; y++ {
		for x := x0; x < x0+w; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			count[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}]++
		}
	}
	for i, name := range panel.Fields {
		want := name != "turn2_accuracy"
		if got := count[train.CurveColors[i]] > 0; got != want {
			t.Errorf("curves.png: %s colour present %v, want %v", name, got, want)
		}
	}
}

// A run with a sharded learner says above the progress bar how the ranks'
// gradients travel: through shared memory on one host, through the
// transport, with the reason, when the same-host path is off.
func TestRunShardedSaysHowGradientsTravel(t *testing.T) {
	if actor.HostID() == "" {
		t.Skip("no host identity here: ranks never share memory")
	}
	for _, c := range []struct{ env, want string }{
		{"0", `msg="learner shards joined" policy=solver shards=2 gradients="shared memory"`},
		{"1", `msg="learner shards joined" policy=solver shards=2 gradients="transport: `},
	} {
		t.Run("RLNODE_BULK_TCP="+c.env, func(t *testing.T) {
			t.Setenv("RLNODE_BULK_TCP", c.env)
			home, dir := t.TempDir(), filepath.Join(t.TempDir(), "run")
			args := append(append([]string{"run", "quickstart", "--out", dir}, tinyRun...), "--set", "placement.learner_shards=2")
			stdout, stderr, code := runRlnode(t, home, args...)
			if code != 0 {
				t.Fatalf("rlnode run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if !strings.Contains(stderr, "rlnode run: level=INFO "+c.want) {
				t.Errorf("stderr does not say %q:\n%s", c.want, stderr)
			}
			if c.env == "1" && !strings.Contains(stderr, "same-host path is off") {
				t.Errorf("stderr does not say why the transport:\n%s", stderr)
			}
		})
	}
}
