package train

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/verify"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// toolsRecipe is the quickstart as tool episodes with both tools, cut to
// a few steps.
func toolsRecipe(t *testing.T, sets ...string) Config {
	t.Helper()
	l, err := recipes.Load("quickstart", append([]string{"episode.type=tools", "episode.tools=[calculator, python]",
		"episode.max_tool_calls=2", `episode.templates.tool_solver="{{.Problem}}\n"`,
		`episode.templates.tool_response="\n<{{.Output}}>\n"`, "models.policy.init.max_positions=128",
		"sft.steps=2", "sft.batch_size=8", "schedule.steps=2", "algorithm.batch_prompts=4", "algorithm.group_size=2",
		"eval.held_out=4"}, sets...))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FromRecipe(l, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A tools recipe runs: its settings reach the config, and two warm-up
// and two RL steps train, evaluate and checkpoint; in this process and on
// two rollout actors, synchronous and asynchronous.
func TestToolsRecipeRuns(t *testing.T) {
	needPython(t)
	for _, c := range []struct {
		name string
		sets []string
	}{
		{"in process", nil},
		{"rollout actors", []string{"engines.policy.replicas=2"}},
		{"rollout actors async", []string{"deterministic=false", "engines.policy.replicas=2", "sync.mode=async"}},
	} {
		t.Run(c.name, func(t *testing.T) { runToolsRecipe(t, c.sets...) })
	}
}

func runToolsRecipe(t *testing.T, sets ...string) {
	t.Helper()
	cfg := toolsRecipe(t, sets...)
	if (cfg.Rollout != nil) != (len(sets) > 0) {
		t.Fatalf("rollout actors %+v for %v", cfg.Rollout, sets)
	}
	if cfg.Episode != EpisodeTools || !cfg.Calculator || !cfg.PythonTool || cfg.MaxToolCalls != 2 ||
		cfg.PromptTemplate != "{{.Question}}\n" || !strings.Contains(cfg.ToolResponseTemplate, ".Output") {
		t.Fatalf("config: episode %q calculator %v python %v calls %d prompt %q response %q", cfg.Episode, cfg.Calculator,
			cfg.PythonTool, cfg.MaxToolCalls, cfg.PromptTemplate, cfg.ToolResponseTemplate)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lines := readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))
	if res.Steps != 4 || len(lines) != 4 || res.LastCheckpointDir == "" || res.FinalEval < 0 {
		t.Fatalf("%d steps, %d metrics lines, checkpoint %q, final eval %v", res.Steps, len(lines), res.LastCheckpointDir, res.FinalEval)
	}
	for _, m := range lines[2:] {
		if m["phase"] != "rl" || m["reward_mean"] == nil || m["seqs"] != float64(8) {
			t.Errorf("RL step: %v", m)
		}
	}
}

// toolEngine answers a first prompt with a tool call and a prompt that
// holds the tool's response with a boxed answer (a model that learned
// the format).
type toolEngine struct {
	tok  *tokenizer.Tokenizer
	call string
}

func (e *toolEngine) Generate(_ context.Context, reqs []engine.Request) ([]engine.Result, error) {
	out := make([]engine.Result, len(reqs))
	for i, rq := range reqs {
		text := e.call
		if p := e.tok.Decode(rq.Prompt); strings.Contains(p, "<") {
			text = `\boxed{` + p[strings.LastIndex(p, "<")+1:strings.LastIndex(p, ">")] + `}`
		}
		ids := e.tok.Encode(text)
		out[i] = engine.Result{RequestID: rq.ID, PromptTokenIDs: rq.Prompt, WeightVersion: 3}
		for range max(rq.Params.N, 1) {
			out[i].Samples = append(out[i].Samples, engine.Sample{TokenIDs: ids, LogProbs: make([]float32, len(ids)), Text: text, FinishReason: "stop"})
		}
	}
	return out, nil
}
func (e *toolEngine) WeightVersion() int64 { return 3 }
func (e *toolEngine) Close() error         { return nil }

// A run's tool episode calls the calculator, splices its output into the
// sequence in the run's format, scores the last answer, and the batch
// masks the tool's tokens out of the loss.
func TestToolEpisodeBatch(t *testing.T) {
	cfg := toolsRecipe(t)
	cfg.PythonTool = false
	tpl, err := cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	src, err := newSource(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	probs, err := src.heldOut(3)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.BuiltinSized(cfg.Model.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	// Every problem gets 6*7 computed: right where the answer is 42.
	eng := &toolEngine{tok: tok, call: `<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>`}
	solver := episodePolicy("solver", &policyEngine{Engine: eng, tok: tok}, cfg.rlParams())
	run := player{cfg: &cfg, tpl: tpl, verifier: verify.Math{}}.runner(*solver, nil)
	turns, err := run.Run(context.Background(), episode.Batch{Examples: examplesOf(src, probs), N: 2, FirstGroupID: 10})
	if err != nil {
		t.Fatal(err)
	}
	b, err := BatchFromTrajectories("solver", turns, nil)
	if err != nil {
		t.Fatal(err)
	}
	spliced := tok.Encode("\n<42>\n")
	answer := tok.Encode(`\boxed{42}`)
	want := slices.Concat(tok.Encode(eng.call), spliced, answer)
	if len(turns) != 6 || len(b.Responses) != 6 || b.Masks == nil {
		t.Fatalf("%d turns, %d sequences, masks %v", len(turns), len(b.Responses), b.Masks != nil)
	}
	for i, tr := range turns {
		wantReward := 0.0
		if probs[i/2].Answer == "42" {
			wantReward = 1
		}
		if !slices.Equal(b.Responses[i], toInt32(want)) || tr.Reward != wantReward || b.GroupIDs[i] != int64(10+i/2) {
			t.Errorf("sequence %d: %q reward %v group %d", i, tok.Decode(toIntSlice(b.Responses[i])), tr.Reward, b.GroupIDs[i])
		}
		n := len(tok.Encode(eng.call))
		for k, m := range b.Masks[i] {
			if tool := k >= n && k < n+len(spliced); (tool && m != 0) || (!tool && m != 1) {
				t.Errorf("sequence %d token %d (tool output: %v): mask %v", i, k, tool, m)
				break
			}
		}
	}
}

func toIntSlice(x []int32) []int {
	out := make([]int, len(x))
	for i, v := range x {
		out[i] = int(v)
	}
	return out
}

// Tool episodes on vLLM servers: each continuation after a tool call is a
// prompt of token ids on the fake servers.
func TestToolsOnVLLM(t *testing.T) {
	cfg := toolsRecipe(t)
	cfg.PythonTool = false
	opts := vllmtest.Options{Model: "tiny", Vocab: cfg.Model.VocabSize}
	a := vllmtest.New(opts)
	defer a.Close()
	cfg.VLLM = &VLLM{Servers: []string{a.URL()}, Model: "tiny", ReloadTimeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if n := len(readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))); n != 4 || a.Generated() == 0 {
		t.Errorf("%d metrics lines, %d requests answered; want 4 and > 0", n, a.Generated())
	}
}
