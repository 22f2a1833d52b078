package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/fsizetest"
	"github.com/rlnode/rlnode/rollout/verify"
)

func TestCtxoptValidateNamesFileAndLine(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runMain([]string{"ctxopt", "validate", "ctxopt_hierarchical"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "ok") {
		t.Fatalf("validate a built-in recipe: exit %d: %s%s", code, out.String(), errb.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	src := "name: x\nformulation: bandit\nexecutor: {engine: sim}\nspace:\n  tools: [calculator, abacus]\n  budgets: [64]\n  atoms: []\n  max_atoms: 1\n"
	if err := os.WriteFile(bad, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := runMain([]string{"ctxopt", "validate", bad}, &out, &errb); code != 1 {
		t.Fatalf("validate a bad recipe: exit %d, want 1", code)
	}
	for _, want := range []string{bad + `:5: space.tools.1: unknown tool "abacus"`, bad + ":7: space.atoms: the prompt-atom library is empty"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("errors:\n%s\nwant a line %q", errb.String(), want)
		}
	}
}

// train → eval → benchmark, cut short.
func TestCtxoptTrainEvalBenchmark(t *testing.T) {
	if _, err := verify.NewSandbox(verify.SandboxConfig{}); err != nil {
		t.Skipf("the recipes' python tool needs the sandbox: %v", err)
	}
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := runMain(append([]string{"ctxopt"}, args...), &out, &errb); code != 0 {
			t.Fatalf("rlnode ctxopt %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		}
		return out.String()
	}
	for _, r := range []string{"ctxopt_bandit", "ctxopt_hierarchical"} {
		out := run("train", r, "--iterations", "3", "--eval-per-type", "1", "--out", filepath.Join(dir, r))
		if !strings.Contains(out, "executions/s") || !strings.Contains(out, "random") {
			t.Fatalf("train %s printed:\n%s", r, out)
		}
	}
	out := run("eval", "ctxopt_bandit", "--policy", filepath.Join(dir, "ctxopt_bandit", "policy.json"), "--eval-per-type", "1")
	if !strings.Contains(out, "held-out n=10") {
		t.Fatalf("eval printed:\n%s", out)
	}
	bench := filepath.Join(dir, "bench")
	out = run("benchmark", "ctxopt_bandit", "--policy", filepath.Join(dir, "ctxopt_bandit", "policy.json"), "--eval-per-type", "1",
		"--also", "ctxopt_hierarchical="+filepath.Join(dir, "ctxopt_hierarchical", "policy.json"), "--out", bench)
	for _, want := range []string{"best fixed per type", "ctxopt_hierarchical is", "Pareto front", "pareto.png", "ctxopt_hierarchical configurations per question type:\n  arithmetic/1: 1 "} {
		if !strings.Contains(out, want) {
			t.Errorf("benchmark output lacks %q:\n%s", want, out)
		}
	}
	var res struct {
		Fixed       []json.RawMessage                    `json:"fixed"`
		Also        []json.RawMessage                    `json:"also"`
		Configs     map[string]map[string]int            `json:"learned_configs_per_type"`
		AlsoConfigs map[string]map[string]map[string]int `json:"also_configs_per_type"`
	}
	b, err := os.ReadFile(filepath.Join(bench, "benchmark.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil || len(res.Fixed) != 36 || len(res.Also) != 1 {
		t.Fatalf("benchmark.json: %d fixed, %d also, %v; want 36 and 1", len(res.Fixed), len(res.Also), err)
	}
	// Every held-out question (1 per type, 10 types) has its whole
	// configuration counted under its type, for each policy.
	for name, per := range map[string]map[string]map[string]int{"learned": res.Configs, "ctxopt_hierarchical": res.AlsoConfigs["ctxopt_hierarchical"]} {
		n := 0
		for typ, cs := range per {
			for c, k := range cs {
				if !strings.HasPrefix(c, "direct") && !strings.HasPrefix(c, "reason-") {
					t.Errorf("%s, %s: configuration %q", name, typ, c)
				}
				n += k
			}
		}
		if len(per) != 10 || n != 10 {
			t.Errorf("%s configurations per type: %d types, %d questions; want 10 and 10: %v", name, len(per), n, per)
		}
	}
	if st, err := os.Stat(filepath.Join(bench, "pareto.png")); err != nil || st.Size() == 0 {
		t.Fatalf("pareto.png: %v", err)
	}
	// warmup trains the executor model of an _lm recipe only.
	var wo, we bytes.Buffer
	if code := runMain([]string{"ctxopt", "warmup", "ctxopt_bandit"}, &wo, &we); code != 1 || !strings.Contains(we.String(), "ctxopt_bandit.yaml: executor.lm: the recipe's engine \"sim\" has no executor model") {
		t.Errorf("warmup of a scripted-executor recipe: exit %d: %s", code, we.String())
	}
	// ...and puts it in the cache, where a second warmup finds it.
	t.Setenv("RLNODE_CACHE", t.TempDir())
	rf := smallLMRecipe(t, dir)
	var first, firstErr bytes.Buffer
	if code := runMain([]string{"ctxopt", "warmup", rf}, &first, &firstErr); code != 0 || !strings.Contains(firstErr.String(), "SFT phase 2/2 step 2/2") {
		t.Fatalf("warmup: exit %d: %s%s", code, first.String(), firstErr.String())
	}
	var again, againErr bytes.Buffer
	if code := runMain([]string{"ctxopt", "warmup", rf}, &again, &againErr); code != 0 || againErr.Len() != 0 ||
		strings.Fields(again.String())[2] != strings.Fields(first.String())[2] {
		t.Errorf("second warmup: exit %d: %s%s; want the cached model of %s without training", code, again.String(), againErr.String(), first.String())
	}
	// A policy of another formulation is refused.
	var o, e bytes.Buffer
	if code := runMain([]string{"ctxopt", "eval", "ctxopt_multistep", "--policy", filepath.Join(dir, "ctxopt_bandit", "policy.json")}, &o, &e); code != 1 || !strings.Contains(e.String(), "multistep") {
		t.Errorf("eval with another formulation's policy: exit %d: %s", code, e.String())
	}
}

// With --address the executions run on executor actors of the cluster's
// other nodes: here this test process's node, the CLI a child process. The
// trained policy is the one an in-process run makes.
func TestCtxoptTrainOnCluster(t *testing.T) {
	if _, err := verify.NewSandbox(verify.SandboxConfig{}); err != nil {
		t.Skipf("the recipes' python tool needs the sandbox: %v", err)
	}
	home := t.TempDir()
	keyFile := filepath.Join(home, "cluster.key")
	key, _, err := cluster.LoadOrCreateKey(keyFile, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := cluster.Start(ctx, cluster.Config{NodeID: "exec-host", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	dist, local := filepath.Join(home, "dist"), filepath.Join(home, "local")
	stdout, stderr, code := runRlnode(t, home, "ctxopt", "train", "ctxopt_multistep", "--iterations", "2", "--eval-per-type", "1",
		"--out", dist, "--address", n.GossipAddress(), "--key-file", keyFile, "--bind", "127.0.0.1:0")
	if code != 0 || !strings.Contains(stdout, "executions on 1 executor actors: nodes exec-host") {
		t.Fatalf("train on the cluster: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, stderr, code := runRlnode(t, home, "ctxopt", "train", "ctxopt_multistep", "--iterations", "2", "--eval-per-type", "1", "--out", local); code != 0 {
		t.Fatalf("train in process: exit %d\n%s", code, stderr)
	}
	a, errA := os.ReadFile(filepath.Join(dist, "policy.json"))
	b, errB := os.ReadFile(filepath.Join(local, "policy.json"))
	if errA != nil || errB != nil || !bytes.Equal(a, b) {
		t.Errorf("the policies trained on the cluster and in process differ (%v, %v)", errA, errB)
	}
}

// smallLMRecipe writes ctxopt_bandit_lm with an executor model small
// enough to train in seconds into dir, with the further replacements
// given (old, new), and returns its path.
func smallLMRecipe(t *testing.T, dir string, more ...[2]string) string {
	t.Helper()
	src, err := os.ReadFile("../../ctxopt/recipes/ctxopt_bandit_lm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	small := string(src)
	for _, kv := range append([][2]string{{"hidden: 128", "hidden: 32"}, {"intermediate: 384", "intermediate: 64"}, {"layers: 2", "layers: 1"},
		{"heads: 4", "heads: 2"}, {"kv_heads: 2", "kv_heads: 1"}, {"vocab: 1024", "vocab: 512"}, {"episodes: 6000", "episodes: 120"},
		{"steps: 3000", "steps: 3"}, {"decay_steps: 1000", "decay_steps: 1"}, {"answer_first: 200", "answer_first: 1"},
		{"steps: 1500", "steps: 2"}, {"decay_steps: 1000", "decay_steps: 1"}, {"batch: 32", "batch: 4"}}, more...) {
		if !strings.Contains(small, kv[0]) {
			t.Fatalf("%q not in ctxopt_bandit_lm.yaml", kv[0])
		}
		small = strings.Replace(small, kv[0], kv[1], 1)
	}
	rf := filepath.Join(dir, "small_lm.yaml")
	if err := os.WriteFile(rf, []byte(small), 0o644); err != nil {
		t.Fatal(err)
	}
	return rf
}

// TestCtxoptRunFolderInUseIsRefused: ctxopt train and benchmark hold
// rlnode run's lock on --out DIR, so a second one on the same folder is
// refused naming the holder (before, both wrote metrics.jsonl and
// policy.json there), and a train after the holder is done runs and
// leaves no lock behind.
func TestCtxoptRunFolderInUseIsRefused(t *testing.T) {
	recipe := banditWithoutPython(t)
	dir := filepath.Join(t.TempDir(), "run")
	unlock, err := lockRunDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(t.TempDir(), "policy.json")
	for _, args := range [][]string{
		{"train", recipe, "--iterations", "2", "--eval-per-type", "1", "--out", dir},
		{"benchmark", recipe, "--policy", policy, "--eval-per-type", "1", "--out", dir},
	} {
		var out, errb bytes.Buffer
		code := runMain(append([]string{"ctxopt"}, args...), &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), "is in use by another run (pid "+strconv.Itoa(os.Getpid())) {
			t.Errorf("rlnode ctxopt %s while the folder is locked: exit %d\n%s%s", args[0], code, out.String(), errb.String())
		}
	}
	unlock()
	var out, errb bytes.Buffer
	if code := runMain([]string{"ctxopt", "train", recipe, "--iterations", "2", "--eval-per-type", "1", "--out", dir}, &out, &errb); code != 0 {
		t.Fatalf("train after the lock was released: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "policy.json")); err != nil {
		t.Errorf("the train wrote no policy: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, runLockFile)); !os.IsNotExist(err) {
		t.Errorf("the finished train left %s (%v)", runLockFile, err)
	}
}

// TestCtxoptTrainMetricsWriteFailureFails: a train whose metrics.jsonl
// cannot be written (here a link to /dev/full: every write fails with
// ENOSPC) fails naming the file. Before, the write errors were dropped and
// the train exited 0 with an empty metrics.jsonl.
func TestCtxoptTrainMetricsWriteFailureFails(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	recipe := banditWithoutPython(t)
	dir := t.TempDir()
	metrics := filepath.Join(dir, "metrics.jsonl")
	if err := os.Symlink("/dev/full", metrics); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := runMain([]string{"ctxopt", "train", recipe, "--iterations", "2", "--eval-per-type", "1", "--out", dir}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "write "+metrics+": ") {
		t.Errorf("train with metrics.jsonl unwritable: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// TestCtxoptBenchmarkFullDisk: a benchmark whose files cannot be written
// whole (a file size limit in a child process, as on a full disk) fails
// naming the file and leaves the previous benchmark.json and pareto.png
// whole. They were written in place: cut files, a run's results lost.
func TestCtxoptBenchmarkFullDisk(t *testing.T) {
	recipe := banditWithoutPython(t)
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := runMain(append([]string{"ctxopt"}, args...), &out, &errb)
		return code, out.String() + errb.String()
	}
	benchmark := func(dir string) (int, string) {
		return run("benchmark", recipe, "--policy", filepath.Join(dir, "policy.json"), "--eval-per-type", "1", "--out", filepath.Join(dir, "bench"))
	}
	if dir, ok := fsizetest.Child(t); ok {
		if code, out := benchmark(dir); code != 1 || !strings.Contains(out, "write "+filepath.Join(dir, "bench")) || !strings.Contains(out, "file too large") {
			t.Fatalf("benchmark with files limited: exit %d, want 1 and an error naming the file:\n%s", code, out)
		}
		return
	}
	dir := t.TempDir()
	if code, out := run("train", recipe, "--iterations", "2", "--eval-per-type", "1", "--out", dir); code != 0 {
		t.Fatalf("train: exit %d\n%s", code, out)
	}
	if code, out := benchmark(dir); code != 0 {
		t.Fatalf("benchmark: exit %d\n%s", code, out)
	}
	files := []string{filepath.Join(dir, "bench", "benchmark.json"), filepath.Join(dir, "bench", "pareto.png")}
	old := make([][]byte, len(files))
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		old[i] = b
	}
	// Below both files' sizes, then between them: the first write to fail
	// is benchmark.json's, then the larger one's.
	small, large := min(len(old[0]), len(old[1])), max(len(old[0]), len(old[1]))
	for _, limit := range []int{small / 2, (small + large) / 2} {
		fsizetest.Run(t, dir, uint64(limit))
		for i, f := range files {
			if b, _ := os.ReadFile(f); !bytes.Equal(b, old[i]) {
				t.Fatalf("limit %d: %s holds %d bytes after the failed benchmark, want the previous %d", limit, f, len(b), len(old[i]))
			}
		}
	}
}

// --iterations and --eval-per-type hold the recipe's bounds: a value out
// of them is refused (0 and negatives were ignored, training the recipe's
// own count; a huge one ran unbounded), before anything starts.
func TestCtxoptOverridesBounded(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "ctxopt_bandit", "--out", dir, "--iterations", "-1"}, "--iterations -1: want 1..100000 (train.iterations)"},
		{[]string{"train", "ctxopt_bandit", "--out", dir, "--iterations", "0"}, "--iterations 0: want 1..100000 (train.iterations)"},
		{[]string{"train", "ctxopt_bandit", "--out", dir, "--iterations", "100001"}, "--iterations 100001: want 1..100000"},
		{[]string{"eval", "ctxopt_bandit", "--policy", filepath.Join(dir, "p.json"), "--eval-per-type", "0"}, "--eval-per-type 0: want 1..10000 (data.eval_per_type)"},
		{[]string{"benchmark", "ctxopt_bandit", "--policy", filepath.Join(dir, "p.json"), "--out", dir, "--eval-per-type", "99999999"}, "--eval-per-type 99999999: want 1..10000"},
	} {
		var out, errb bytes.Buffer
		if code := runMain(append([]string{"ctxopt"}, c.args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d: %s%s; want exit 2 and %q", c.args, code, out.String(), errb.String(), c.want)
		}
	}
}

// banditWithoutPython writes the ctxopt_bandit recipe without its python
// tool (no sandbox needed) and returns its path.
func banditWithoutPython(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "ctxopt", "recipes", "ctxopt_bandit.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	recipe := filepath.Join(t.TempDir(), "bandit.yaml")
	if err := os.WriteFile(recipe, []byte(strings.NewReplacer("python: true", "python: false", "tools: [calculator, python]", "tools: [calculator]").Replace(string(src))), 0o644); err != nil {
		t.Fatal(err)
	}
	return recipe
}
