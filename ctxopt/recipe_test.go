package ctxopt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestBuiltinRecipesLoad(t *testing.T) {
	names := Builtins()
	if len(names) != 6 {
		t.Fatalf("built-in recipes %v, want the three formulations, scripted and with the trained executor model", names)
	}
	for _, n := range names {
		r, err := LoadRecipe(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if r.Name != n {
			t.Errorf("%s: name %q", n, r.Name)
		}
		m, err := r.Method(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if len(m.Learners()) == 0 {
			t.Errorf("%s: no learners", n)
		}
	}
	if _, err := LoadRecipe("nope"); err == nil || !strings.Contains(err.Error(), "ctxopt_bandit") {
		t.Errorf("unknown recipe: %v, want an error listing the built-in ones", err)
	}
}

// Bad configuration spaces are refused with FILE:LINE and the field.
func TestRecipeValidation(t *testing.T) {
	base, err := builtin.ReadFile("recipes/ctxopt_bandit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lineOf := func(src, needle string) string {
		i := strings.Index(src, needle)
		if i < 0 {
			t.Fatalf("%q not in the recipe", needle)
		}
		return strconv.Itoa(strings.Count(src[:i], "\n") + 1)
	}
	cases := []struct {
		name, old, new, needle, want string
	}{
		{"empty atom library", "  atoms:\n    - Think step by step.\n    - Be concise.\n    - Double-check every calculation.\n    - Use a tool for every calculation.\n    - \"End with the line #### <answer>.\"\n    - Restate the question in your own words first.\n  max_atoms: 3",
			"  atoms: []\n  max_atoms: 1", "  atoms: []", "space.atoms: the prompt-atom library is empty"},
		{"budget over the context", "budgets: [64, 256, 512]", "budgets: [64, 256, 4096]", "budgets:", "space.budgets.2: budget 4096 tokens"},
		{"unknown tool", "tools: [calculator, python]", "tools: [calculator, shell]", "tools:", `space.tools.1: unknown tool "shell"`},
		{"search without endpoint", "tools: [calculator, python]", "tools: [calculator, search]", "tools:", "space.tools.1: the search tool needs executor.search_url"},
		{"unknown field", "embed_dim: 64", "embed_dim: 64\nembed_dims: 3", "embed_dims", `embed_dims: unknown key`},
		{"bad formulation", "formulation: bandit", "formulation: tabular", "formulation:", `formulation: "tabular"`},
		{"bad ppo", "  epochs: 4", "  epochs: 0", "ppo:", "ppo: epochs 0 not in 1..64"},
		{"budget twice", "budgets: [64, 256, 512]", "budgets: [64, 256, 64]", "budgets:", "space.budgets.2: budget 64 listed twice"},
		{"too many budgets", "budgets: [64, 256, 512]", "budgets: [" + strings.Repeat("1, ", 16) + "512]", "budgets:", "space.budgets: 17 budgets, at most 16"},
		{"level twice", "levels: [", "levels: [2, 2, ", "levels:", "data.levels.1: level 2 listed twice"},
		{"kind twice", "kinds: [", "kinds: [word, word, ", "kinds:", `data.kinds.1: task kind "word" listed twice`},
		{"too many atoms", "  atoms:\n    - Think step by step.", "  atoms:\n" + strings.Repeat("    - a\n", 251) + "    - Think step by step.", "  atoms:", "space.atoms: 257 atoms, at most 256"},
		{"too many hidden layers", "  hidden: [64, 64]", "  hidden: [" + strings.Repeat("8, ", 8) + "8]", "ppo:", "ppo: 9 hidden layers, at most 8"},
		{"hidden layers too large", "  hidden: [64, 64]", "  hidden: [4096, 4096, 4096]", "ppo:", "ppo: hidden layers [4096 4096 4096] hold 33554432 weights"},
		{"loss timeout not a duration", "  engine: sim", "  engine: sim\n  loss_timeout: soon", "loss_timeout", `executor.loss_timeout: "soon": want a duration`},
		{"loss timeout too short", "  engine: sim", "  engine: sim\n  loss_timeout: 100ms", "loss_timeout", `executor.loss_timeout: 100ms not in 1s..1h`},
	}
	for _, c := range cases {
		src := strings.Replace(string(base), c.old, c.new, 1)
		if src == string(base) {
			t.Fatalf("%s: the edit did not apply", c.name)
		}
		path := filepath.Join(t.TempDir(), "r.yaml")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadRecipe(path)
		want := filepath.Clean(path) + ":" + lineOf(src, c.needle) + ": "
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q…%q", c.name, err, want, c.want)
		}
	}
	// The openai engine's context is the recipe's to state.
	src := strings.Replace(string(base), "  engine: sim", "  engine: openai\n  url: http://127.0.0.1:1\n  model: m\n  context: 600", 1)
	src = strings.Replace(src, "  python: true", "  python: false", 1)
	src = strings.Replace(src, "tools: [calculator, python]", "tools: [calculator]", 1)
	if _, err := ParseRecipe("r.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "space.budgets.2: budget 512 tokens leaves under half of the model's 600-token context") {
		t.Errorf("budget over an openai model's context: %v", err)
	}
	// The native engine: its model section, checked, and its context.
	lmBase, err := builtin.ReadFile("recipes/ctxopt_bandit_lm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, old, new, want string }{
		{"no model section", "  lm:", "  lx:", "executor.lx: unknown key"},
		{"heads not dividing", "    heads: 4", "    heads: 5", "executor.lm: hidden 128 is not divisible by heads 5"},
		{"budget over the model's context", "    context: 1024", "    context: 600", "space.budgets.2: budget 512 tokens leaves under half of the model's 600-token context"},
		{"a model section with the scripted engine", "  engine: native", "  engine: sim", "executor.lm: only the native engine trains an executor model"},
		{"unknown features", "embed_dim: 64", "embed_dim: 64\nembed: bert", `embed: "bert": want ngram or lm`},
	} {
		src := strings.Replace(string(lmBase), c.old, c.new, 1)
		if src == string(lmBase) {
			t.Fatalf("%s: the edit did not apply", c.name)
		}
		if _, err := ParseRecipe("r.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "r.yaml:") {
			t.Errorf("%s: %v, want r.yaml:LINE: …%s", c.name, err, c.want)
		}
	}
	src = strings.Replace(string(base), "embed_dim: 64", "embed_dim: 64\nembed: lm", 1)
	if _, err := ParseRecipe("r.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), "embed: lm features need the executor model of engine native") {
		t.Errorf("lm features with the scripted model: %v", err)
	}
	if _, err := ParseRecipe("r.yaml", []byte("name: [")); err == nil || !strings.HasPrefix(err.Error(), "r.yaml:1: ") {
		t.Errorf("broken YAML: %v", err)
	}
}

// TestLoadersBoundWhatTheyRead: a recipe or policy path that is not a
// regular file (here a pipe giving more than the bound) is refused once
// the bound is passed, naming the file; a directory is refused as one.
// Before, the bound was checked on the file's size only (0 for a pipe or a
// device) and the whole stream was read into memory.
func TestLoadersBoundWhatTheyRead(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit int
		load  func(path string) error
	}{
		{"recipe", maxRecipeBytes, func(path string) error { _, err := LoadRecipe(path); return err }},
		{"policy", maxPolicyBytes, func(path string) error {
			r, err := LoadRecipe("ctxopt_bandit")
			if err != nil {
				return err
			}
			m, err := r.Method(context.Background())
			if err != nil {
				return err
			}
			return LoadPolicy(path, m)
		}},
	} {
		fifo := filepath.Join(t.TempDir(), c.name+".fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			defer f.Close()
			chunk := []byte(strings.Repeat("#\n", 32<<10))
			for n := 0; n <= c.limit; n += len(chunk) {
				if _, err := f.Write(chunk); err != nil {
					return // the reader stopped at the bound
				}
			}
		}()
		err := c.load(fifo)
		<-wrote
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s %s: more than %d bytes", c.name, fifo, c.limit)) {
			t.Errorf("%s from a pipe over the bound: %v", c.name, err)
		}
		if err := c.load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "a directory, not a file") {
			t.Errorf("%s from a directory: %v", c.name, err)
		}
	}
}

