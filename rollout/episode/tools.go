package episode

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/verify"
)

// PythonExecutor runs a Python program in a sandbox (the code verifier's
// sandbox implements it) and returns what it printed (stdout, then
// stderr), capped by the sandbox. A program that fails, times out or is
// killed is not an error: its output says so. err is for a sandbox that
// could not run at all. Implementations must be safe for concurrent use.
type PythonExecutor interface {
	RunPython(ctx context.Context, code string) (output string, err error)
}

// ToolUse is the multi-turn tool episode: the solver writes, and whenever
// its turn ends with a <tool_call>{"name": ..., "arguments": ...}</tool_call>
// the tool runs and its output, in the ToolResponse template, is appended
// to the sequence; the solver continues from there, up to MaxCalls tool
// calls. Tools: with Calculator, "calculator" (arguments.expression, see
// Calculate); with a Python executor, "python" (arguments.code).
//
// The episode is one Turn: ResponseIDs hold the solver's tokens and the
// tool-output tokens in order; tool-output tokens have loss mask 0 and
// logprob 0, so only what the solver sampled is trained. The reward is the
// score of the solver's last segment.
//
// Tokenizer encodes the tool output (nil: the solver's Tokenizer).
type ToolUse struct {
	Solver    Policy
	Prompter  Prompter
	Verifier  verify.Verifier
	Workers   int // verifications at once; 0: one
	Tokenizer Tokenizer
	Python    PythonExecutor // nil: no python tool
	// Calculator offers the calculator tool (NewToolUse does).
	Calculator bool
	MaxCalls   int // tool calls per episode; 0 means 4
	Limits     Limits
}

// NewToolUse checks the policy, tokenizer and templates.
func NewToolUse(solver Policy, v verify.Verifier, tok Tokenizer, py PythonExecutor, t Templates, lim Limits) (*ToolUse, error) {
	if err := solver.check("solver"); err != nil {
		return nil, err
	}
	if v == nil || tok == nil {
		return nil, fmt.Errorf("tool episode: needs a verifier and a tokenizer")
	}
	pr, err := t.Prompter()
	if err != nil {
		return nil, err
	}
	return &ToolUse{Solver: solver, Prompter: pr, Verifier: v, Tokenizer: tok, Python: py, Calculator: true, MaxCalls: 4, Limits: lim}, nil
}

type toolState struct {
	ex      data.Example
	i       int
	group   int64
	sample  int
	turn    data.Turn
	prompt  []int // the first prompt's token ids
	seq     []int // response so far: solver and tool tokens
	last    string
	text    strings.Builder
	calls   int
	done    bool
	notes   []string
	version int64
}

