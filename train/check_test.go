package train

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/recipes"
)

// Every refusal of the training loop, triggered by one recipe each: Check
// (what rlnode recipe validate and sbatch call) and FromRecipe (what
// rlnode run calls) give the same errors, each FILE:LINE: field.path:
// message. TestRefusalSitesCovered checks that the table reaches every
// refusal in recipe.go.
var refusalCases = []struct {
	recipe string
	sets   []string
	want   string // one line of the error
}{
	{"quickstart", []string{"models.policy.lora={rank: 4}", "engines.policy.weight_sync=full"},
		"--set engines.policy.weight_sync=full: engines.policy.weight_sync: full with models.policy.lora is not supported: the driver pushes the adapters (lora)"},
	{"mlmt_math", sets(vllmFeedback, "deterministic=false"), "--set engines.feedback.kind=vllm: engines.feedback.kind: vllm needs engines.policy.kind vllm too"},
	{"mlmt_math", []string{"models.feedback.lora={rank: 4}", "engines.feedback.weight_sync=full"},
		"--set engines.feedback.weight_sync=full: engines.feedback.weight_sync: full with a LoRA feedback policy is not supported"},
	{"mlmt_math", []string{"engines.feedback.max_batch=8"}, "--set engines.feedback.max_batch=8: engines.feedback.max_batch: 8 differs from engines.policy.max_batch"},
	{"mlmt_math", []string{"engines.feedback.device=cuda"}, `--set engines.feedback.device=cuda: engines.feedback.device: "cuda" differs from engines.policy.device "cpu"`},
	{"mlmt_math", []string{"models.feedback.value_head=true"}, `--set models.feedback.value_head=true: models.feedback.value_head: only algorithm ppo uses a value head (the feedback policy's algorithm.mlmt.feedback_algorithm is "grpo")`},
	{"mlmt_math", []string{"algorithm.name=ppo", "models.policy.value_head=true"}, "builtin:mlmt_math.yaml:31: models.feedback.value_head: false: the feedback policy trains with ppo"},
	{"mlmt_math", []string{"models.feedback=null", "algorithm.mlmt.feedback_algorithm=ppo"}, "--set models.feedback=null: models.feedback: absent: the feedback policy trains with ppo"},
	{"mlmt_math", []string{"algorithm.mlmt.train=[feedback]", "algorithm.mlmt.stop_gradient=true"},
		"--set algorithm.mlmt.stop_gradient=true: algorithm.mlmt.stop_gradient: true, but algorithm.mlmt.train has no solver"},
	{"quickstart", []string{"algorithm.kl_coef=0.05", "models.reference.init={}"}, "--set models.reference.init={}: models.reference.init: a randomly initialized reference model is not supported"},
	{"quickstart", []string{"algorithm.name=ppo", "models.policy.value_head=true", "algorithm.value_coef=0"}, "--set algorithm.value_coef=0: algorithm.value_coef: 0: ppo's critic would never train (want > 0)"},
	{"mlmt_math", []string{`sft.feedback_response=""`}, `--set sft.feedback_response="": sft.feedback_response: empty: the warm-up (sft.steps 300) needs the feedback policy's target`},
	{"mlmt_math", []string{`sft.feedback_response=" "`}, `--set sft.feedback_response=" ": sft.feedback_response: empty: the warm-up (sft.steps 300) needs the feedback policy's target`},

	// vLLM engines.
	{"quickstart", sets(vllmPolicy, "models.policy.lora={rank: 4}", "engines.policy.weight_sync=reload"),
		"--set engines.policy.weight_sync=reload: engines.policy.weight_sync: reload with models.policy.lora is not supported with kind vllm"},
	{"mlmt_math", sets(vllmBoth, "sync.mode=async"), "--set sync.mode=async: sync.mode: async on vllm engines is for single-turn episodes (episode.type is mlmt)"},
	{"quickstart", sets(vllmPolicy, "engines.policy.vllm.api_key_env=RLNODE_TEST_UNSET_KEY"),
		"--set engines.policy.vllm.api_key_env=RLNODE_TEST_UNSET_KEY: engines.policy.vllm.api_key_env: $RLNODE_TEST_UNSET_KEY is unset or empty"},
	{"quickstart", sets(vllmPolicy, "engines.policy.replicas=2"), "--set engines.policy.replicas=2: engines.policy.replicas: 2 is not supported with kind vllm: the servers are the replicas"},
	{"quickstart", sets(vllmPolicy, "placement.mode=split"), "builtin:quickstart.yaml:62: placement: rollout actors (placement.mode split or placement.rollout resources) are not supported with vllm engines"},
	{"mlmt_math", vllmPolicy, "builtin:mlmt_math.yaml:34: engines.feedback: with engines.policy.kind vllm the trainable feedback policy needs vLLM servers of its own"},
	{"mlmt_math", sets(vllmBoth, "models.feedback.lora={rank: 4}"), "builtin:mlmt_math.yaml:34: engines.feedback.weight_sync: lora is not supported with kind vllm (full or reload)"},
	{"mlmt_math", sets(vllmBoth, "engines.feedback.vllm.api_key_env=RLNODE_TEST_UNSET_KEY"),
		"--set engines.feedback.vllm.api_key_env=RLNODE_TEST_UNSET_KEY: engines.feedback.vllm.api_key_env: $RLNODE_TEST_UNSET_KEY is unset or empty"},
	{"mlmt_math", sets(vllmBoth, "models.feedback.lora={rank: 4}", "engines.feedback.weight_sync=full"),
		"--set models.feedback.lora={rank: 4}: models.feedback.lora: a LoRA feedback policy on vllm engines is not supported yet"},
	{"mlmt_math", sets(vllmBoth, "engines.feedback.replicas=2"), "--set engines.feedback.replicas=2: engines.feedback.replicas: 2 is not supported with kind vllm"},
	{"mlmt_math", sets(vllmPolicy, "engines.feedback.kind=vllm", `engines.feedback.vllm={servers: ["http://127.0.0.1:8000"], model: m}`),
		`--set engines.feedback.vllm={servers: ["http://127.0.0.1:8000"], model: m}: engines.feedback.vllm.servers: http://127.0.0.1:8000 serves the policy too`},

	// Templates, as the driver renders them.
	{"quickstart", []string{`episode.templates.solver="{{.Problem}} {{.Attempt}}"`}, `--set episode.templates.solver="{{.Problem}} {{.Attempt}}": episode.templates.solver: uses .Attempt: not supported in a prompt template (fields .Problem;`},
	{"mlmt_math", []string{`episode.templates.static_feedback="{{.Feedback}}"`}, `--set episode.templates.static_feedback="{{.Feedback}}": episode.templates.static_feedback: uses .Feedback: not supported`},
	{"mlmt_math", []string{`episode.templates.refine="{{.Problem}} {{.Attempt}} {{.Hint}} {{.Feedback}}"`}, `--set episode.templates.refine="{{.Problem}} {{.Attempt}} {{.Hint}} {{.Feedback}}": episode.templates.refine: uses .Hint: not supported`},
	{"mlmt_math", []string{`episode.templates.feedback="{{.Problem}} {{.Attempt}} {{.Output}}"`}, `--set episode.templates.feedback="{{.Problem}} {{.Attempt}} {{.Output}}": episode.templates.feedback: uses .Output: not supported`},
	{"mlmt_math", []string{`sft.feedback_response="{{.Output}}"`}, `--set sft.feedback_response="{{.Output}}": sft.feedback_response: uses .Output: not supported`},
	{"mlmt_math", []string{`sft.refine_feedback="{{.Feedback}}"`}, `--set sft.refine_feedback="{{.Feedback}}": sft.refine_feedback: uses .Feedback: not supported`},
	{"mlmt_math", []string{`episode.templates.feedback="{{.Problem}} {{.AnyHint}} {{.Attempt}}"`}, `--set episode.templates.feedback="{{.Problem}} {{.AnyHint}} {{.Attempt}}": episode.templates.feedback: uses .AnyHint: not supported`},
	{"score_math", []string{`episode.templates.review="{{.Output}}"`}, `--set episode.templates.review="{{.Output}}": episode.templates.review: uses .Output: not supported`},
	{"quickstart", []string{"episode.type=tools", `episode.templates.tool_solver="{{.Problem}} {{.Attempt}}"`},
		`--set episode.templates.tool_solver="{{.Problem}} {{.Attempt}}": episode.templates.tool_solver: uses .Attempt: not supported in a prompt template (fields .Problem;`},
	{"quickstart", []string{"episode.type=tools", `episode.templates.tool_response="{{.Output}} {{.Problem}}"`},
		`--set episode.templates.tool_response="{{.Output}} {{.Problem}}": episode.templates.tool_response: uses .Problem: not supported in a prompt template (fields .Output;`},

	// The packages' own checks.
	{"quickstart", []string{"models.policy.init.hidden_size=36", "models.policy.init.heads=4", "models.policy.init.kv_heads=2"}, "builtin:quickstart.yaml:16: models.policy.init: config init: field head_dim: 9 must be even for rotary embeddings"},
	{"quickstart", []string{"algorithm.clip_low=0", "algorithm.clip_high=0"}, "builtin:quickstart.yaml:50: algorithm: learner config: loss: clip_low and clip_high are both 0"},
	{"quickstart", []string{`episode.templates.refine="{{.Nope}}"`}, `--set episode.templates.refine="{{.Nope}}": episode.templates.refine: template "refine": uses .Nope: not supported in a prompt template`},

	// Agent episodes.
	{"agent_game", []string{"episode.agent.env=http", "episode.agent.url=http://127.0.0.1:8000"}, "builtin:agent_game.yaml:39: sft.steps: 100: env http has no scripted teacher to warm up on: set sft.trajectories or sft.steps 0"},

	// Prompts that cannot fit the policy's context (checkContext).
	{"quickstart", []string{"episode.type=score"}, "builtin:quickstart.yaml:23: models.policy.init.max_positions: 64 positions: problem arithmetic/1/train/0: the review prompt (episode.templates.review) takes 86 tokens, leaving no room for an answer"},
	{"quickstart", []string{"episode.type=score", "models.policy.init.max_positions=88"}, "--set models.policy.init.max_positions=88: models.policy.init.max_positions: 88 positions: problem arithmetic/1/train/0: the warm-up sequence of the review prompt (episode.templates.review) and its target takes"},
}