// A recipe with several problems gets them all at once, each as
// FILE:LINE: field: message: an unknown key or a wrong type named by its
// dotted path (not yaml's dump of a Go struct) beside the checks' own
// findings; NaN and infinite numbers are refused where a finite one is
// bounded; an empty file says it is empty.
func TestRecipeValidationReportsEveryProblem(t *testing.T) {
	base, err := builtin.ReadFile("recipes/ctxopt_bandit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	edit := func(src string, pairs ...string) string {
		t.Helper()
		for i := 0; i+1 < len(pairs); i += 2 {
			out := strings.Replace(src, pairs[i], pairs[i+1], 1)
			if out == src {
				t.Fatalf("the edit %q did not apply", pairs[i])
			}
			src = out
		}
		return src
	}
	lineOf := func(src, needle string) string {
		i := strings.Index(src, needle)
		if i < 0 {
			t.Fatalf("%q not in the recipe", needle)
		}
		return strconv.Itoa(strings.Count(src[:i], "\n") + 1)
	}
	src := edit(string(base),
		"  workers: 4", "  workers: 4\n  bogus: 1\n  loss_timeout: soon",
		"budgets: [64, 256, 512]", "budgets: [64, 64, 5000]",
		"  iterations: 400", "  iterations: many")
	_, err = ParseRecipe("r.yaml", []byte(src))
	for _, want := range []string{
		"r.yaml:" + lineOf(src, "bogus") + ": executor.bogus: unknown key",
		"r.yaml:" + lineOf(src, "loss_timeout") + `: executor.loss_timeout: "soon": want a duration`,
		"r.yaml:" + lineOf(src, "budgets:") + ": space.budgets.1: budget 64 listed twice",
		"r.yaml:" + lineOf(src, "budgets:") + ": space.budgets.2: budget 5000 tokens",
		"r.yaml:" + lineOf(src, "iterations: many") + ": train.iterations: ",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to hold %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "type struct") {
		t.Errorf("error %v shows a Go type", err)
	}
	if err != nil && strings.Contains(err.Error(), "train.iterations: 0 not in") {
		t.Errorf("error %v also reports the zero a wrong type left", err)
	}

	for _, c := range []struct{ name, old, new, want string }{
		{"NaN correct reward", "correct: 5", "correct: .nan", "reward.correct: NaN must be a positive number"},
		{"infinite correct reward", "correct: 5", "correct: .inf", "reward.correct: +Inf must be a positive number"},
		{"NaN temperature", "  workers: 4", "  workers: 4\n  temperature: .nan", "executor.temperature: NaN not in [0, 2]"},
		{"infinite gradient clip", "max_grad_norm: 0.5", "max_grad_norm: .inf", "ppo: gradient clip +Inf must be a positive number"},
		{"infinite value coefficient", "value_coef: 0.5", "value_coef: .inf", "ppo: value coefficient +Inf must be a finite non-negative number"},
		{"hidden layers without end", "hidden: [64, 64]", "hidden: [64, 64, 64, 64, 64, 64, 64, 64, 64]", "ppo: 9 hidden layers, at most 8"},
	} {
		src := edit(string(base), c.old, c.new)
		if _, err := ParseRecipe("r.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want …%s", c.name, err, c.want)
		}
	}
	for _, empty := range []string{"", "# only a comment\n"} {
		if _, err := ParseRecipe("r.yaml", []byte(empty)); err == nil || err.Error() != "r.yaml: empty recipe" {
			t.Errorf("empty file %q: %v, want r.yaml: empty recipe", empty, err)
		}
	}
}

