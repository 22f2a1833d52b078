package traces

import (
	"math"
	"testing"
)

func TestCoordinationRewards(t *testing.T) {
	agent := func(name string, round int, answer string, tokens int64) Span {
		s := NewSpan()
		s.SpanID[0] = byte(len(name) + round)
		s.AgentName, s.InputTokens, s.OutputTokens = name, tokens, 0
		s.Attributes = `{"rlnode.round":` + string(rune('0'+round)) + `,"rlnode.answer":"` + answer + `"}`
		return s
	}
	root := NewSpan()
	c := DefaultCoordinationRewards()
	for _, tc := range []struct {
		name   string
		spans  []Span
		want   float64
		reason string
	}{
		{"one round, consensus", []Span{root, agent("a", 0, "4", 500), agent("bb", 0, " 4", 500)}, 1 - 0.01,
			"consensus of 2 agents (+1), 1000 tokens (-0.01)"},
		{"three rounds, last answers agree", []Span{root, agent("a", 0, "3", 0), agent("bb", 0, "4", 0), agent("a", 2, "4", 0), agent("bb", 1, "4", 0)},
			1 - 0.2, "3 rounds (-0.2), consensus of 2 agents (+1)"},
		{"no consensus, an answer reward", func() []Span {
			r := root
			r.Rewards = []Reward{{Name: "answer", Value: 0.5}}
			return []Span{r, agent("a", 1, "3", 0), agent("bb", 1, "4", 0)}
		}(), -0.1 + 0.5, "2 rounds (-0.1), no consensus among 2 agents, answer 0.5 × 1"},
	} {
		tr := Trace{Spans: tc.spans}
		a, ok := c.Score(&tr)
		if !ok || math.Abs(a.Reward.Value-tc.want) > 1e-12 || a.Reward.Reason != tc.reason || a.Reward.Name != "coordination" {
			t.Errorf("%s: %+v %v, want %v %q", tc.name, a.Reward, ok, tc.want, tc.reason)
		}
	}
	if _, ok := c.Score(&Trace{Spans: []Span{root}}); ok {
		t.Error("a trace without rounds or answers got a coordination reward")
	}
}