var (
	vllmPolicy   = []string{"deterministic=false", "engines.policy.kind=vllm", `engines.policy.vllm={servers: ["http://127.0.0.1:8000"], model: m}`}
	vllmFeedback = []string{"engines.feedback.kind=vllm", `engines.feedback.vllm={servers: ["http://127.0.0.1:8001"], model: m}`}
	vllmBoth     = sets(vllmPolicy, vllmFeedback...)
)

func sets(base []string, more ...string) []string {
	return append(append([]string{}, base...), more...)
}

// refusalErrors runs every case: the error Check and FromRecipe both give.
func refusalErrors(t *testing.T) []string {
	t.Helper()
	t.Setenv("RLNODE_HOME", t.TempDir())
	var got []string
	for _, c := range refusalCases {
		name := c.recipe + " " + strings.Join(c.sets, " ")
		l, err := recipes.Load(c.recipe, c.sets)
		if err != nil {
			t.Errorf("%s: load: %v", name, err)
			continue
		}
		checkErr := Check(l)
		_, runErr := FromRecipe(l, t.TempDir())
		switch {
		case checkErr == nil || runErr == nil:
			t.Errorf("%s: Check: %v; FromRecipe: %v; want both to refuse", name, checkErr, runErr)
			continue
		case checkErr.Error() != runErr.Error():
			t.Errorf("%s: Check and FromRecipe differ:\n%v\n---\n%v", name, checkErr, runErr)
		case !errors.Is(checkErr, recipes.ErrInvalid):
			t.Errorf("%s: %v is not recipes.ErrInvalid", name, checkErr)
		}
		if !strings.Contains("\n"+checkErr.Error()+"\n", "\n"+c.want) {
			t.Errorf("%s: got\n%v\nwant a line starting %q", name, checkErr, c.want)
		}
		got = append(got, checkErr.Error())
	}
	return got
}

