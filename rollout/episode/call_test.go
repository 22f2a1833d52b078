package episode_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/episode/episodetest"
)

func withModel(p episode.Policy, model string) episode.Policy {
	p.Model = model
	return p
}

// checkCall checks what a turn's trace will show of its call: the
// model that answered, a time span, and the prompt the engine was asked
// with, as messages.
func checkCall(t *testing.T, row int, tr data.Turn, model string, req engine.Request) {
	t.Helper()
	c := tr.Call
	if c.Model != model {
		t.Errorf("row %d: model %q, want %q", row, c.Model, model)
	}
	if c.Start.IsZero() || c.End.Before(c.Start) {
		t.Errorf("row %d: call from %v to %v, want a span", row, c.Start, c.End)
	}
	if len(c.Messages) != len(req.Messages) {
		t.Fatalf("row %d: %d prompt messages, want the request's %d", row, len(c.Messages), len(req.Messages))
	}
	for i, m := range req.Messages {
		if c.Messages[i] != (data.Message{Role: m.Role, Content: m.Content}) {
			t.Errorf("row %d: prompt message %d %+v, want %+v", row, i, c.Messages[i], m)
		}
	}
	if c.PromptBytes == 0 {
		t.Errorf("row %d: prompt of 0 bytes", row)
	}
}