// Run implements Runner.
func (r *ToolUse) Run(ctx context.Context, b Batch) ([]data.Turn, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	if err := r.Solver.check("solver"); err != nil {
		return nil, err
	}
	tok := r.Tokenizer
	if tok == nil {
		tok = r.Solver.Tokenizer
	}
	if tok == nil {
		return nil, fmt.Errorf("tool episode: no tokenizer for the tool output")
	}
	lim := r.Limits.withDefaults()
	maxCalls := r.MaxCalls
	if maxCalls <= 0 {
		maxCalls = 4
	}
	outs, err := first(ctx, r.Solver, r.Prompter.ToolSolver, b, "c0")
	if err != nil {
		return nil, err
	}
	var eps []*toolState
	for i, ex := range b.Examples {
		for s := range b.N {
			e := &toolState{ex: ex, i: i, group: b.FirstGroupID + int64(i), sample: s}
			eps = append(eps, e)
			if o := outs[i]; o.err != nil {
				e.turn, e.done = failedTurn(r.Solver, o, "turn 0: "+o.err.Error()), true
				continue
			}
			e.turn = turnOf(r.Solver, outs[i], outs[i].res.Samples[s])
			e.prompt = append([]int(nil), outs[i].res.PromptTokenIDs...)
			e.seq = append(e.seq, outs[i].res.Samples[s].TokenIDs...)
			e.last = outs[i].res.Samples[s].Text
			e.text.WriteString(e.last)
			e.version = outs[i].res.WeightVersion
		}
	}
	for round := 1; ; round++ {
		var live []*toolState
		var reqs []call
		for _, e := range eps {
			if e.done {
				continue
			}
			tc, ok := lastToolCall(e.last)
			if !ok || e.turn.FinishReason == "length" {
				e.done = true
				continue
			}
			if e.calls == maxCalls {
				e.notes = append(e.notes, fmt.Sprintf("stopped after %d tool calls", maxCalls))
				e.done = true
				continue
			}
			e.calls++
			start := time.Now()
			out := r.runTool(ctx, tc)
			end := time.Now()
			q, _ := lim.Quote(out)
			resp, err := r.Prompter.ToolResponse(q)
			if err != nil {
				return nil, err
			}
			ids := tok.Encode(resp)
			// Where the result's tokens sit, so the turn's trace says which
			// of its tokens the model did not write.
			from := int32(len(e.turn.ResponseIDs))
			e.turn.Call.AddTool(data.ToolCall{Name: tc.Name, Arguments: string(tc.Arguments), Result: out,
				Error: toolError(tc, out), Start: start, End: end, TokensFrom: from, TokensTo: from + int32(len(ids))})
			e.seq = append(e.seq, ids...)
			e.turn.ResponseIDs = append(e.turn.ResponseIDs, toInt32(ids)...)
			e.turn.LogProbs = append(e.turn.LogProbs, make([]float32, len(ids))...)
			e.turn.LossMask = append(e.turn.LossMask, make([]float32, len(ids))...)
			e.text.WriteString(resp)
			p := b.params(r.Solver.Params, StageFinal+round, e.i, e.sample, round, 1)
			prompt := append(append([]int(nil), e.prompt...), e.seq...)
			live = append(live, e)
			reqs = append(reqs, call{Request: engine.Request{ID: fmt.Sprintf("%s-c%d", episodeID(e.group, e.sample), round), Prompt: prompt, Params: p}})
		}
		if len(reqs) == 0 {
			break
		}
		outs, err := generate(ctx, r.Solver, reqs)
		if err != nil {
			return nil, err
		}
		for k, e := range live {
			if o := outs[k]; o.err != nil {
				e.notes = append(e.notes, fmt.Sprintf("call %d: %v", round, o.err))
				e.last, e.done = "", true
				// The turn still ran to this call's answer: its tool's
				// result, already in the turn, lies inside the turn's time.
				e.turn.Call.End, e.turn.Call.EndShared = o.end, true
				continue
			}
			smp := outs[k].res.Samples[0]
			lp := smp.LogProbs
			if len(lp) != len(smp.TokenIDs) {
				lp = make([]float32, len(smp.TokenIDs))
			}
			e.seq = append(e.seq, smp.TokenIDs...)
			e.turn.ResponseIDs = append(e.turn.ResponseIDs, toInt32(smp.TokenIDs)...)
			e.turn.LogProbs = append(e.turn.LogProbs, lp...)
			e.turn.LossMask = append(e.turn.LossMask, ones(len(smp.TokenIDs))...)
			e.turn.FinishReason = smp.FinishReason
			e.turn.Call.End, e.turn.Call.EndShared = endOf(outs[k], smp)
			if outs[k].res.WeightVersion != e.version {
				e.notes = append(e.notes, fmt.Sprintf("weight version changed from %d to %d mid-episode", e.version, outs[k].res.WeightVersion))
				e.version = min(e.version, outs[k].res.WeightVersion)
			}
			e.last = smp.Text
			e.text.WriteString(e.last)
		}
	}
	var jobs []Answer
	for _, e := range eps {
		if e.turn.FinishReason != "error" {
			jobs = append(jobs, Answer{e.last, e.ex.Ref})
		}
	}
	rewards, notes, err := ScoreAll(ctx, r.Verifier, r.Workers, lim, jobs)
	if err != nil {
		return nil, err
	}
	var turns []data.Turn
	for _, e := range eps {
		t := e.turn
		if t.FinishReason != "error" {
			t.ResponseText = strings.ToValidUTF8(e.text.String(), "\uFFFD")
			t.WeightVersion = e.version
			t.Reward = rewards[0]
			t.Note = joinNotes(append([]string{t.Note, notes[0]}, e.notes...)...)
			rewards, notes = rewards[1:], notes[1:]
		}
		t.FinalReward = t.Reward
		setEpisode(&t, e.group, e.sample, 0)
		turns = append(turns, t)
	}
	return turns, nil
}

// toolCall is Qwen2.5's tool-call JSON.
type toolCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	bad       string
}

// lastToolCall finds the last <tool_call>...</tool_call> of a segment. A
// call whose body is not valid JSON is still a call: the model gets the
// parse error back as the tool's output.
func lastToolCall(text string) (toolCall, bool) {
	end := strings.LastIndex(text, "</tool_call>")
	if end < 0 {
		return toolCall{}, false
	}
	start := strings.LastIndex(text[:end], "<tool_call>")
	if start < 0 {
		return toolCall{}, false
	}
	body := strings.TrimSpace(text[start+len("<tool_call>") : end])
	var c toolCall
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		return toolCall{bad: "tool call is not valid JSON: " + err.Error()}, true
	}
	return c, true
}

// toolError is the error a tool call ended with, for traces: runTool's
// outputs that begin "error: " (a call it could not make or the tool
// refused); a program that printed an error is not one.
func toolError(c toolCall, out string) string {
	if c.bad != "" || strings.HasPrefix(out, "error: ") {
		return strings.TrimPrefix(out, "error: ")
	}
	return ""
}

func (r *ToolUse) runTool(ctx context.Context, c toolCall) string {
	if c.bad != "" {
		return "error: " + c.bad
	}
	switch c.Name {
	case "calculator":
		if !r.Calculator {
			break
		}
		var a struct {
			Expression string `json:"expression"`
		}
		if err := json.Unmarshal(c.Arguments, &a); err != nil || a.Expression == "" {
			return `error: calculator needs {"expression": "..."}`
		}
		v, err := Calculate(a.Expression)
		if err != nil {
			return "error: " + err.Error()
		}
		return v
	case "python":
		if r.Python == nil {
			break
		}
		var a struct {
			Code string `json:"code"`
		}
		if err := json.Unmarshal(c.Arguments, &a); err != nil || a.Code == "" {
			return `error: python needs {"code": "..."}`
		}
		out, err := r.Python.RunPython(ctx, a.Code)
		if err != nil {
			return "error: python sandbox: " + err.Error()
		}
		return out
	}
	return fmt.Sprintf("error: unknown tool %q", c.Name)
}
