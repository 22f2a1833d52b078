package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const savedRecipe = `# resolved recipe: builtin:quickstart
name: quickstart
description: a
seed: 1
algorithm: {name: grpo, lr: 1.0e-4}
schedule: {steps: 10, eval_every: 5}
`

func TestCheckRunDir(t *testing.T) {
	cases := []struct {
		name              string
		files             []string // what the folder holds
		recipe            string   // the new run's resolved recipe
		resume, overwrite bool
		want              string // an error containing it; "" is none
		left              []string
	}{
		{name: "empty folder", recipe: savedRecipe},
		{name: "unrelated files", files: []string{"notes.txt"}, recipe: savedRecipe, left: []string{"notes.txt"}},
		{name: "another run", files: []string{"recipe.yaml", "metrics.jsonl", "checkpoints/step-5/x"}, recipe: savedRecipe,
			want: "holds another run (recipe.yaml, metrics.jsonl, checkpoints): continue it with --resume, replace it with --overwrite"},
		// One that stopped before its first checkpoint (a placement no node
		// could take): --resume would fail with "no complete, intact
		// checkpoint", so it is not offered.
		{name: "another run without checkpoints", files: []string{"recipe.yaml", "metrics.jsonl", "traces/x"}, recipe: savedRecipe,
			want: "holds another run (recipe.yaml, metrics.jsonl, traces) that wrote no checkpoint, so --resume cannot continue it: replace it with --overwrite"},
		{name: "checkpoints only", files: []string{"checkpoints/step-5/x"}, recipe: savedRecipe, want: "holds another run (checkpoints)"},
		{name: "resume, same recipe", files: []string{"recipe.yaml", "checkpoints/step-5/x"}, recipe: savedRecipe, resume: true},
		{name: "resume, longer schedule", files: []string{"recipe.yaml"}, resume: true,
			recipe: strings.Replace(savedRecipe, "steps: 10", "steps: 20", 1)},
		{name: "resume, another recipe", files: []string{"recipe.yaml"}, resume: true,
			recipe: strings.Replace(strings.Replace(savedRecipe, "lr: 1.0e-4", "lr: 1.0e-3", 1), "seed: 1", "seed: 2", 1),
			want:   "differs from the run in DIR at algorithm.lr, seed (a resume may change only description, schedule"},
		{name: "overwrite", files: []string{"recipe.yaml", "metrics.jsonl", "curves.png", "checkpoints/step-5/x", "notes.txt"},
			recipe: savedRecipe, overwrite: true, left: []string{"notes.txt"}},
		{name: "both", files: []string{"recipe.yaml"}, recipe: savedRecipe, resume: true, overwrite: true, want: "--resume and --overwrite: pick one"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range c.files {
				p := filepath.Join(dir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				body := "x"
				if f == "recipe.yaml" {
					body = savedRecipe
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := checkRunDir(dir, []byte(c.recipe), c.resume, c.overwrite)
			want := strings.ReplaceAll(c.want, "DIR", dir)
			if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), want) {
				t.Fatalf("checkRunDir: %v, want an error containing %q", err, want)
			}
			if c.left != nil {
				entries, _ := os.ReadDir(dir)
				var got []string
				for _, e := range entries {
					got = append(got, e.Name())
				}
				if strings.Join(got, " ") != strings.Join(c.left, " ") {
					t.Errorf("folder holds %v after, want %v", got, c.left)
				}
			}
		})
	}
}

