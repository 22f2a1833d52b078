package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/recipes"
)

func TestRecipeCommand(t *testing.T) {
	home := t.TempDir()
	out, errOut, code := runRlnode(t, home, "recipe", "list")
	if code != 0 {
		t.Fatalf("recipe list: exit %d: %s", code, errOut)
	}
	for _, name := range recipes.BuiltinNames() {
		if !strings.Contains(out, name) {
			t.Errorf("recipe list lacks %s:\n%s", name, out)
		}
	}

	out, errOut, code = runRlnode(t, home, "recipe", "validate", "quickstart", "--set", "algorithm.lr=1e-4", "--set", "schedule.steps=100")
	if code != 0 || !strings.Contains(out, "quickstart: ok (quickstart, grpo, single episodes, 100 steps)") {
		t.Errorf("validate quickstart: exit %d\n%s%s", code, out, errOut)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	src := "name: bad\nmodels:\n  policy: {init: {}}\ndata: {task: {}}\nalgorithm:\n  lr: -1\n  clip_low: 2\n"
	if err := os.WriteFile(bad, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runRlnode(t, home, "recipe", "validate", bad, "--set", "sync.max_staleness=-1")
	if code != 1 {
		t.Errorf("validate bad: exit %d, want 1", code)
	}
	for _, want := range []string{
		bad + ":6: algorithm.lr: -1: want a positive learning rate",
		bad + ":7: algorithm.clip_low: 2: want a value in [0, 1)",
		"--set sync.max_staleness=-1: sync.max_staleness: -1: must not be negative",
		"3 error(s)",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}

	out, _, code = runRlnode(t, home, "recipe", "show", "mlmt_math_static")
	if code != 0 || !strings.HasPrefix(out, "# mlmt_math_static is the recipe below with: --set 'name=mlmt_math_static'") || !strings.Contains(out, "name: mlmt_math\n") {
		t.Errorf("show variant: exit %d\n%s", code, out)
	}
	out, _, code = runRlnode(t, home, "recipe", "show", "--resolved", "score_math")
	if code != 0 || !strings.Contains(out, "aggregation: token-mean") || !strings.Contains(out, "# resolved recipe: builtin:score_math") {
		t.Errorf("show --resolved: exit %d\n%s", code, out)
	}
	// What show --resolved prints validates as a file.
	res := filepath.Join(t.TempDir(), "resolved.yaml")
	if err := os.WriteFile(res, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runRlnode(t, home, "recipe", "validate", res); code != 0 {
		t.Errorf("resolved recipe does not validate: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runRlnode(t, home, "recipe", "show", "nonesuch"); code != 1 || !strings.Contains(errOut, "no built-in recipe by that name") {
		t.Errorf("show nonesuch: exit %d: %s", code, errOut)
	}
}
