package traces_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/episode/episodetest"
	"github.com/rlnode/rlnode/rollout/verify"
	"github.com/rlnode/rlnode/traces"
	"github.com/rlnode/rlnode/train"
)

// tracesOf groups spans into traces, in order of first appearance.
func tracesOf(spans []traces.Span) []traces.Trace {
	var out []traces.Trace
	for _, s := range spans {
		k := slices.IndexFunc(out, func(t traces.Trace) bool { return t.ID == s.TraceID })
		if k < 0 {
			out = append(out, traces.Trace{ID: s.TraceID})
			k = len(out) - 1
		}
		out[k].Spans = append(out[k].Spans, s)
	}
	return out
}

// storeRoundTrip writes spans to a new store and reads them back.
func storeRoundTrip(t *testing.T, spans []traces.Span) []traces.Trace {
	t.Helper()
	store := t.TempDir()
	w, err := traces.OpenWriter(store, traces.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(spans...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, skipped, err := traces.Load(store, traces.Any())
	if err != nil || len(skipped) > 0 {
		t.Fatal(err, skipped)
	}
	return got
}

// A tool episode's turn holds tool results between its engine calls. Its
// trace, through the store and back, trains exactly the tokens the engine
// sampled: the learner batch's mask is 0 at the places the tool spans
// give, whose tokens decode to the tool's result, and 1 elsewhere; the
// sample logprobs are the engine's.
func TestToolEpisodeTraceMasksToolResults(t *testing.T) {
	eng := episodetest.NewScriptedEngine(nil)
	eng.Reply = func(r engine.Request, _ int) string {
		if len(r.Prompt) > 0 {
			return "so \\boxed{5}"
		}
		return `<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>`
	}
	p := episode.Policy{ID: "solver", Engine: eng, Model: "m", Params: engine.SamplingParams{MaxTokens: 64, Temperature: 1}}
	r, err := episode.NewToolUse(p, episodetest.ExactVerifier{}, eng.Tok, nil, episode.Templates{}, episode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	turns, err := r.Run(ctx, episode.Batch{N: 2, Examples: []data.Example{{ID: "add", Prompt: "What is 2+3?", Ref: verify.Reference{Answer: "5"}}}})
	if err != nil || len(turns) != 2 {
		t.Fatalf("%d turns, %v", len(turns), err)
	}
	rows, dropped, err := traces.Trajectories(storeRoundTrip(t, traces.SpansFromTurns("run-t", 1, turns, 1, time.Now())),
		traces.TrajectoryOptions{Policy: "solver", Reward: "reward"})
	if err != nil || len(dropped) > 0 || len(rows) != 2 {
		t.Fatalf("%d rows, dropped %v: %v", len(rows), dropped, err)
	}
	b, err := train.BatchFromTrajectories("solver", rows, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Masks) != 2 {
		t.Fatalf("batch masks %v, want one per row with the tool results left out", b.Masks)
	}
	for i, tr := range turns {
		if len(tr.Call.Tools) != 1 {
			t.Fatalf("turn %d: tools %+v", i, tr.Call.Tools)
		}
		tool := tr.Call.Tools[0]
		if !slices.Equal(b.Responses[i], tr.ResponseIDs) || !slices.Equal(b.SampleLogProbs[i], tr.LogProbs) || !slices.Equal(b.Masks[i], tr.LossMask) {
			t.Errorf("row %d: ids %v logprobs %v mask %v;\nthe episode's %v %v %v", i, b.Responses[i], b.SampleLogProbs[i], b.Masks[i], tr.ResponseIDs, tr.LogProbs, tr.LossMask)
		}
		var left []int
		for k, m := range b.Masks[i] {
			if m == 0 {
				left = append(left, k)
			}
		}
		from, to := int(tool.TokensFrom), int(tool.TokensTo)
		if len(left) == 0 || left[0] != from || left[len(left)-1] != to-1 || len(left) != to-from {
			t.Errorf("row %d: mask 0 at %v, want exactly [%d, %d)", i, left, from, to)
		}
		placed := eng.Tok.Decode(intsOf(b.Responses[i][from:to]))
		if !strings.Contains(placed, tool.Result) || strings.Contains(placed, "boxed") || strings.Contains(placed, "<tool_call>") {
			t.Errorf("row %d: the masked tokens read %q, want the tool's result %q and nothing the model wrote", i, placed, tool.Result)
		}
		// Both engine calls' tokens carry loss: the call before the tool
		// and the answer after it.
		if before, after := eng.Tok.Decode(intsOf(b.Responses[i][:from])), eng.Tok.Decode(intsOf(b.Responses[i][to:])); !strings.Contains(before, "<tool_call>") || !strings.Contains(after, "boxed{5}") {
			t.Errorf("row %d: trained tokens %q | %q, want the tool call and the answer", i, before, after)
		}
	}
}

func intsOf(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

// agentTrace is a multi-call agent's trace as the proxy records it: three
// calls of the policy model, a calculator run between the first two and a
// user message inserted before the third (each reaching the next call's
// prompt), and a judge model's call at the end.
func agentTrace() (spans []traces.Span, completions [][]int32, inserted []int32) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	span := func(i int, op string, start time.Duration) traces.Span {
		s := traces.NewSpan()
		s.TraceID, s.SpanID, s.Operation = [16]byte{0xa7}, [8]byte{byte(i + 1)}, op
		s.Start, s.End = t0.Add(start), t0.Add(start+time.Second)
		return s
	}
	call := func(i int, model string, start time.Duration, prompt, out []int32) traces.Span {
		s := span(i, traces.OpChat, start)
		s.RequestModel, s.ResponseModel = model, model
		s.PromptTokenIDs, s.OutputTokenIDs = prompt, out
		s.OutputLogprobs = make([]float32, len(out))
		for k := range out {
			s.OutputLogprobs[k] = -0.5
		}
		s.InputTokens, s.OutputTokens = int64(len(prompt)), int64(len(out))
		s.OutputMessages = `[{"role":"assistant","parts":[{"type":"text","content":"x"}]}]`
		return s
	}
	system := []int32{1, 2, 3}
	c1, toolOut, c2, user, c3 := []int32{10, 11, 12}, []int32{50, 51}, []int32{20, 21}, []int32{60, 61, 62}, []int32{30}
	p2 := slices.Concat(system, c1, toolOut)
	p3 := slices.Concat(p2, c2, user)
	root := span(0, traces.OpInvokeAgent, 0)
	root.End = t0.Add(time.Minute)
	root.Rewards = []traces.Reward{{Name: "judge", Value: 1}}
	tool := span(2, traces.OpExecuteTool, 2*time.Second)
	tool.ToolName, tool.ToolResult = "calculator", "5"
	spans = []traces.Span{root,
		call(1, "policy", time.Second, system, c1), tool,
		call(3, "policy", 4*time.Second, p2, c2),
		call(4, "policy", 6*time.Second, p3, c3),
		call(5, "judge", 8*time.Second, slices.Concat(p3, c3), []int32{70, 71})}
	for i := 1; i < len(spans); i++ {
		spans[i].ParentID = root.SpanID
	}
	return spans, [][]int32{c1, c2, c3}, slices.Concat(toolOut, user, []int32{70, 71})
}

// An agent trace with tool calls trains exactly the policy model's
// completions: the batch's loss-carrying tokens (mask 1) are the three
// calls' answers, with their logprobs; the tool's output, the inserted user
// message and the judge's answer carry none. Each call's prompt extends
// the one before it with its answer, so by default the three calls are
// one row (the tool's output and the user's message inside it, masked);
// PerCall gives a row each. Without the model named, the trace with the
// judge's call is refused.
func TestAgentTraceTrainsTheCompletions(t *testing.T) {
	spans, completions, inserted := agentTrace()
	got := storeRoundTrip(t, spans)
	for _, perCall := range []bool{false, true} {
		built, err := traces.Build(got, traces.TrajectoryOptions{Policy: "solver", Reward: "judge", Model: "policy", PerCall: perCall})
		wantRows := 1
		if perCall {
			wantRows = 3
		}
		if err != nil || len(built.Dropped) > 0 || len(built.Turns) != wantRows || built.Calls != 3 || len(built.Splits) != 0 {
			t.Fatalf("per call %v: %+v: %v; want %d rows of 3 calls, none split", perCall, built, err, wantRows)
		}
		b, err := train.BatchFromTrajectories("solver", built.Turns, nil)
		if err != nil {
			t.Fatal(err)
		}
		var trained, untrained [][]int32
		for i := range b.Responses {
			var ids, not []int32
			for k, id := range b.Responses[i] {
				if b.Masks == nil || b.Masks[i][k] == 1 {
					ids = append(ids, id)
					if lp := b.SampleLogProbs[i][k]; lp != -0.5 {
						t.Errorf("per call %v row %d token %d: sample logprob %v, want the completion's", perCall, i, k, lp)
					}
					continue
				}
				not = append(not, id)
				if lp := b.SampleLogProbs[i][k]; lp != 0 {
					t.Errorf("per call %v row %d token %d (inserted): sample logprob %v, want 0", perCall, i, k, lp)
				}
			}
			trained, untrained = append(trained, ids), append(untrained, not)
		}
		if perCall {
			if !slices.EqualFunc(trained, completions, slices.Equal) {
				t.Errorf("tokens with loss %v, want the policy's completions %v", trained, completions)
			}
			for i, not := range untrained {
				if len(not) > 0 {
					t.Errorf("row %d: response holds tokens the policy did not write: %v", i, not)
				}
			}
			// Each row's prompt is what its call saw: the tool's output and
			// the user's message are context there.
			if !slices.Equal(b.Prompts[1], spans[3].PromptTokenIDs) || !slices.Equal(b.Prompts[2], spans[4].PromptTokenIDs) {
				t.Errorf("prompts %v, want the calls' own", b.Prompts)
			}
			continue
		}
		// The merged row is the last call's prompt and answer, token for
		// token: each answer sits where its call saw it.
		if whole := slices.Concat(b.Prompts[0], b.Responses[0]); !slices.Equal(whole, slices.Concat(spans[4].PromptTokenIDs, completions[2])) ||
			!slices.Equal(b.Prompts[0], spans[1].PromptTokenIDs) {
			t.Errorf("merged row %v | %v, want the first call's prompt, then the conversation to the last answer", b.Prompts[0], b.Responses[0])
		}
		if want := slices.Concat(completions...); !slices.Equal(trained[0], want) {
			t.Errorf("tokens with loss %v, want the policy's completions %v", trained[0], want)
		}
		if want := inserted[:len(inserted)-2]; !slices.Equal(untrained[0], want) { // not the judge's answer: it comes after
			t.Errorf("tokens without loss %v, want the tool's output and the user's message %v", untrained[0], want)
		}
	}

	_, _, err := traces.Trajectories(got, traces.TrajectoryOptions{Policy: "solver", Reward: "judge"})
	var ae *traces.AlignmentError
	if !errors.As(err, &ae) || !slices.Equal(ae.Models, []string{"policy", "judge"}) || ae.Span != spans[5].SpanID.String() ||
		!strings.Contains(err.Error(), "trace "+spans[0].TraceID.String()) {
		t.Errorf("no model named: %v, want the trace refused at the judge's call, naming both models", err)
	}
	judged, _, err := traces.Trajectories(got, traces.TrajectoryOptions{Policy: "judge", Reward: "judge", Model: "judge"})
	if err != nil || len(judged) != 1 || !slices.Equal(judged[0].ResponseIDs, []int32{70, 71}) {
		t.Errorf("the judge's rows %+v: %v, want its one call", judged, err)
	}
}

// toolTurnSpans is a run's tool-episode turn recorded as spans: engine
// calls wrote 3 and 2 tokens with a calculator's 2-token result between.
func toolTurnSpans() []traces.Span {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	turn := data.Turn{EpisodeID: "g0-s0", PolicyID: "solver", PromptIDs: []int32{1, 2}, ResponseIDs: []int32{11, 12, 13, 90, 91, 14, 15},
		LogProbs: []float32{-1, -1, -1, 0, 0, -1, -1}, LossMask: []float32{1, 1, 1, 0, 0, 1, 1}, FinishReason: "stop", ResponseText: "x",
		Call: data.Call{Model: "m", Start: t0, End: t0.Add(3 * time.Second), Prompt: "p", PromptBytes: 1,
			Tools: []data.ToolCall{{Name: "calculator", Result: "5", Start: t0.Add(time.Second), End: t0.Add(2 * time.Second), TokensFrom: 3, TokensTo: 5}}}}
	return traces.SpansFromTurns("run-m", 1, []data.Turn{turn}, 1, t0.Add(time.Minute))
}

// A trace whose pieces do not line up with the call's token ids is
// refused, naming the span at fault, rather than trained with a guessed
// mask.
func TestTrajectoriesRefuseMisalignedTraces(t *testing.T) {
	const call, tool = 1, 2 // toolTurnSpans: root, the call, its tool
	if s := toolTurnSpans(); s[call].Operation != traces.OpTextCompletion || s[tool].Operation != traces.OpExecuteTool {
		t.Fatalf("spans %v", s)
	}
	placeAt := func(from, to int) string {
		return fmt.Sprintf(`{"rlnode.inserted_tokens.start":%d,"rlnode.inserted_tokens.end":%d}`, from, to)
	}
	for _, c := range []struct {
		name   string
		change func([]traces.Span) []traces.Span
		span   int
		msg    string
	}{
		{"recorded before results were placed", func(s []traces.Span) []traces.Span {
			s[call].Attributes, s[tool].Attributes = "", ""
			return s
		}, call, "ran while the call was generating and does not say which of the 7 output tokens hold its result"},
		{"place past the output", func(s []traces.Span) []traces.Span { s[tool].Attributes = placeAt(6, 9); return s }, call,
			"places its result at output tokens [6, 9), past the 7 recorded"},
		{"not a range", func(s []traces.Span) []traces.Span { s[tool].Attributes = placeAt(3, 3); return s }, tool,
			"is not a range [start, end)"},
		{"count the places do not give", func(s []traces.Span) []traces.Span { s[tool].Attributes = placeAt(3, 4); return s }, call,
			"2 of its output tokens are not the model's (rlnode.inserted_tokens), but its tools' results are placed at 1"},
		{"place over sampled tokens", func(s []traces.Span) []traces.Span { s[tool].Attributes = placeAt(2, 4); return s }, call,
			"token 2 has sampled logprob -1"},
		{"places overlap", func(s []traces.Span) []traces.Span {
			second := s[tool]
			second.SpanID = [8]byte{0xee}
			second.Attributes = placeAt(4, 5)
			return append(s, second)
		}, call, "over another tool's"},
		{"no call around the place", func(s []traces.Span) []traces.Span {
			s[tool].Start, s[tool].End = s[call].End.Add(time.Second), s[call].End.Add(2*time.Second)
			return s
		}, tool, "no model call of its turn ran around it"},
		{"logprobs of another length", func(s []traces.Span) []traces.Span { s[call].OutputLogprobs = s[call].OutputLogprobs[:6]; return s }, call,
			"6 logprobs recorded for 7 output token ids"},
		{"usage of another length", func(s []traces.Span) []traces.Span { s[call].InputTokens = 3; return s }, call,
			"its usage says 3 input tokens, but 2 prompt token ids are recorded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spans := c.change(toolTurnSpans())
			rows, _, err := traces.Trajectories(tracesOf(spans), traces.TrajectoryOptions{Policy: "solver", Reward: "reward"})
			var ae *traces.AlignmentError
			if !errors.As(err, &ae) || ae.Span != spans[c.span].SpanID.String() || ae.Trace != spans[0].TraceID.String() || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("%d rows, err %v; want the trace refused at span %s: …%s…", len(rows), err, spans[c.span].SpanID, c.msg)
			}
		})
	}
	// Unchanged, the same spans give the turn's mask.
	rows, _, err := traces.Trajectories(tracesOf(toolTurnSpans()), traces.TrajectoryOptions{Policy: "solver", Reward: "reward"})
	if err != nil || len(rows) != 1 || !slices.Equal(rows[0].LossMask, []float32{1, 1, 1, 0, 0, 1, 1}) {
		t.Fatalf("%+v, %v", rows, err)
	}
}

// With SkipRefused a refused trace is dropped, said why, and the other
// traces still give their rows; without it the whole call fails.
func TestTrajectoriesSkipRefused(t *testing.T) {
	const call = 1
	good, bad := toolTurnSpans(), toolTurnSpans()
	for i := range bad {
		bad[i].TraceID[0] ^= 0xff // another trace
	}
	bad[call].OutputLogprobs = bad[call].OutputLogprobs[:6]
	ts := append(tracesOf(good), tracesOf(bad)...)
	if len(ts) != 2 {
		t.Fatalf("%d traces, want 2", len(ts))
	}
	opt := traces.TrajectoryOptions{Policy: "solver", Reward: "reward"}
	if rows, _, err := traces.Trajectories(ts, opt); err == nil {
		t.Fatalf("%d rows and no error without SkipRefused", len(rows))
	}
	opt.SkipRefused = true
	rows, dropped, err := traces.Trajectories(ts, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].EpisodeID != good[0].TraceID.String() {
		t.Errorf("rows %+v, want the good trace's one", rows)
	}
	if len(dropped) != 1 || dropped[0].Trace != bad[0].TraceID.String() || dropped[0].Span != bad[call].SpanID.String() ||
		!dropped[0].Refused || !strings.HasPrefix(dropped[0].Why, "refused: ") || !strings.Contains(dropped[0].Why, "6 logprobs recorded for 7") {
		t.Errorf("dropped %+v, want the bad trace refused at its call", dropped)
	}
}

// A tool episode whose call after the tool is refused (its context full)
// keeps the tool's result in the turn, masked: the turn runs to the
// refused call's answer, so its trace still places the result inside it.
func TestToolEpisodeTraceWithRefusedFollowUp(t *testing.T) {
	eng := episodetest.NewScriptedEngine(nil)
	eng.Reply = func(r engine.Request, _ int) string {
		if len(r.Prompt) > 0 {
			return episodetest.Refuse
		}
		return `<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>`
	}
	p := episode.Policy{ID: "solver", Engine: eng, Model: "m", Params: engine.SamplingParams{MaxTokens: 64, Temperature: 1}}
	r, err := episode.NewToolUse(p, episodetest.ExactVerifier{}, eng.Tok, nil, episode.Templates{}, episode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	turns, err := r.Run(ctx, episode.Batch{N: 1, Examples: []data.Example{{ID: "add", Prompt: "What is 2+3?", Ref: verify.Reference{Answer: "5"}}}})
	if err != nil || len(turns) != 1 || len(turns[0].Call.Tools) != 1 {
		t.Fatalf("%d turns, %v", len(turns), err)
	}
	if tr := turns[0]; tr.Call.End.Before(tr.Call.Tools[0].End) || !tr.Call.EndShared {
		t.Errorf("turn %v–%v (shared %v), its tool %v–%v: want the turn to run past the tool", tr.Call.Start, tr.Call.End, tr.Call.EndShared,
			tr.Call.Tools[0].Start, tr.Call.Tools[0].End)
	}
	rows, _, err := traces.Trajectories(storeRoundTrip(t, traces.SpansFromTurns("run-t", 1, turns, 1, time.Now())),
		traces.TrajectoryOptions{Policy: "solver", Reward: "reward"})
	if err != nil || len(rows) != 1 || !slices.Equal(rows[0].LossMask, turns[0].LossMask) || !slices.Contains(rows[0].LossMask, 0) {
		t.Fatalf("rows %+v: %v; want the turn's mask %v", rows, err, turns[0].LossMask)
	}
}