// The openai engine's settings are checked where validate can name them:
// a URL vllm.New would refuse at train time (with /v1, not http(s), no
// host), a missing model, and a search endpoint that is not a URL.
func TestRecipeValidationOpenAIEngine(t *testing.T) {
	base, err := builtin.ReadFile("recipes/ctxopt_bandit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	engine := func(lines string) string {
		src := strings.Replace(string(base), "  engine: sim", "  engine: openai\n"+lines+"\n  context: 2048", 1)
		if src == string(base) {
			t.Fatal("the edit did not apply")
		}
		return src
	}
	for _, c := range []struct{ name, lines, want string }{
		{"/v1 in the URL", "  url: http://127.0.0.1:8000/v1\n  model: m", `executor.url: "http://127.0.0.1:8000/v1": give the server's base URL, without /v1`},
		{"not http", "  url: ftp://h:1\n  model: m", `executor.url: "ftp://h:1": want http(s)://host:port`},
		{"no host", "  url: http://\n  model: m", `executor.url: "http://": want http(s)://host:port`},
		{"no model", "  url: http://127.0.0.1:8000", "executor.model: the openai engine needs the served model's name"},
		{"search endpoint", "  url: http://127.0.0.1:8000\n  model: m\n  search_url: not a url", `executor.search_url: "not a url": want http(s)://host[:port][/path]`},
	} {
		_, err := ParseRecipe("r.yaml", []byte(engine(c.lines)))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "r.yaml:") {
			t.Errorf("%s: %v, want r.yaml:LINE: …%s", c.name, err, c.want)
		}
	}
	if _, err := ParseRecipe("r.yaml", []byte(engine("  url: http://127.0.0.1:8000/\n  model: m"))); err != nil {
		t.Errorf("a base URL with a slash: %v", err)
	}
}
