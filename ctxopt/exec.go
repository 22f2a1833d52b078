package ctxopt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/verify"
)

// Question is one problem to answer.
type Question struct {
	ID     string
	Text   string
	Answer string
	Type   string // what best-fixed-per-type baselines group by, e.g. "word/3"
}

// Searcher is the web-search tool: it answers a query with a short text.
// Implementations must be safe for concurrent use.
type Searcher interface {
	Search(ctx context.Context, query string) (string, error)
}

// CostWeights turn an execution's usage into its cost.
type CostWeights struct {
	PromptToken     float64 `yaml:"prompt_token"`
	CompletionToken float64 `yaml:"completion_token"`
	ToolCall        float64 `yaml:"tool_call"`
	ModelCall       float64 `yaml:"model_call"`
}

// Usage counts what one execution spent.
type Usage struct {
	PromptTokens, CompletionTokens, ToolCalls, ModelCalls int
}

// Cost weighs u.
func (w CostWeights) Cost(u Usage) float64 {
	return w.PromptToken*float64(u.PromptTokens) + w.CompletionToken*float64(u.CompletionTokens) +
		w.ToolCall*float64(u.ToolCalls) + w.ModelCall*float64(u.ModelCalls)
}

// Outcome is the result of running one configuration on one question.
type Outcome struct {
	Correct bool
	Answer  string // the answerer's final text
	Usage   Usage
	Cost    float64
	Reward  float64 // CorrectReward·correct − Cost
	Note    string  // why the answer could not be scored, if so
}

// Executor runs workflow configurations against an engine.
type Executor struct {
	Engine   engine.Engine
	Verifier verify.Verifier
	Space    Space
	Python   episode.PythonExecutor // nil: the python tool answers with an error
	Search   Searcher               // nil: the search tool answers with an error
	Cost     CostWeights
	// CorrectReward is what a correct answer earns (5).
	CorrectReward float64
	MaxToolCalls  int     // per agent; 0 means 4
	Temperature   float64 // sampling temperature of every call
	Workers       int     // executions at once in RunBatch; 0 means 8
	// Remote, when set, runs RunBatch's jobs instead (executor actors on
	// cluster nodes: ExecutorPool).
	Remote Runner

	// Memo keeps outcomes by question and configuration and answers a
	// repeated pair from them: for an engine whose output depends only on
	// the prompt (greedy decoding), where seeds change nothing.
	Memo bool

	pyMu    sync.Mutex
	pyCache map[string]string
	memo    map[string]Outcome
}

// maxMemo bounds the outcomes Memo keeps.
const maxMemo = 1 << 18

// maxToolOutput bounds a tool's output as the model sees it.
const maxToolOutput = 2000

// maxPyCache bounds the cache of Python outputs by program.
const maxPyCache = 1 << 14

var roleInstructions = [NumRoles]string{
	"Work out the solution step by step. Do not write the final answer line.",
	"Check every step of the reasoning below and correct any mistake. End with: Verified result: N.",
	"Give the final answer to the question as a line #### N.",
}

// systemPrompt is an agent's instructions: role, tools, budget, atoms.
func (x *Executor) systemPrompt(r Role, a Agent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are the %s of a team that solves math word problems.\n%s\n", r, roleInstructions[r])
	tools := x.Space.ToolSet(a.Tools)
	if len(tools) == 0 {
		b.WriteString("Tools: none.\n")
	} else {
		fmt.Fprintf(&b, "Tools: %s.\n", strings.Join(tools, ", "))
		b.WriteString(`Call a tool as <tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>; python takes {"code": ...}, search {"query": ...}.` + "\n")
	}
	fmt.Fprintf(&b, "Token budget: %d.\n", x.Space.Budgets[a.Budget])
	for _, at := range a.Atoms {
		b.WriteString(x.Space.Atoms[at] + "\n")
	}
	return b.String()
}

// Run executes configuration c on q. seed fixes the engine's sampling. An
// engine failure is an error; bad model output scores 0 with a note.
func (x *Executor) Run(ctx context.Context, q Question, c Config, seed int64) (Outcome, error) {
	if err := x.Space.CheckConfig(c); err != nil {
		return Outcome{}, fmt.Errorf("execute %q: %w", q.ID, err)
	}
	if !x.Memo {
		return x.run(ctx, q, c, seed)
	}
	key := q.Text + "\x00" + q.Answer + "\x00" + x.Space.Describe(c)
	x.pyMu.Lock()
	o, ok := x.memo[key]
	x.pyMu.Unlock()
	if ok {
		return o, nil
	}
	o, err := x.run(ctx, q, c, seed)
	if err == nil {
		x.pyMu.Lock()
		if x.memo == nil {
			x.memo = map[string]Outcome{}
		}
		if len(x.memo) < maxMemo {
			x.memo[key] = o
		}
		x.pyMu.Unlock()
	}
	return o, err
}