// Every kind of episode records its turns' calls: the model of the policy
// that answered (MLMT's feedback turn: the feedback policy's), when the
// engine call ran, the prompt as sent, and the tools called.
func TestTurnsRecordTheirCalls(t *testing.T) {
	t.Run("mlmt", func(t *testing.T) {
		solver, teacher := episodetest.NewScriptedEngine(mlmtScript), episodetest.NewScriptedEngine(mlmtScript)
		fb := withModel(policy("feedback", teacher), "teacher-model")
		r, err := episode.NewMLMT(withModel(policy("solver", solver), "solver-model"), &fb, episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		turns, err := r.Run(ctx(t), episode.Batch{Examples: problems, N: 2})
		if err != nil {
			t.Fatal(err)
		}
		checkTurns(t, turns)
		sreqs, treqs := solver.Requests(), teacher.Requests()
		for k, tr := range turns {
			ex, ep := k/6, k/3
			switch tr.Turn {
			case 0:
				checkCall(t, k, tr, "solver-model", sreqs[ex])
			case 1:
				checkCall(t, k, tr, "teacher-model", treqs[ep])
			case 2:
				checkCall(t, k, tr, "solver-model", sreqs[len(problems)+ep])
			}
		}
	})
	t.Run("tool use", func(t *testing.T) {
		eng := episodetest.NewScriptedEngine(nil)
		eng.Reply = func(r engine.Request, _ int) string {
			if len(r.Prompt) > 0 {
				return "done \\boxed{5}"
			}
			if strings.Contains(r.Messages[0].Content, "2+3") {
				return `<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>`
			}
			return `<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>`
		}
		r, err := episode.NewToolUse(withModel(policy("solver", eng), "m"), episodetest.ExactVerifier{}, eng.Tok, nil, episode.Templates{}, episode.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		turns, err := r.Run(ctx(t), episode.Batch{Examples: problems, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		checkTurns(t, turns)
		want := []data.ToolCall{
			{Name: "calculator", Arguments: `{"expression": "2+3"}`, Result: "5"},
			{Name: "search", Arguments: `{"q": "x"}`, Result: `error: unknown tool "search"`, Error: `unknown tool "search"`},
		}
		for k, tr := range turns {
			checkCall(t, k, tr, "m", eng.Requests()[k])
			if len(tr.Call.Tools) != 1 {
				t.Fatalf("row %d: tools %+v, want one call", k, tr.Call.Tools)
			}
			got := tr.Call.Tools[0]
			if got.Start.Before(tr.Call.Start) || got.End.After(tr.Call.End) {
				t.Errorf("row %d: the tool ran %v–%v, outside its turn's %v–%v", k, got.Start, got.End, tr.Call.Start, tr.Call.End)
			}
			// The result's tokens are placed where the turn's mask is 0, and
			// nowhere else is.
			for i, m := range tr.LossMask {
				if in := int32(i) >= got.TokensFrom && int32(i) < got.TokensTo; in != (m == 0) {
					t.Errorf("row %d: token %d has mask %v, the tool result placed at [%d, %d)", k, i, m, got.TokensFrom, got.TokensTo)
				}
			}
			if got.TokensTo <= got.TokensFrom {
				t.Errorf("row %d: the tool result's tokens are not placed: [%d, %d)", k, got.TokensFrom, got.TokensTo)
			}
			got.Start, got.End, got.TokensFrom, got.TokensTo = want[k].Start, want[k].End, 0, 0
			if got != want[k] {
				t.Errorf("row %d: tool call %+v, want %+v", k, got, want[k])
			}
		}
	})
	t.Run("agent", func(t *testing.T) {
		eng := episodetest.NewScriptedEngine(nil)
		eng.Reply = teacher(eng)
		a := agent(eng, 0)
		a.Policy.Model = "actor-model"
		turns, err := a.Run(ctx(t), episode.Batch{Examples: []data.Example{{ID: "issue", Prompt: "3x + 5 = 14"}}, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		checkTurns(t, turns)
		byID := map[string]engine.Request{}
		for _, r := range eng.Requests() {
			byID[r.ID] = r
		}
		actions := []string{"identify_operation", "subtract_terms", "divide_terms", "state_answer"}
		for k, tr := range turns {
			id := "g0-a0"
			if k > 0 {
				id = fmt.Sprintf("%s-a%d", tr.EpisodeID, k)
			}
			checkCall(t, k, tr, "actor-model", byID[id])
			if len(tr.Call.Tools) != 1 || tr.Call.Tools[0].Name != actions[k] || tr.Call.Tools[0].Error != "" || tr.Call.Tools[0].Result == "" {
				t.Fatalf("row %d: tools %+v, want the action %s with the observation it returned", k, tr.Call.Tools, actions[k])
			}
			if k+1 < len(turns) && !strings.Contains(turns[k+1].Call.Messages[len(turns[k+1].Call.Messages)-1].Content, tr.Call.Tools[0].Result) {
				t.Errorf("row %d: the action's result %q is not the next prompt's observation", k, tr.Call.Tools[0].Result)
			}
		}
		if got := turns[3].Call.Tools[0].Arguments; got != "3" {
			t.Errorf("state_answer's argument %q, want 3", got)
		}
	})
	t.Run("agent invalid action", func(t *testing.T) {
		eng := episodetest.NewScriptedEngine(nil)
		eng.Reply = func(engine.Request, int) string { return "<action>fly</action>" }
		a := agent(eng, 1)
		turns, err := a.Run(ctx(t), episode.Batch{Examples: []data.Example{{ID: "issue", Prompt: "3x + 5 = 14"}}, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		if tc := turns[0].Call.Tools; len(tc) != 1 || tc[0].Name != "fly" || tc[0].Error == "" {
			t.Errorf("tools %+v, want fly refused with an error", tc)
		}
	})
}

// A single-turn episode's text prompt (a Prompter writing the model's
// format) is recorded as text, and a failed request's turn still records
// its prompt and time.
func TestTextPromptAndFailedCall(t *testing.T) {
	eng := episodetest.NewScriptedEngine(func(engine.Request, int) string { return "\\boxed{5}" })
	p := withModel(policy("solver", eng), "m")
	p.Tokenizer = eng.Tok
	r := &episode.SingleTurn{Solver: p, Prompter: textPrompter{}, Verifier: episodetest.ExactVerifier{}}
	turns, err := r.Run(ctx(t), episode.Batch{Examples: problems[:1], N: 2})
	if err != nil {
		t.Fatal(err)
	}
	for k, tr := range turns {
		if tr.Call.Prompt != "Q: What is 2+3?" || tr.Call.Messages != nil || tr.Call.Model != "m" || tr.Call.Start.IsZero() {
			t.Errorf("row %d: call %+v, want the text prompt", k, tr.Call)
		}
	}
	bad := &episode.SingleTurn{Solver: withModel(policy("solver", refusing{}), "m"), Prompter: textPrompter{}, Verifier: episodetest.ExactVerifier{}}
	bad.Solver.Tokenizer = eng.Tok
	turns, err = bad.Run(ctx(t), episode.Batch{Examples: problems[:1], N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c := turns[0].Call; turns[0].FinishReason != "error" || c.Prompt != "Q: What is 2+3?" || c.Start.IsZero() {
		t.Errorf("failed turn: %+v, call %+v; want its prompt and time recorded", turns[0], c)
	}
}

// refusing refuses every request as bad.
type refusing struct{}

func (refusing) Generate(context.Context, []engine.Request) ([]engine.Result, error) {
	return nil, fmt.Errorf("no: %w", engine.ErrBadRequest)
}
func (refusing) WeightVersion() int64 { return 0 }
func (refusing) Close() error         { return nil }

// finishing stamps each sample its engine returns with times from
// finished (given the Generate call's start and the sample's index in the
// call) for its start and its end, as an engine that says when it began
// each request and when each sequence was done.
type finishing struct {
	*episodetest.ScriptedEngine
	finished func(start time.Time, i int) time.Time
}

func (f finishing) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	start := time.Now()
	res, err := f.ScriptedEngine.Generate(ctx, reqs)
	i := 0
	for r := range res {
		for s := range res[r].Samples {
			// Each begun at its own time, and done one tick later.
			res[r].Samples[s].Started = f.finished(start, i)
			res[r].Samples[s].Finished = f.finished(start, i+1)
			i++
		}
	}
	// The call answers after its last sequence was done.
	for time.Since(start) <= time.Duration(i+1) {
	}
	return res, err
}

// The turns of one engine call start when the engine began their
// requests and end when their own sequences were done, as the engine
// says; where it does not (or names a time outside the call, another
// node's clock), they start when the call was sent and end with the call
// and say so (EndShared).
func TestCallsOfABatchStartAndEndWithTheirSequences(t *testing.T) {
	for _, c := range []struct {
		name     string
		finished func(start time.Time, i int) time.Time
		own      bool
	}{
		{"the engine's word", func(start time.Time, i int) time.Time { return start.Add(time.Duration(i)) }, true},
		{"no word", func(time.Time, int) time.Time { return time.Time{} }, false},
		{"another clock", func(start time.Time, i int) time.Time { return start.Add(-time.Hour) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng := finishing{episodetest.NewScriptedEngine(func(r engine.Request, k int) string { return strings.Repeat("x ", k+1) }), c.finished}
			r, err := episode.NewSingleTurn(policy("solver", eng), episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			turns, err := r.Run(ctx(t), episode.Batch{Examples: problems, N: 2})
			if err != nil || len(turns) != 4 {
				t.Fatalf("%d turns, %v", len(turns), err)
			}
			starts, ends := map[time.Time]bool{}, map[time.Time]bool{}
			for k, tr := range turns {
				starts[tr.Call.Start], ends[tr.Call.End] = true, true
				if tr.Call.EndShared == c.own || tr.Call.End.Before(tr.Call.Start) {
					t.Errorf("turn %d: %v–%v, end shared %v", k, tr.Call.Start, tr.Call.End, tr.Call.EndShared)
				}
			}
			if want := map[bool]int{true: 4, false: 1}[c.own]; len(ends) != want || len(starts) != want {
				t.Errorf("%d distinct starts and %d distinct ends among the batch's 4 turns, want %d", len(starts), len(ends), want)
			}
		})
	}
}
