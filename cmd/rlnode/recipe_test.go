package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/train"
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
	if code != 0 || !strings.Contains(out, "quickstart: ok (quickstart, grpo, single episodes, 300 SFT warm-up steps, then 100 RL steps)") {
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

// What rlnode run refuses, rlnode recipe validate, sbatch and eval refuse
// too, before doing anything, with the same FILE:LINE messages
// (train.Check).
func TestValidateRefusesWhatRunRefuses(t *testing.T) {
	home := t.TempDir()
	t.Setenv("RLNODE_HOME", home)
	vllm2 := filepath.Join(t.TempDir(), "vllm2.yaml")
	src := "name: vllm2\nmodels: {policy: {init: {}}}\ndata: {task: {}}\nengines:\n  policy:\n    kind: vllm\n    replicas: 2\n" +
		"    vllm: {servers: [\"http://127.0.0.1:8000\"], model: m}\n"
	if err := os.WriteFile(vllm2, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// A dataset cut inside its second row: validate used to say ok, and
	// only the run found it.
	cut := filepath.Join(t.TempDir(), "cut.jsonl")
	if err := os.WriteFile(cut, []byte(`{"prompt": "1+1", "answer": "2"}`+"\n"+`{"prompt": `), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		recipe string
		sets   []string
		want   string
	}{
		{"quickstart", []string{"algorithm.kl_coef=0.05", "models.reference.init={}"}, "--set models.reference.init={}: models.reference.init: a randomly initialized reference model is not supported"},
		{vllm2, nil, vllm2 + ":7: engines.policy.replicas: 2 is not supported with kind vllm"},
		{"mlmt_math", []string{"engines.feedback.max_batch=8"}, "--set engines.feedback.max_batch=8: engines.feedback.max_batch: 8 differs"},
		{"quickstart", []string{"data.task=null", "data.dataset.train=" + cut}, "--set data.dataset.train=" + cut + ": data.dataset: dataset train: load " + cut + ": row 1 (line 2)"},
	} {
		l, err := recipes.Load(c.recipe, c.sets)
		if err != nil {
			t.Fatal(err)
		}
		checkErr := train.Check(l)
		if checkErr == nil || !strings.HasPrefix(checkErr.Error(), c.want) {
			t.Fatalf("%s %v: train.Check: %v, want %q", c.recipe, c.sets, checkErr, c.want)
		}
		var sets []string
		for _, s := range c.sets {
			sets = append(sets, "--set", s)
		}
		dir := filepath.Join(t.TempDir(), "run")
		for _, args := range [][]string{
			{"recipe", "validate", c.recipe},
			{"sbatch", c.recipe, "--nodes", "1", "--gpus-per-node", "0"},
			{"run", c.recipe, "--out", dir},
			{"eval", "--recipe", c.recipe, "--model", dir},
		} {
			out, errOut, code := runRlnode(t, home, append(args, sets...)...)
			if code != 1 || !strings.Contains(errOut, checkErr.Error()+"\n") || out != "" {
				t.Errorf("rlnode %v: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%v", args, code, out, errOut, checkErr)
			}
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: the run directory exists after a refused recipe (%v)", c.recipe, err)
		}
	}
}

// A recipe's templates are checked, never run unbounded: the template
// that once ran for 31 s and ran out of memory is refused at once
// (runRlnode's 60 s limit guards against a hang).
func TestRecipeValidateRefusesHostileTemplate(t *testing.T) {
	home := t.TempDir()
	_, errOut, code := runRlnode(t, home, "recipe", "validate", "quickstart", "--set", "sft.response='{{range 1000000000}}x{{end}}{{.Answer}}'")
	if code != 1 || !strings.Contains(errOut, "sft.response: uses {{range}}: not supported") {
		t.Fatalf("validate with a looping template: exit %d\n%s", code, errOut)
	}
}
