package traces_test

import (
	"slices"
	"strings"
	"testing"

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