func TestCheckMatchesFromRecipe(t *testing.T) { refusalErrors(t) }

// Every refusal site of recipe.go (a no or tpl call naming its field) is
// reached by a case of refusalCases.
func TestRefusalSitesCovered(t *testing.T) {
	errs := refusalErrors(t)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "recipe.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	verb := regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z]`)
	n := 0
	ast.Inspect(f, func(nd ast.Node) bool {
		call, ok := nd.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		fn, ok := call.Fun.(*ast.Ident)
		if !ok || (fn.Name != "no" && fn.Name != "tpl") {
			return true
		}
		literal := func(e ast.Expr) string {
			lit, ok := e.(*ast.BasicLit)
			s, err := "", error(nil)
			if ok {
				s, err = strconv.Unquote(lit.Value)
			}
			if !ok || err != nil {
				t.Fatalf("%s: %s's field and message must be string literals (for this test)", fset.Position(e.Pos()), fn.Name)
			}
			return s
		}
		field := literal(call.Args[0])
		msg := `uses .*: not supported.*`
		if fn.Name == "no" {
			format := literal(call.Args[1])
			parts := verb.Split(format, -1)
			for i := range parts {
				parts[i] = regexp.QuoteMeta(parts[i])
			}
			msg = strings.Join(parts, ".*")
		}
		n++
		re := regexp.MustCompile(`(?m)^.*: ` + regexp.QuoteMeta(field) + `: ` + msg + `$`)
		for _, e := range errs {
			if re.MatchString(e) {
				return true
			}
		}
		t.Errorf("%s: no case of refusalCases reaches %s: %s", fset.Position(call.Pos()), field, msg)
		return true
	})
	if n < 25 {
		t.Errorf("found %d refusal sites in recipe.go; the walk is broken", n)
	}
}

