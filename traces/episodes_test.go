package traces

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
)

func TestSpansFromTurnsRoundTrip(t *testing.T) {
	var turns []data.Turn
	for ep := range 40 {
		for k := range 2 {
			turns = append(turns, data.Turn{EpisodeID: "e" + string(rune('a'+ep%26)) + string(rune('0'+ep/26)), GroupID: int64(ep / 4), Sample: int32(ep % 4),
				Turn: int32(k), PolicyID: "solver", WeightVersion: 3, PromptIDs: []int32{1, 2, int32(ep)}, ResponseIDs: []int32{int32(k), 9},
				LogProbs: []float32{-0.5, -0.25}, LossMask: []float32{1, 1}, Reward: float64(k), FinalReward: 1, FinishReason: "stop", ResponseText: "x"})
		}
	}
	end := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spans := SpansFromTurns("run-a", 7, turns, 1, end)
	if len(spans) != 40*3 {
		t.Fatalf("%d spans, want 40 roots and 80 turns", len(spans))
	}
	byTrace := map[[16]byte]*Trace{}
	var order []Trace
	for _, s := range spans {
		if byTrace[s.TraceID] == nil {
			order = append(order, Trace{ID: s.TraceID})
			byTrace[s.TraceID] = &order[len(order)-1]
		}
	}
	for _, s := range spans {
		for i := range order {
			if order[i].ID == s.TraceID {
				order[i].Spans = append(order[i].Spans, s)
			}
		}
	}
	back, dropped, err := Trajectories(order, TrajectoryOptions{Policy: "solver", Reward: "reward"})
	if err != nil || len(dropped) > 0 || len(back) != len(turns) {
		t.Fatalf("%d rows back, dropped %v", len(back), dropped)
	}
	for i := range turns {
		w, g := turns[i], back[i]
		if !reflect.DeepEqual([]any{g.PromptIDs, g.ResponseIDs, g.LogProbs, g.Turn, g.WeightVersion, g.Reward, g.EpisodeID},
			[]any{w.PromptIDs, w.ResponseIDs, w.LogProbs, w.Turn, w.WeightVersion, w.Reward, turnsTraceID(spans, i)}) {
			t.Fatalf("row %d back %+v, want %+v", i, g, w)
		}
	}
	// Sampling keeps whole episodes, the same ones each time.
	half := SpansFromTurns("run-a", 7, turns, 0.5, end)
	again := SpansFromTurns("run-a", 7, turns, 0.5, end)
	if !reflect.DeepEqual(half, again) || len(half)%3 != 0 || len(half) == 0 || len(half) == len(spans) {
		t.Errorf("sampled half: %d spans (of %d), repeatable %v", len(half), len(spans), reflect.DeepEqual(half, again))
	}
	if n := len(SpansFromTurns("run-a", 7, turns, 0, end)); n != 0 {
		t.Errorf("sample 0 kept %d spans", n)
	}
}

// turnsTraceID is the trace id of the i-th turn's span (roots come first
// in each episode).
func turnsTraceID(spans []Span, i int) string {
	n := -1
	for _, s := range spans {
		if s.Operation == OpTextCompletion {
			n++
			if n == i {
				return s.TraceID.String()
			}
		}
	}
	return ""
}

