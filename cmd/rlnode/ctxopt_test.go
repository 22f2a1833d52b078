package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	for _, want := range []string{"best fixed per type", "ctxopt_hierarchical is", "Pareto front", "pareto.png"} {
		if !strings.Contains(out, want) {
			t.Errorf("benchmark output lacks %q:\n%s", want, out)
		}
	}
	var res struct {
		Fixed []json.RawMessage `json:"fixed"`
		Also  []json.RawMessage `json:"also"`
	}
	b, err := os.ReadFile(filepath.Join(bench, "benchmark.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil || len(res.Fixed) != 36 || len(res.Also) != 1 {
		t.Fatalf("benchmark.json: %d fixed, %d also, %v; want 36 and 1", len(res.Fixed), len(res.Also), err)
	}
	if st, err := os.Stat(filepath.Join(bench, "pareto.png")); err != nil || st.Size() == 0 {
		t.Fatalf("pareto.png: %v", err)
	}
	// A policy of another formulation is refused.
	var o, e bytes.Buffer
	if code := runMain([]string{"ctxopt", "eval", "ctxopt_multistep", "--policy", filepath.Join(dir, "ctxopt_bandit", "policy.json")}, &o, &e); code != 1 || !strings.Contains(e.String(), "multistep") {
		t.Errorf("eval with another formulation's policy: exit %d: %s", code, e.String())
	}
}
