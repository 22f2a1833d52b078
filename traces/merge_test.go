package traces_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/traces"
)

// A call whose prompt does not extend the row of the calls before it
// token for token, or that another model answered, other weights sampled
// or another reward credits, starts a row of its own, and Build says
// which call and why; the calls before it stay merged.
func TestBuildSplitsWhereTheConversationBreaks(t *testing.T) {
	const third = 4 // agentTrace: root, call, tool, call, call, judge
	for _, c := range []struct {
		name   string
		change func(s []traces.Span)
		reason traces.SplitReason
		why    string
	}{
		{"context cut to its last tokens", func(s []traces.Span) { s[third].PromptTokenIDs = s[third].PromptTokenIDs[5:] },
			traces.SplitPrefix, "its prompt has 8 tokens, fewer than the 10 of the conversation so far"},
		{"context cut by as many tokens as the new ones", func(s []traces.Span) { s[third].PromptTokenIDs = s[third].PromptTokenIDs[3:] },
			traces.SplitPrefix, "its prompt token 0 is 10 where the conversation so far has 1"},
		{"system prompt rewritten", func(s []traces.Span) { s[third].PromptTokenIDs[1] = 9 },
			traces.SplitPrefix, "its prompt token 1 is 9 where the conversation so far has 2"},
		{"an earlier answer re-rendered", func(s []traces.Span) { s[third].PromptTokenIDs[8] = 29 },
			traces.SplitPrefix, "its prompt token 8 is 29 where the conversation so far has 20"},
		{"another model answered", func(s []traces.Span) { s[third].ResponseModel = "policy-v2" },
			traces.SplitModel, `a call of "policy-v2" after calls of "policy"`},
		{"other weights sampled it", func(s []traces.Span) { s[third].WeightVersion = 7 },
			traces.SplitVersion, "weight version 7 after 0"},
		{"its own reward", func(s []traces.Span) { s[third].Rewards = []traces.Reward{{Name: "judge", Value: 0.5}} },
			traces.SplitReward, "reward 0.5 after 1.5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spans, completions, _ := agentTrace()
			for i := range spans {
				spans[i].PromptTokenIDs = slices.Clone(spans[i].PromptTokenIDs)
			}
			c.change(spans)
			spans[third].InputTokens = int64(len(spans[third].PromptTokenIDs))
			b, err := traces.Build(tracesOf(spans), traces.TrajectoryOptions{Policy: "solver", Reward: "judge", Model: "policy"})
			if err != nil || len(b.Turns) != 2 || b.Calls != 3 {
				t.Fatalf("%+v: %v; want 2 rows of 3 calls", b, err)
			}
			want := traces.Split{Trace: spans[0].TraceID.String(), Span: spans[third].SpanID.String(), Reason: c.reason}
			if len(b.Splits) != 1 || b.Splits[0].Trace != want.Trace || b.Splits[0].Span != want.Span || b.Splits[0].Reason != want.Reason ||
				!strings.Contains(b.Splits[0].Why, c.why) {
				t.Fatalf("splits %+v, want one at the third call: %s, %q", b.Splits, c.reason, c.why)
			}
			first, second := b.Turns[0], b.Turns[1]
			if !slices.Equal(slices.Concat(first.PromptIDs, first.ResponseIDs), slices.Concat(spans[3].PromptTokenIDs, completions[1])) {
				t.Errorf("first row %v | %v, want the first two calls merged", first.PromptIDs, first.ResponseIDs)
			}
			if second.Turn != 1 || !slices.Equal(second.PromptIDs, spans[third].PromptTokenIDs) || !slices.Equal(second.ResponseIDs, completions[2]) ||
				!slices.Equal(second.LossMask, []float32{1}) {
				t.Errorf("second row: turn %d, %v | %v mask %v; want turn 1, the third call's own", second.Turn, second.PromptIDs, second.ResponseIDs, second.LossMask)
			}
			if first.GroupID != second.GroupID || first.Sample != second.Sample || first.EpisodeID != second.EpisodeID {
				t.Errorf("rows of one trace in groups %d/%d, samples %d/%d", first.GroupID, second.GroupID, first.Sample, second.Sample)
			}
		})
	}
}