// A refusal is reported at the line of the recipe file that asks for it.
func TestCheckNamesFileLine(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "vllm2.yaml")
	src := `name: vllm2
models: {policy: {init: {}}}
data: {task: {}}
engines:
  policy:
    kind: vllm
    replicas: 2
    vllm: {servers: ["http://127.0.0.1:8000"], model: m}
`
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := recipes.Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := file + ":7: engines.policy.replicas: 2 is not supported with kind vllm"
	if err := Check(l); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Check: %v\nwant %q", err, want)
	}
}

// An agent recipe's server settings are checked at their lines.
func TestCheckAgentHTTPURL(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	for _, c := range []struct {
		sets []string
		want string
	}{
		{[]string{"episode.agent.env=http"}, "builtin:agent_game.yaml:33: episode.agent.url: absent: env http needs the server's URL"},
		{[]string{"episode.agent.env=http", "episode.agent.url=ftp://h/x"}, `--set episode.agent.url=ftp://h/x: episode.agent.url: "ftp://h/x": want http(s)://host[:port][/path], no query`},
		{[]string{"episode.agent.env=http", "episode.agent.url=http://h?q=1"}, `--set episode.agent.url=http://h?q=1: episode.agent.url: "http://h?q=1": want http(s)://host[:port][/path], no query`},
		{[]string{"episode.agent.url=http://h"}, `--set episode.agent.url=http://h: episode.agent.url: url, timeout_seconds and retries are for env http (env is "guess")`},
		{[]string{"episode.agent.env=http", "episode.agent.url=http://h", "episode.agent.timeout_seconds=-1"}, "--set episode.agent.timeout_seconds=-1: episode.agent.timeout_seconds: -1: want 0..3600 (0: 30)"},
		{[]string{"episode.agent.env=http", "episode.agent.url=http://h", "episode.agent.retries=-2"}, "--set episode.agent.retries=-2: episode.agent.retries: -2: want -1..10 (0: 3, -1: none)"},
	} {
		l, err := recipes.Load("agent_game", append([]string{"sft.steps=0"}, c.sets...))
		if err == nil {
			err = Check(l)
		}
		if err == nil || !strings.Contains("\n"+err.Error()+"\n", "\n"+c.want) {
			t.Errorf("%v: got\n%v\nwant a line starting %q", c.sets, err, c.want)
		}
	}
	l, err := recipes.Load("agent_game", []string{"sft.steps=0", "episode.agent.env=http", "episode.agent.url=http://127.0.0.1:8000", "episode.agent.timeout_seconds=2.5"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FromRecipe(l, t.TempDir())
	if err != nil {
		t.Fatalf("a valid http agent recipe: %v", err)
	}
	if a := cfg.Agent; a.URL != "http://127.0.0.1:8000" || a.Timeout != 2500*time.Millisecond || a.Retries != 0 {
		t.Errorf("agent config %+v: want the recipe's url and a 2.5 s timeout", *a)
	}
}

// Every built-in recipe passes Check, and converts.
func TestBuiltinsPassCheck(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	for _, name := range recipes.BuiltinNames() {
		l, err := recipes.Load(name, nil)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if err := Check(l); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := FromRecipe(l, t.TempDir()); err != nil {
			t.Errorf("%s: FromRecipe: %v", name, err)
		}
	}
}

// FuzzCheck: for any built-in recipe and override that loads, Check does
// not panic and FromRecipe refuses exactly what it refuses. Run: go test
// ./train -run '^$' -fuzz FuzzCheck
func FuzzCheck(f *testing.F) {
	f.Setenv("RLNODE_HOME", f.TempDir())
	for _, c := range refusalCases {
		for _, s := range c.sets {
			f.Add(c.recipe, s)
		}
	}
	for _, name := range recipes.BuiltinNames() {
		f.Add(name, "algorithm.name=ppo")
		f.Add(name, "episode.type=score")
		f.Add(name, "sync.mode=async")
	}
	f.Fuzz(func(t *testing.T, name, set string) {
		l, err := recipes.Load(name, []string{set})
		if err != nil {
			return
		}
		checkErr := Check(l)
		_, runErr := FromRecipe(l, t.TempDir())
		if (checkErr == nil) != (runErr == nil) || checkErr != nil && checkErr.Error() != runErr.Error() {
			t.Errorf("%s --set %s: Check: %v\nFromRecipe: %v", name, set, checkErr, runErr)
		}
	})
}

// Hostile templates (loops, recursion, unbounded printf) are refused by
// Check without running them; the timeout only guards against a hang.
func TestCheckRefusesHostileTemplates(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	cases := []struct{ recipe, set, want string }{
		{"quickstart", "episode.templates.solver='{{range 1000000000}}x{{end}}{{.Problem}}'", "{{range}}"},
		{"quickstart", "sft.response='{{range 1000000000}}{{end}}{{.Answer}}'", "{{range}}"},
		{"quickstart", `sft.response='{{printf "%0999999999d" 1}}{{.Answer}}'`, "over 999"},
		{"mlmt_math", `episode.templates.refine='{{define "a"}}{{template "a" .}}{{end}}{{template "a" .}}{{.Problem}}{{.Attempt}}{{.Feedback}}'`, "{{template}}"},
		{"mlmt_math", "episode.templates.feedback='{{range 99999}}{{range 99999}}{{end}}{{end}}{{.Problem}}{{.Attempt}}'", "{{range}}"},
	}
	for _, c := range cases {
		done := make(chan error, 1)
		go func() {
			l, err := recipes.Load(c.recipe, []string{c.set})
			if err == nil {
				err = Check(l)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s --set %s: %v; want a refusal naming %s", c.recipe, c.set, err, c.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s --set %s: validation still running after 20 s", c.recipe, c.set)
		}
	}
}

// A learner or engine placed on the GPU passes Check anywhere (a Slurm
// login node writes the batch script for GPU nodes), and CheckHost refuses
// it, at the recipe's line, with the reason the CUDA backend cannot run on
// this host.
func TestCheckHostDeviceCUDA(t *testing.T) {
	if cuda.Available().Err() == nil {
		t.Skip("the CUDA backend can run here: nothing to refuse")
	}
	for _, c := range []struct{ section, want string }{
		{"placement:\n  learner_device: cuda\n", ":5: placement.learner_device: cuda: the CUDA backend cannot run here: "},
		{"engines:\n  policy:\n    device: cuda\n", ":6: engines.policy.device: cuda: the CUDA backend cannot run here: "},
	} {
		dir := t.TempDir()
		file := filepath.Join(dir, "gpu.yaml")
		src := "name: gpu\nmodels: {policy: {init: {}}}\ndata: {task: {}}\n" + c.section
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := recipes.Load(file, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(l); err != nil {
			t.Errorf("Check refused %q: %v", c.section, err)
		}
		if _, err := FromRecipe(l, t.TempDir()); err != nil {
			t.Errorf("FromRecipe refused %q: %v", c.section, err)
		}
		want := file + c.want
		err = CheckHost(l)
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("CheckHost: %v\nwant one line starting %q", err, want)
		}
		// The reasons are the probe's own.
		for _, p := range cuda.Available().Problems {
			if !strings.Contains(err.Error(), p.Error()) {
				t.Errorf("CheckHost: %v\ndoes not carry the probe's reason %v", err, p)
			}
		}
	}
	// An unknown device is refused by validation.
	if _, err := recipes.Load("quickstart", []string{"placement.learner_device=tpu"}); err == nil || !strings.Contains(err.Error(), `placement.learner_device: "tpu": want one of cpu, cuda, cuda-bf16`) {
		t.Errorf("learner_device tpu: %v", err)
	}
}

// The feedback policy's engine runs where the policy's does: it takes the
// policy engine's device (a different one is a refusalCases case).
func TestFeedbackEngineDevice(t *testing.T) {
	l, err := recipes.Load("mlmt_math", []string{"engines.policy.device=cuda-bf16:1"})
	if err != nil {
		t.Fatal(err)
	}
	if e := l.Recipe.Engines.Feedback; e == nil || e.Device != "cuda-bf16:1" {
		t.Errorf("engines.feedback after engines.policy.device=cuda-bf16:1: %+v", e)
	}
}

// Each template problem is reported once. The driver parses the templates
// its episode type renders, with each turn's fields, and rollout/episode
// parses all of them with every field: a template that did not parse, or
// used an unknown field, was reported by both, twice on its line.
func TestCheckReportsATemplateOnce(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	cases := []struct {
		recipe, set, path string
		want              []string // one problem each, in this order
	}{
		{"quickstart", `episode.templates.solver="{{.Problem"`, "episode.templates.solver", []string{"unclosed action"}},
		{"quickstart", "episode.templates.solver='{{range 1000000000}}x{{end}}{{.Problem}}'", "episode.templates.solver", []string{"{{range}}"}},
		{"mlmt_math", `episode.templates.refine="{{.Problem}} {{.Attempt}} {{.Feedback}} {{.Nope}}"`, "episode.templates.refine",
			[]string{"uses .Nope: not supported in a prompt template (fields .Problem, .Attempt, .Feedback;"}},
		// Not rendered by a single-turn run: rollout/episode's check alone.
		{"quickstart", `episode.templates.refine="{{.Nope}}"`, "episode.templates.refine", []string{`template "refine": uses .Nope`}},
		// Two problems: a field the solver's turn lacks, and one it needs.
		{"quickstart", `episode.templates.solver="{{.Attempt}}"`, "episode.templates.solver", []string{"does not use .Problem", "uses .Attempt: not supported"}},
	}
	for _, c := range cases {
		l, err := recipes.Load(c.recipe, []string{c.set})
		if err != nil {
			t.Fatalf("%s --set %s: load: %v", c.recipe, c.set, err)
		}
		err = Check(l)
		if err == nil {
			t.Errorf("%s --set %s: Check passed", c.recipe, c.set)
			continue
		}
		var lines []string
		for _, line := range strings.Split(err.Error(), "\n") {
			if strings.Contains(line, ": "+c.path+": ") {
				lines = append(lines, line)
			}
		}
		ok := len(lines) == len(c.want)
		for i := 0; ok && i < len(lines); i++ {
			ok = strings.Contains(lines[i], c.want[i])
		}
		if !ok {
			t.Errorf("%s --set %s: %s reported as\n%s\nwant one line each with %q", c.recipe, c.set, c.path, strings.Join(lines, "\n"), c.want)
		}
	}
}

// A dataset problem longer than a template's output cap (1 MiB) is refused
// as too long for the context, naming the problem, as a shorter one over
// the context is: the rendered prompt stops at the cap, it does not become
// the template's text without the problem (an empty prompt here, which
// the engine refused at the first generation without naming a row).
func TestCheckRefusesProblemOverTheTemplateCap(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	file := filepath.Join(t.TempDir(), "long.jsonl")
	long := `{"prompt":"` + strings.Repeat("a b ", (2<<20)/4) + `","answer":"1"}` + "\n"
	if err := os.WriteFile(file, []byte(long+`{"prompt":"1+1","answer":"2"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := recipes.Load("quickstart", []string{"data.task=null", "data.dataset={train: " + file + ", eval: " + file + "}"})
	if err != nil {
		t.Fatal(err)
	}
	want := "models.policy.init.max_positions: 64 positions: problem train/0: the first prompt (episode.templates.solver) takes"
	if err := Check(l); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Check: %v\nwant …%s", err, want)
	}
}