// TestRedoneStepReplacesItsEpisodes: a step redone after a restart or
// --resume records its episodes again under the same trace ids; what the
// run trained on is the later recording, which is read in place of the
// earlier one whole. The earlier copy was kept (first copy in write
// order), and its turns the redone episode did not have were mixed into
// the trace: a trajectory export held turns the run never trained on.
func TestRedoneStepReplacesItsEpisodes(t *testing.T) {
	root := t.TempDir()
	turn := func(ep string, k int32, text string) data.Turn {
		return data.Turn{EpisodeID: ep, GroupID: 0, Turn: k, PolicyID: "solver", WeightVersion: 3, PromptIDs: []int32{1, 2},
			ResponseIDs: []int32{7, int32(k)}, LogProbs: []float32{-0.5, -0.25}, LossMask: []float32{1, 1}, FinishReason: "stop", ResponseText: text}
	}
	first := []data.Turn{turn("g0-s0", 0, "first"), turn("g0-s0", 1, "first"), turn("g0-s1", 0, "first")}
	redone := []data.Turn{turn("g0-s0", 0, "redone"), turn("g0-s1", 0, "redone")}
	end := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, turns := range [][]data.Turn{first, redone} {
		w, err := OpenWriter(root, WriterOptions{FlushInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Add(SpansFromTurns("run-a", 5, turns, 1, end.Add(time.Duration(i)*time.Minute))...); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got, skipped, err := Load(root, Any())
	if err != nil || len(skipped) > 0 {
		t.Fatal(err, skipped)
	}
	if len(got) != 2 {
		t.Fatalf("%d traces, want the 2 episodes", len(got))
	}
	for _, tr := range got {
		if len(tr.Spans) != 2 {
			t.Errorf("trace %s: %d spans, want the redone recording's root and one turn", tr.Root().ConversationID, len(tr.Spans))
		}
		for _, s := range tr.Spans {
			if s.Operation == OpTextCompletion && !strings.Contains(s.OutputMessages, "redone") {
				t.Errorf("trace %s turn %d: %s, want the redone step's", tr.Root().ConversationID, s.Turn, s.OutputMessages)
			}
		}
	}
	rows, _, err := Trajectories(got, TrajectoryOptions{Policy: "solver", Reward: "reward"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Errorf("%d trajectory rows, want the redone step's 2", len(rows))
	}
}

// A turn's Call becomes what serve records of a call: the model in the
// span's name and request/response model, the engine call's start and end,
// the prompt as input messages (text as one user message, a chat's
// messages as they were), a cut prompt marked, and each tool call as an
// execute_tool span beside the model calls; the root spans its episode's
// calls and tools.
// Rows without a Call (read from older files) keep the step's end.
func TestSpansFromTurnsCarryCalls(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC)
	end := t0.Add(time.Minute)
	turns := []data.Turn{
		{EpisodeID: "g0-s0", Turn: 0, PolicyID: "solver", PromptIDs: []int32{1}, ResponseIDs: []int32{2}, LogProbs: []float32{-1}, LossMask: []float32{1},
			FinishReason: "stop", ResponseText: "a",
			Call: data.Call{Model: "Qwen/Qwen2.5-0.5B", Start: t0, End: t0.Add(200 * time.Millisecond), Prompt: "What is 2+3?", PromptBytes: 12}},
		{EpisodeID: "g0-s0", Turn: 1, PolicyID: "feedback", PromptIDs: []int32{1}, ResponseIDs: []int32{2}, LogProbs: []float32{-1}, LossMask: []float32{1},
			FinishReason: "stop", ResponseText: "b",
			Call: data.Call{Model: "teacher", Start: t0.Add(time.Second), End: t0.Add(3 * time.Second), EndShared: true,
				Messages: []data.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u" + data.CutMark}}, PromptBytes: 90000,
				Tools: []data.ToolCall{
					{Name: "calculate", Arguments: "2+3", Result: "5", Start: t0.Add(1500 * time.Millisecond), End: t0.Add(1600 * time.Millisecond)},
					{Name: "python", Arguments: "1/0", Error: "sandbox: killed", Start: t0.Add(2 * time.Second), End: t0.Add(2500 * time.Millisecond)}}}},
		{EpisodeID: "g1-s0", Turn: 0, PolicyID: "solver", PromptIDs: []int32{1}, ResponseIDs: []int32{2}, LogProbs: []float32{-1}, LossMask: []float32{1},
			FinishReason: "stop", ResponseText: "c"},
	}
	spans := SpansFromTurns("run-b", 3, turns, 1, end)
	type want struct {
		name, op, model, parent, input, attrs, tool, result, status string
		start, end                                                  time.Time
	}
	wants := []want{
		{name: "invoke_agent solver", op: OpInvokeAgent, start: t0, end: t0.Add(3 * time.Second)},
		{name: "text_completion Qwen/Qwen2.5-0.5B", op: OpTextCompletion, model: "Qwen/Qwen2.5-0.5B", parent: "root",
			input: `[{"role":"user","parts":[{"type":"text","content":"What is 2+3?"}]}]`, start: t0, end: t0.Add(200 * time.Millisecond)},
		{name: "chat teacher", op: OpChat, model: "teacher", parent: "root", attrs: `{"rlnode.call.end_shared":true,"rlnode.record.truncated":true}`,
			input: `[{"role":"system","parts":[{"type":"text","content":"s"}]},{"role":"user","parts":[{"type":"text","content":"u[... cut]"}]}]`,
			start: t0.Add(time.Second), end: t0.Add(3 * time.Second)},
		{name: "execute_tool calculate", op: OpExecuteTool, parent: "root", tool: "calculate", result: "5", status: "unset",
			start: t0.Add(1500 * time.Millisecond), end: t0.Add(1600 * time.Millisecond)},
		{name: "execute_tool python", op: OpExecuteTool, parent: "root", tool: "python", status: "error",
			start: t0.Add(2 * time.Second), end: t0.Add(2500 * time.Millisecond)},
		{name: "invoke_agent solver", op: OpInvokeAgent, start: end, end: end},
		{name: "text_completion solver", op: OpTextCompletion, parent: "root", start: end, end: end},
	}
	if len(spans) != len(wants) {
		t.Fatalf("%d spans, want %d", len(spans), len(wants))
	}
	parents := map[string]Span{"root": spans[0], "chat": spans[2]}
	for i, w := range wants {
		s := spans[i]
		if i == 6 {
			parents["root"] = spans[5]
		}
		if s.Name != w.name || s.Operation != w.op || s.RequestModel != w.model || s.ResponseModel != w.model ||
			s.InputMessages != w.input || s.Attributes != w.attrs || !s.Start.Equal(w.start) || !s.End.Equal(w.end) {
			t.Errorf("span %d: %q op %q model %q/%q input %s attrs %q %v–%v;\nwant %+v", i, s.Name, s.Operation, s.RequestModel, s.ResponseModel,
				s.InputMessages, s.Attributes, s.Start, s.End, w)
		}
		if w.parent != "" && (s.ParentID != parents[w.parent].SpanID || s.TraceID != parents[w.parent].TraceID) {
			t.Errorf("span %d: parent %s, want the %s span %s", i, s.ParentID, w.parent, parents[w.parent].SpanID)
		}
		if w.op == OpExecuteTool && (s.ToolName != w.tool || s.ToolResult != w.result || s.Status.String() != w.status ||
			s.RunID != "run-b" || s.Turn != 1 || s.ConversationID != "g0-s0" || s.ToolCallID == "") {
			t.Errorf("span %d: tool %q result %q status %s run %q turn %d conversation %q call id %q", i, s.ToolName, s.ToolResult, s.Status,
				s.RunID, s.Turn, s.ConversationID, s.ToolCallID)
		}
	}
	if spans[4].StatusMessage != "sandbox: killed" || !spans[4].Failed() {
		t.Errorf("failed tool: status message %q", spans[4].StatusMessage)
	}
	// Tool spans are not model calls. The first episode holds calls of two
	// models: which one trains must be named; the solver's model gives its
	// one turn; the teacher's turn had tools run while it generated and no
	// word of where their results went, so it is refused.
	var tr []Trace
	for _, s := range spans {
		if len(tr) == 0 || tr[len(tr)-1].ID != s.TraceID {
			tr = append(tr, Trace{ID: s.TraceID})
		}
		tr[len(tr)-1].Spans = append(tr[len(tr)-1].Spans, s)
	}
	var ae *AlignmentError
	_, _, err := Trajectories(tr, TrajectoryOptions{Policy: "solver", Reward: "reward"})
	if !errors.As(err, &ae) || !slices.Equal(ae.Models, []string{"Qwen/Qwen2.5-0.5B", "teacher"}) || ae.Span != spans[2].SpanID.String() {
		t.Errorf("no model named: %v, want the trace refused naming both models at the teacher's call", err)
	}
	rows, dropped, err := Trajectories(tr, TrajectoryOptions{Policy: "solver", Reward: "reward", Model: "Qwen/Qwen2.5-0.5B"})
	if err != nil || len(rows) != 1 || len(dropped) != 0 || rows[0].Call.Model != "Qwen/Qwen2.5-0.5B" {
		t.Errorf("%d rows, dropped %v, err %v; want the solver model's one turn", len(rows), dropped, err)
	}
	_, _, err = Trajectories(tr, TrajectoryOptions{Policy: "solver", Reward: "reward", Model: "teacher"})
	if !errors.As(err, &ae) || ae.Span != spans[2].SpanID.String() || !strings.Contains(ae.Why, spans[3].SpanID.String()) ||
		!strings.Contains(ae.Why, "ran while the call was generating") {
		t.Errorf("teacher: %v, want its call refused naming the calculator's span", err)
	}
}
