package ctxopt

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/ctxopt/simlm"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode/episodetest"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

func testSpace() Space {
	return Space{Tools: []string{ToolCalculator, ToolPython}, Budgets: []int{64, 256, 512},
		Atoms: []string{"Think step by step.", "Be concise.", "Double-check every calculation.", "Use a tool for every calculation.", "End with the line #### <answer>.", "Restate the question in your own words first."}, MaxAtoms: 3}
}

func testExecutor(e engine.Engine) *Executor {
	return &Executor{Engine: e, Verifier: verify.GSM8K{}, Space: testSpace(),
		Cost: CostWeights{PromptToken: 0.0005, CompletionToken: 0.002, ToolCall: 0.1, ModelCall: 0.1}, CorrectReward: 5, Workers: 2}
}

func direct(tools, budget int, atoms ...int) Config {
	var c Config
	c.Agents[Answerer] = Agent{Tools: tools, Budget: budget, Atoms: atoms}
	return c
}

// The calculator genuinely fixes the large-number arithmetic the model
// gets wrong in its head, and costs a tool call and tokens.
func TestCalculatorFixesLargeArithmetic(t *testing.T) {
	qs, err := Questions(1, task.Train, []string{task.Arithmetic}, []int{4, 5}, 40)
	if err != nil {
		t.Fatal(err)
	}
	x := testExecutor(simlm.Engine{})
	run := func(c Config) Summary {
		outs, err := Execute(context.Background(), x, qs, repeat(c, len(qs)), 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range outs {
			if o.Usage.CompletionTokens > 64 {
				t.Fatalf("%s: %d completion tokens over the 64-token budget", qs[i].ID, o.Usage.CompletionTokens)
			}
		}
		return Summarize("", outs, repeat(c, len(qs)))
	}
	head, calc := run(direct(0, 0, 4)), run(direct(1, 0, 4))
	t.Logf("no tools: accuracy %.2f cost %.3f; calculator: accuracy %.2f cost %.3f", head.Accuracy, head.Cost, calc.Accuracy, calc.Cost)
	if calc.Accuracy != 1 || head.Accuracy > 0.8 {
		t.Errorf("accuracy without tools %.2f, with the calculator %.2f; want ≤ 0.8 and 1", head.Accuracy, calc.Accuracy)
	}
	if !(calc.Cost > head.Cost) {
		t.Errorf("the calculator cost %.3f, no tools %.3f: tool calls must cost", calc.Cost, head.Cost)
	}
}

func TestRunCountsUsageAndScores(t *testing.T) {
	x := testExecutor(simlm.Engine{})
	q := Question{ID: "q", Text: "What is 47 * 89?", Answer: "4183"}
	var c Config
	c.Structure = ReasonVerifyAnswer
	c.Agents[Reasoner] = Agent{Tools: 1, Budget: 1}
	c.Agents[Verifier] = Agent{Budget: 1}
	c.Agents[Answerer] = Agent{Budget: 0, Atoms: []int{4}}
	o, err := x.Run(context.Background(), q, c, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Reasoner: call + continuation after the tool; verifier; answerer.
	if o.Usage.ModelCalls != 4 || o.Usage.ToolCalls != 1 || !o.Correct || o.Answer != "#### 4183" {
		t.Fatalf("outcome %+v, want 4 model calls, 1 tool call, correct #### 4183", o)
	}
	if want := x.Cost.Cost(o.Usage); o.Cost != want || o.Reward != 5-want {
		t.Errorf("cost %v reward %v, want %v and %v", o.Cost, o.Reward, want, 5-want)
	}
	c.Agents[Reasoner].Tools = 99
	if _, err := x.Run(context.Background(), q, c, 1); err == nil {
		t.Error("a configuration outside the space ran")
	}
}

// Hostile model output: unknown tools, tools the agent was not given,
// malformed calls, endless calls. Each gets an error message as the tool
// output, and the agent stops at MaxToolCalls.
func TestToolLoopOnHostileOutput(t *testing.T) {
	eng := episodetest.NewScriptedEngine(func(r engine.Request, i int) string {
		switch len(r.Messages) {
		case 2:
			return `<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}`
		case 4:
			return `<tool_call>{"name": "rm", "arguments": {}}`
		case 6:
			return `<tool_call>not json`
		}
		return `<tool_call>{"name": "calculator", "arguments": {"expression": "2 ** 3"}}`
	})
	x := testExecutor(eng)
	x.MaxToolCalls = 5
	o, err := x.Run(context.Background(), Question{ID: "q", Text: "What is 2 ** 3?", Answer: "8"}, direct(1, 1), 1)
	if err != nil {
		t.Fatal(err)
	}
	if o.Usage.ModelCalls != 6 || o.Usage.ToolCalls != 5 || o.Correct {
		t.Fatalf("usage %+v correct %v: want 6 model calls, 5 tool calls, not correct", o.Usage, o.Correct)
	}
	var responses []string
	for _, r := range eng.Requests() {
		last := r.Messages[len(r.Messages)-1].Content
		if strings.HasPrefix(last, "<tool_response>") {
			responses = append(responses, last)
		}
	}
	want := []string{`tool "python" is not available`, `tool "rm" is not available`, "not valid JSON", "\n8\n"}
	for i, w := range want {
		if i >= len(responses) || !strings.Contains(responses[i], w) {
			t.Errorf("tool response %d: %q, want it to contain %q", i, responses, w)
		}
	}
}

// The executor runs on the native engine too: a tiny random model's
// output is cut at the agent's budget, counted, and scored (wrong).
// A request the engine refuses scores 0 with a note; a failing engine is
// an error.
func TestEngineRefusalScoresZero(t *testing.T) {
	eng := episodetest.NewScriptedEngine(func(r engine.Request, i int) string {
		if r.Messages[0].Content[:22] == "You are the answerer o" {
			return episodetest.Refuse
		}
		return "Step 1: 2 + 3 = 5."
	})
	x := testExecutor(eng)
	var c Config
	c.Structure = ReasonAnswer
	o, err := x.Run(context.Background(), Question{ID: "q", Text: "What is 2 + 3?", Answer: "5"}, c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if o.Correct || o.Usage.ModelCalls != 1 || !strings.Contains(o.Note, "answerer") || o.Reward != -o.Cost || o.Cost <= 0 {
		t.Fatalf("outcome %+v: want not correct, the reasoner's call charged, a note naming the answerer", o)
	}
	eng.Fail = errors.New("connection refused")
	if _, err := x.Run(context.Background(), Question{ID: "q", Text: "What is 2 + 3?", Answer: "5"}, c, 1); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a failing engine: %v", err)
	}
}

func TestRunsOnNativeEngine(t *testing.T) {
	cfg := nativetest.Config()
	cfg.MaxPositions = 1024
	e, err := native.New(nativetest.Model(t, cfg, 1), tokenizer.Builtin(), native.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	x := testExecutor(e)
	x.Space.Budgets = []int{8, 16}
	var c Config
	c.Structure = ReasonAnswer
	c.Agents[Reasoner] = Agent{Budget: 1}
	c.Agents[Answerer] = Agent{Budget: 0}
	o, err := x.Run(context.Background(), Question{ID: "q", Text: "What is 2 + 3?", Answer: "5"}, c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if o.Usage.ModelCalls != 2 || o.Usage.CompletionTokens > 8+16 || o.Usage.CompletionTokens == 0 || o.Usage.PromptTokens < 50 || o.Correct {
		t.Fatalf("outcome %+v: want 2 model calls, 1..24 completion tokens, the prompts counted, not correct", o)
	}
}

func TestHTTPSearch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("q") == "down" {
			http.Error(w, "no", http.StatusBadGateway)
			return
		}
		w.Write([]byte("result for " + r.URL.Query().Get("q") + strings.Repeat("!", 5000)))
	}))
	defer srv.Close()
	s := HTTPSearch{URL: srv.URL, MaxBytes: 20}
	got, err := s.Search(context.Background(), "a b")
	if err != nil || got != "result for a b!!!!!!" {
		t.Fatalf("search: %q, %v; want the first 20 bytes", got, err)
	}
	if _, err := s.Search(context.Background(), "down"); err == nil || !strings.Contains(err.Error(), srv.URL) {
		t.Errorf("a failing endpoint: error %v, want one naming it", err)
	}
	// Off unless configured: the tool answers with an error.
	x := testExecutor(simlm.Engine{})
	x.Space.Tools = []string{ToolSearch}
	if out := x.runTool(context.Background(), []string{ToolSearch}, toolCall{Name: ToolSearch, Arguments: []byte(`{"query": "x"}`)}); !strings.Contains(out, "not configured") {
		t.Errorf("search without an endpoint: %q", out)
	}
	x.Search = s
	if out := x.runTool(context.Background(), []string{ToolSearch}, toolCall{Name: ToolSearch, Arguments: []byte(`{"query": "x"}`)}); out != "result for x!!!!!!!!" {
		t.Errorf("search tool: %q", out)
	}
}