func (x *Executor) run(ctx context.Context, q Question, c Config, seed int64) (Outcome, error) {
	var u Usage
	var reasoning, verification, answer string
	for r := Role(0); r < NumRoles; r++ {
		if !c.Structure.Uses(r) {
			continue
		}
		var user strings.Builder
		fmt.Fprintf(&user, "Question:\n%s\n\n", q.Text)
		if reasoning != "" {
			fmt.Fprintf(&user, "Reasoning:\n%s\n\n", strings.TrimSpace(reasoning))
		}
		if verification != "" {
			fmt.Fprintf(&user, "Verification:\n%s\n\n", strings.TrimSpace(verification))
		}
		text, err := x.agent(ctx, r, c.Agents[r], user.String(), seed+int64(r)*7919, &u)
		if errors.Is(err, engine.ErrBadRequest) {
			// A request the engine refuses (a prompt over its context) is
			// this configuration's failure, not the run's.
			o := Outcome{Usage: u, Cost: x.Cost.Cost(u), Note: fmt.Sprintf("%s: %v", r, err)}
			o.Reward = -o.Cost
			return o, nil
		}
		if err != nil {
			return Outcome{}, fmt.Errorf("execute %q: %s: %w", q.ID, r, err)
		}
		switch r {
		case Reasoner:
			reasoning = text
		case Verifier:
			verification = text
		case Answerer:
			answer = text
		}
	}
	res := x.Verifier.Verify(ctx, answer, verify.Reference{Answer: q.Answer})
	o := Outcome{Correct: res.Reward >= 1, Answer: answer, Usage: u, Note: res.Error}
	o.Cost = x.Cost.Cost(u)
	if o.Correct {
		o.Reward = x.CorrectReward
	}
	o.Reward -= o.Cost
	return o, nil
}

// agent runs one agent: generate within its token budget, run each tool
// call it ends a segment with, feed the output back, until it stops, runs
// out of budget or of tool calls. Returns its whole text (tool calls
// included, tool outputs not).
func (x *Executor) agent(ctx context.Context, r Role, a Agent, user string, seed int64, u *Usage) (string, error) {
	msgs := []tokenizer.Message{{Role: "system", Content: x.systemPrompt(r, a)}, {Role: "user", Content: user}}
	budget := x.Space.Budgets[a.Budget]
	tools := x.Space.ToolSet(a.Tools)
	maxCalls := x.MaxToolCalls
	if maxCalls <= 0 {
		maxCalls = 4
	}
	var text strings.Builder
	for calls := 0; ; {
		s := seed
		res, err := x.Engine.Generate(ctx, []engine.Request{{
			ID:       fmt.Sprintf("ctxopt-%s-%d", r, calls),
			Messages: msgs,
			Params:   engine.SamplingParams{MaxTokens: budget, Temperature: x.Temperature, Stop: []string{"</tool_call>"}, Seed: &s},
		}})
		if err != nil {
			return "", err
		}
		if len(res) != 1 || len(res[0].Samples) != 1 {
			return "", fmt.Errorf("engine answered %d results for one request", len(res))
		}
		smp := res[0].Samples[0]
		u.ModelCalls++
		u.PromptTokens += len(res[0].PromptTokenIDs)
		n := min(len(smp.TokenIDs), budget) // an engine that overruns is charged the budget only
		u.CompletionTokens += n
		budget -= n
		seg := smp.Text
		if smp.FinishReason == "stop" && strings.Contains(seg, "<tool_call>") && !strings.HasSuffix(strings.TrimSpace(seg), "</tool_call>") {
			seg += "</tool_call>" // the stop string is not part of the output
		}
		text.WriteString(seg)
		call, ok := lastCall(seg)
		if !ok || smp.FinishReason != "stop" || calls >= maxCalls || budget <= 0 {
			return text.String(), nil
		}
		calls++
		u.ToolCalls++
		out := x.runTool(ctx, tools, call)
		if len(out) > maxToolOutput {
			out = out[:maxToolOutput] + "\n[output cut]"
		}
		msgs = append(msgs, tokenizer.Message{Role: "assistant", Content: seg},
			tokenizer.Message{Role: "user", Content: "<tool_response>\n" + out + "\n</tool_response>"})
	}
}

type toolCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	bad       string
}

// lastCall finds a tool call that ends the segment.
func lastCall(seg string) (toolCall, bool) {
	t := strings.TrimSpace(seg)
	if !strings.HasSuffix(t, "</tool_call>") {
		return toolCall{}, false
	}
	t = strings.TrimSuffix(t, "</tool_call>")
	i := strings.LastIndex(t, "<tool_call>")
	if i < 0 {
		return toolCall{}, false
	}
	var c toolCall
	if err := json.Unmarshal([]byte(strings.TrimSpace(t[i+len("<tool_call>"):])), &c); err != nil {
		c.bad = "tool call is not valid JSON: " + err.Error()
	}
	return c, true
}

func (x *Executor) runTool(ctx context.Context, allowed []string, c toolCall) string {
	if c.bad != "" {
		return "error: " + c.bad
	}
	ok := false
	for _, t := range allowed {
		ok = ok || t == c.Name
	}
	if !ok {
		return fmt.Sprintf("error: tool %q is not available to this agent", c.Name)
	}
	var args map[string]string
	if err := json.Unmarshal(c.Arguments, &args); err != nil {
		return "error: tool arguments must be an object of strings"
	}
	switch c.Name {
	case ToolCalculator:
		v, err := episode.Calculate(args["expression"])
		if err != nil {
			return "error: " + err.Error()
		}
		return v
	case ToolPython:
		if x.Python == nil {
			return "error: python is not available here"
		}
		code := args["code"]
		x.pyMu.Lock()
		out, hit := x.pyCache[code]
		x.pyMu.Unlock()
		if hit {
			return out
		}
		out, err := x.Python.RunPython(ctx, code)
		if err != nil {
			return "error: python sandbox: " + err.Error()
		}
		x.pyMu.Lock()
		if x.pyCache == nil {
			x.pyCache = map[string]string{}
		}
		if len(x.pyCache) < maxPyCache {
			x.pyCache[code] = out
		}
		x.pyMu.Unlock()
		return out
	case ToolSearch:
		if x.Search == nil {
			return "error: search is not configured"
		}
		out, err := x.Search.Search(ctx, args["query"])
		if err != nil {
			return "error: search: " + err.Error()
		}
		return out
	}
	return fmt.Sprintf("error: unknown tool %q", c.Name)
}

// Job is one execution of a batch.
type Job struct {
	Q    Question
	C    Config
	Seed int64
}

// Runner runs a batch of jobs and returns their outcomes in order.
type Runner interface {
	RunBatch(ctx context.Context, jobs []Job) ([]Outcome, error)
}

// RunBatch executes jobs with Workers at once (or hands them to Remote)
// and returns their outcomes in order; the first error stops the batch.
func (x *Executor) RunBatch(ctx context.Context, jobs []Job) ([]Outcome, error) {
	if x.Remote != nil {
		return x.Remote.RunBatch(ctx, jobs)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := x.Workers
	if workers <= 0 {
		workers = 8
	}
	out := make([]Outcome, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i], errs[i] = x.Run(ctx, jobs[i].Q, jobs[i].C, jobs[i].Seed)
				if errs[i] != nil {
					cancel()
				}
			}
		}()
	}
	for i := range jobs {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// HTTPSearch queries a search endpoint: GET URL?q=QUERY, the body's first
// MaxBytes as the result.
type HTTPSearch struct {
	URL      string
	Client   *http.Client // nil: a client with a 10 s timeout
	MaxBytes int          // 0 means 2000
}

// Search implements Searcher.
func (s HTTPSearch) Search(ctx context.Context, query string) (string, error) {
	u, err := url.Parse(s.URL)
	if err != nil {
		return "", fmt.Errorf("search endpoint %q: %w", s.URL, err)
	}
	v := u.Query()
	v.Set("q", query)
	u.RawQuery = v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	c := s.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("search endpoint %s: %w", s.URL, err)
	}
	defer resp.Body.Close()
	limit := s.MaxBytes
	if limit <= 0 {
		limit = 2000
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)))
	if err != nil {
		return "", fmt.Errorf("search endpoint %s: %w", s.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("search endpoint %s: status %s", s.URL, resp.Status)
	}
	return string(body), nil
}