// Agents that take turns in one trace (conversations interleaved) each
// merge into their own row: a call joins the latest row its prompt
// extends, among the trace's last 8. A conversation 9 rows back is not
// searched, and its call starts a row.
func TestBuildMergesInterleavedConversations(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	var spans []traces.Span
	call := func(prompt, answer []int32) {
		s := traces.NewSpan()
		s.TraceID, s.SpanID, s.Operation = [16]byte{0xb1}, [8]byte{byte(len(spans) + 1)}, traces.OpChat
		s.RequestModel, s.ResponseModel = "policy", "policy"
		s.Start = t0.Add(time.Duration(len(spans)) * time.Second)
		s.End = s.Start.Add(time.Second / 2)
		s.PromptTokenIDs, s.OutputTokenIDs = prompt, answer
		s.OutputMessages = `[{"role":"assistant","parts":[{"type":"text","content":"x"}]}]`
		spans = append(spans, s)
	}
	// Conversations a and b: a1, b1, a2, b2, a3, each prompt its own
	// conversation's so far and a new message.
	a1, b1 := []int32{1, 2}, []int32{5, 6}
	call(a1, []int32{10})
	call(b1, []int32{20})
	a2 := slices.Concat(a1, []int32{10, 3})
	call(a2, []int32{11})
	b2 := slices.Concat(b1, []int32{20, 7})
	call(b2, []int32{21})
	call(slices.Concat(a2, []int32{11, 4}), []int32{12})
	b, err := traces.Build(tracesOf(spans), traces.TrajectoryOptions{Policy: "solver", KeepUnrewarded: true})
	if err != nil || len(b.Turns) != 2 || b.Calls != 5 {
		t.Fatalf("%+v: %v; want conversations a and b as 2 rows of 5 calls", b, err)
	}
	if len(b.Splits) != 1 || b.Splits[0].Span != spans[1].SpanID.String() || b.Splits[0].Reason != traces.SplitPrefix {
		t.Errorf("splits %+v, want b's first call only", b.Splits)
	}
	a, bb := b.Turns[0], b.Turns[1]
	if !slices.Equal(a.ResponseIDs, []int32{10, 3, 11, 4, 12}) || !slices.Equal(a.LossMask, []float32{1, 0, 1, 0, 1}) ||
		!slices.Equal(bb.ResponseIDs, []int32{20, 7, 21}) || !slices.Equal(bb.LossMask, []float32{1, 0, 1}) || bb.Turn != 1 {
		t.Errorf("rows %v %v | %v %v, want a's three answers and b's two", a.ResponseIDs, a.LossMask, bb.ResponseIDs, bb.LossMask)
	}

	// Nine conversations' first calls, then the first one's second: its
	// row is 9 back.
	spans = nil
	for k := range 9 {
		call([]int32{int32(k + 1)}, []int32{30})
	}
	call([]int32{1, 30, 2}, []int32{31})
	b, err = traces.Build(tracesOf(spans), traces.TrajectoryOptions{Policy: "solver", KeepUnrewarded: true})
	if err != nil || len(b.Turns) != 10 || len(b.Splits) != 9 {
		t.Fatalf("%d rows, %d splits: %v; want 10 rows, every call but the first split", len(b.Turns), len(b.Splits), err)
	}
}

// With MergeRewards (training that reads only the trace's reward, or
// none), a call of another own reward joins the row, which takes the
// last call's reward.
func TestBuildMergeRewards(t *testing.T) {
	spans, _, _ := agentTrace()
	spans[4].Rewards = []traces.Reward{{Name: "judge", Value: 0.5}}
	b, err := traces.Build(tracesOf(spans), traces.TrajectoryOptions{Policy: "solver", Reward: "judge", Model: "policy", MergeRewards: true})
	if err != nil || len(b.Turns) != 1 || len(b.Splits) != 0 || b.Turns[0].Reward != 0.5 || b.Turns[0].FinalReward != 1.5 {
		t.Fatalf("%+v: %v; want one row with the last call's reward 0.5 and the trace's 1.5", b, err)
	}
}

// Calls imported without token ids (OTLP spans of a chat) are
// re-tokenized; where the second call's templated prompt begins with the
// first call's prompt and re-tokenized answer, they merge like recorded
// ids, the answer keeping its loss and the rest of the second prompt
// (the end of the first answer's turn, the user's message) none.
func TestBuildMergesRetokenizedCalls(t *testing.T) {
	tok := tokenizer.Builtin()
	user := `{"role":"user","parts":[{"type":"text","content":"2+2?"}]}`
	answer := `{"role":"assistant","parts":[{"type":"text","content":"The answer is 4."}]}`
	again := `{"role":"user","parts":[{"type":"text","content":"Sure?"}]}`
	call := func(i int, input string) traces.Span {
		s := traces.NewSpan()
		s.TraceID, s.SpanID, s.Operation, s.RequestModel = [16]byte{9}, [8]byte{byte(i + 1)}, traces.OpChat, "m"
		s.Start = time.Unix(int64(i), 0)
		s.End = s.Start.Add(time.Millisecond)
		s.InputMessages, s.OutputMessages = input, "["+answer+"]"
		return s
	}
	ts := tracesOf([]traces.Span{call(0, "["+user+"]"), call(1, "["+user+","+answer+","+again+"]")})
	b, err := traces.Build(ts, traces.TrajectoryOptions{Tokenizer: tok, KeepUnrewarded: true})
	if err != nil || len(b.Turns) != 1 || b.Calls != 2 || b.Retokenized != 2 || len(b.Splits) != 0 {
		t.Fatalf("%+v: %v; want the two re-tokenized calls in one row", b, err)
	}
	r := b.Turns[0]
	ids := tok.Encode("The answer is 4.")
	var trained []int32
	for k, m := range r.LossMask {
		if m == 1 {
			trained = append(trained, r.ResponseIDs[k])
		}
	}
	if want := toInt32s(slices.Concat(ids, ids)); !slices.Equal(trained, want) {
		t.Errorf("tokens with loss %v, want the answer twice %v", trained, want)
	}
	if !strings.Contains(tok.Decode(intsOf(r.ResponseIDs)), "Sure?") || len(r.ResponseIDs) <= 2*len(ids) {
		t.Errorf("response %q, want the user's second message inside it", tok.Decode(intsOf(r.ResponseIDs)))
	}
}

func toInt32s(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