// A second run into the folder of the first is refused and leaves the
// first run's files as they were; --overwrite replaces them.
func TestRunRefusesAnotherRunsFolder(t *testing.T) {
	home, dir := t.TempDir(), filepath.Join(t.TempDir(), "run")
	if stdout, stderr, code := runRlnode(t, home, append([]string{"run", "quickstart", "--out", dir}, tinyRun...)...); code != 0 {
		t.Fatalf("first run: exit %d\n%s%s", code, stdout, stderr)
	}
	metrics, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	second := append([]string{"run", "quickstart", "--out", dir, "--set", "seed=7"}, tinyRun...)
	_, stderr, code := runRlnode(t, home, second...)
	if code != 2 || !strings.Contains(stderr, "holds another run") {
		t.Fatalf("second run into the same folder: exit %d, want 2 and a refusal:\n%s", code, stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl")); string(after) != string(metrics) {
		t.Errorf("the refused run changed metrics.jsonl")
	}
	_, stderr, code = runRlnode(t, home, append(second, "--resume")...)
	if code != 2 || !strings.Contains(stderr, ", seed (a resume may change only") {
		t.Errorf("--resume with another seed: exit %d, want 2 naming seed:\n%s", code, stderr)
	}
	// The same recipe ending before its newest checkpoint's step.
	short := append([]string{"run", "quickstart", "--out", dir, "--resume"}, append(tinyRun, "--set", "schedule.steps=1")...)
	_, stderr, code = runRlnode(t, home, short...)
	if code != 2 || !strings.Contains(stderr, "is step 7, past the recipe's last step 5 (4 warm-up + 1 RL)") {
		t.Errorf("--resume past the recipe's steps: exit %d, want 2:\n%s", code, stderr)
	}
	stdout, stderr, code := runRlnode(t, home, append(second, "--overwrite")...)
	if code != 0 {
		t.Fatalf("--overwrite: exit %d\n%s%s", code, stdout, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "recipe.yaml")); !strings.Contains(string(b), "seed: 7") {
		t.Errorf("--overwrite did not replace recipe.yaml:\n%s", b)
	}
}

// A run that fails before its first step says it drew no curves.
func TestRunFailedBeforeAStepSaysNoCurves(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	stdout, stderr, code := runRlnode(t, t.TempDir(), "run", "quickstart", "--out", dir, "--set", "sft.steps=2", "--set", "schedule.steps=2",
		"--set", "deterministic=false", "--set", "engines.policy.kind=vllm", "--set", "engines.policy.vllm={servers: [http://127.0.0.1:1], model: m}")
	if code != 1 || !strings.Contains(stdout, "curves: none (no step finished)") {
		t.Errorf("run against an unreachable vLLM server: exit %d, want 1 and no curves said:\n%s%s", code, stdout, stderr)
	}
}

// TestRunDefaultOutIsItsOwn: without --out a run takes ./runs/NAME-DATE,
// or NAME-DATE-2, -3... when that folder exists: two runs started in the
// same second (a loop starting one per seed) each get a folder. Before,
// the second was refused ("--out runs/quickstart-... is in use by another
// run", an --out it was never given), or with the first one finished,
// "holds another run". Here every name of the next two minutes holds
// another run already.
func TestRunDefaultOutIsItsOwn(t *testing.T) {
	home, cwd := t.TempDir(), t.TempDir()
	now := time.Now()
	for s := range 120 {
		taken := filepath.Join(cwd, "runs", "quickstart-"+now.Add(time.Duration(s)*time.Second).Format("20060102-150405"))
		if err := os.MkdirAll(taken, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(taken, "recipe.yaml"), []byte("name: other\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := rlnodeCmd(t, home, "run", "quickstart", "--set", "sft.steps=1", "--set", "schedule.steps=1",
		"--set", "eval.held_out=8", "--traces", "off")
	cmd.Dir = cwd
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rlnode run without --out beside runs of the same names: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`writing to (runs/quickstart-\d{8}-\d{6}-2)\n`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("the run did not write to NAME-DATE-2:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(cwd, string(m[1]), "metrics.jsonl")); err != nil {
		t.Errorf("the run's own folder: %v", err)
	}
}

// TestReserveRunDir: each reservation of one name gets a folder of its
// own, made by it.
func TestReserveRunDir(t *testing.T) {
	base := filepath.Join(t.TempDir(), "runs", "q-20260101-000000")
	var got []string
	for range 3 {
		dir, err := reserveRunDir(base)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, dir)
	}
	if want := []string{base, base + "-2", base + "-3"}; !slices.Equal(got, want) {
		t.Fatalf("reserved %v, want %v", got, want)
	}
}
