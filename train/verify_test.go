package train

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/logbuf"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/verify"
)

func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skipf("code verifier needs /usr/bin/python3: %v", err)
	}
}

// The run's code verifier: a right program passes, a wrong one fails, and
// a hanging one is stopped by the sandbox's limits and scores 0 (the
// others of the batch are scored meanwhile).
func TestCodeVerifier(t *testing.T) {
	needPython(t)
	v, err := newVerifier(Config{Verifier: VerifierCode, VerifyWorkers: 3})
	if err != nil {
		t.Fatal(err)
	}
	checkCodeVerdicts(t, v)
}

// TestCodeSandboxSaid: the sandbox a run's code verifier and python tool
// picked (auto: bwrap or namespaces, whichever works here) is in the run's
// log, never left unsaid.
func TestCodeSandboxSaid(t *testing.T) {
	needPython(t)
	var logged bytes.Buffer
	cfg := Config{Verifier: VerifierCode, PythonTool: true, VerifyWorkers: 1, Logger: slog.New(slog.NewTextHandler(&logged, nil))}
	if _, err := newVerifier(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := newPython(cfg); err != nil {
		t.Fatal(err)
	}
	t.Logf("log:\n%s", logged.String())
	for _, use := range []string{"code verifier", "python tool"} {
		if !strings.Contains(logged.String(), `msg="code sandbox" for="`+use+`" mode=`) {
			t.Errorf("the log does not say which sandbox the %s uses", use)
		}
	}
	if strings.Count(logged.String(), ` memory="per `) != 2 {
		t.Errorf("the log does not say twice how a run's memory is bounded")
	}
}

// TestClusterVerifySandboxSaid: a node's verification tasks say, in the
// node's log, which sandbox and memory bound they use, once (when the
// sandbox is made), not only when it fails.
func TestClusterVerifySandboxSaid(t *testing.T) {
	needPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logged logbuf.Buffer
	node, err := cluster.Start(ctx, cluster.Config{Bind: "127.0.0.1:0", CPUs: 1, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	// A mode of its own: this process's sandbox for it is made by this test.
	v := &clusterVerifier{node: node, mode: verify.ModeRlimitOnly}
	ref := verify.Reference{Tests: []string{"assert f(2) == 4"}}
	for range 2 {
		if res := v.Verify(ctx, "def f(x):\n    return x * 2\n", ref); res.Reward != 1 {
			t.Fatalf("Verify = %+v, want reward 1", res)
		}
	}
	said := strings.Count(logged.String(), `for="cluster verification tasks" mode=rlimit-only-trusted-code`)
	if said != 1 || !strings.Contains(logged.String(), "memory=") {
		t.Errorf("the node's log says the tasks' sandbox %d times (want once, with its memory bound):\n%s", said, logged.String())
	}
}

// checkCodeVerdicts has v score a right program, a half-right one and two
// that hang.
func checkCodeVerdicts(t *testing.T, v verify.Verifier) {
	t.Helper()
	ref := verify.Reference{Tests: []string{"assert f(2) == 4", "assert f(0) == 0"}}
	jobs := []episode.Answer{
		{Text: "def f(x):\n    return x * 2\n", Ref: ref},
		{Text: "```python\ndef f(x):\n    return x + 2\n```", Ref: ref},
		{Text: "def f(x):\n    while True:\n        pass\n", Ref: ref},
		{Text: "while True:\n    pass\n", Ref: ref},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, notes, err := episode.ScoreAll(ctx, v, 3, episode.Limits{}, jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{1, 0.5, 0, 0} {
		if res[i] != want {
			t.Errorf("job %d: reward %v (%s), want %v", i, res[i], notes[i], want)
		}
	}
	if notes[3] == "" {
		t.Errorf("the hanging program has no error note")
	}
}

// A few steps of a code run: SFT on the reference programs, GRPO with the
// sandboxed verifier, evaluation on the held-out rows.
func TestCodeRun(t *testing.T) {
	needPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	c := codeRun(t, out)
	res, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 5 || res.EvalProblems != 2 {
		t.Errorf("result %+v: want 5 steps, 2 eval problems", res)
	}
	lines := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
	if len(lines) != 5 {
		t.Fatalf("%d metrics lines, want 5", len(lines))
	}
	for _, l := range lines[2:] {
		r, ok := l["reward_mean"].(float64)
		if !ok || r < 0 || r > 1 {
			t.Errorf("step %v: reward_mean %v", l["step"], l["reward_mean"])
		}
	}
	ev, err := EvaluateSingleCheckpoint(ctx, c, filepath.Join(out, "checkpoints", "step-5"))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Problems != 2 || ev.Accuracy != lines[4]["eval_accuracy"] {
		t.Errorf("checkpoint evaluation %+v, the run's last eval_accuracy %v on 2 problems", ev, lines[4]["eval_accuracy"])
	}
}

// codeRun is TestCodeRun's configuration: a few steps of a code run on
// six one-function problems.
func codeRun(t *testing.T, out string) Config {
	rows := []map[string]any{}
	for _, p := range []struct{ name, code, test string }{
		{"double", "def double(x):\n    return 2 * x", "assert double(3) == 6"},
		{"neg", "def neg(x):\n    return -x", "assert neg(3) == -3"},
		{"inc", "def inc(x):\n    return x + 1", "assert inc(3) == 4"},
		{"sq", "def sq(x):\n    return x * x", "assert sq(3) == 9"},
		{"first", "def first(xs):\n    return xs[0]", "assert first([3, 1]) == 3"},
		{"last", "def last(xs):\n    return xs[-1]", "assert last([3, 1]) == 1"},
	} {
		rows = append(rows, map[string]any{"text": "Write " + p.name + ".", "code": p.code, "test_list": []string{p.test}})
	}
	c := tinyRun(out)
	c.Dataset = &Dataset{Train: writeJSONL(t, rows), Mapping: data.Mapping{Prompt: "text", Answer: "code", Tests: "test_list"}}
	c.Verifier = VerifierCode
	c.AnswerTemplate = "{{.Answer}}"
	c.PromptTemplate = "{{.Question}}\n"
	m := *c.Model
	m.MaxPositions = 64
	c.Model = &m
	c.MaxTokens, c.Learner.MaxResponseLen = 32, 32
	c.WarmupBatch, c.EvalProblems = 4, 2
	return c
}

// Code verifications run as cluster tasks on another node when the
// driver's has no CPU free (verify_on: cluster), with the verdicts and
// the checkpoint of verifying in the driver's process (this run's
// rewards are all 0: the verdicts are checked on their own); a cluster
// with no CPU for them stops the run, naming why.
func TestCodeRunVerifiesOnTheCluster(t *testing.T) {
	needPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	local := t.TempDir()
	c := codeRun(t, local)
	if _, err := Run(ctx, c); err != nil {
		t.Fatal(err)
	}

	// The driver's node has the learner's one CPU and nothing else: every
	// verification runs on the child.
	node, err := cluster.Start(ctx, cluster.Config{Bind: "127.0.0.1:0", CPUs: 1, Resources: cluster.Resources{"lh": 1}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	nodetest.Start(t, node, nodetest.Options{CPUs: 2})
	before := clusterVerified.Load()
	remote := t.TempDir()
	c = codeRun(t, remote)
	c.Node, c.VerifyOn = node, VerifyOnCluster
	c.LearnerResources = cluster.Resources{cluster.CPU: 1, "lh": 1}
	if _, err := Run(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Verdicts from the child's sandbox are the driver's.
	checkCodeVerdicts(t, &clusterVerifier{node: node})
	// 3 RL steps of 4 prompts × 4 samples, and 2 evaluations of 2.
	if k := clusterVerified.Load() - before; k < 3*16 {
		t.Errorf("%d verifications ran as cluster tasks; want every one of the run's", k)
	}
	for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
		a, _ := os.ReadFile(filepath.Join(local, "checkpoints", "step-5", f))
		b, _ := os.ReadFile(filepath.Join(remote, "checkpoints", "step-5", f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("step-5/%s differs between verifying in the driver and on the cluster (%d and %d bytes)", f, len(a), len(b))
		}
	}

	// No node offers a whole CPU: the first RL step fails, naming why.
	bare, err := cluster.Start(ctx, cluster.Config{Bind: "127.0.0.1:0", CPUs: 0.5, Resources: cluster.Resources{"lh": 1}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bare.Stop)
	c = codeRun(t, t.TempDir())
	c.Node, c.VerifyOn = bare, VerifyOnCluster
	c.LearnerResources = cluster.Resources{"lh": 1}
	_, err = Run(ctx, c)
	if err == nil || !strings.Contains(err.Error(), "code verification on the cluster") || !strings.Contains(err.Error(), "no node can host {CPU:1}") {
		t.Errorf("verifying on a cluster without a free CPU: %v; want the run stopped naming it", err)
	}
}
