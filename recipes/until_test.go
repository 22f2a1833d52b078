package recipes

import (
	"errors"
	"strings"
	"testing"
)

// sft.until and rw_sft's group_filter: each bad setting is one error
// naming its field; a good sft.until loads with its defaults left at 0.
func TestSFTUntilRules(t *testing.T) {
	l, err := Load("agent_equations", []string{"sft.until={completion: 0.2}"})
	if err != nil {
		t.Fatalf("agent_equations with sft.until: %v", err)
	}
	if u := l.Recipe.SFT.Until; u == nil || u.Completion != 0.2 || u.Every != 0 || u.Episodes != 0 {
		t.Errorf("sft.until loaded as %+v, want completion 0.2, every and episodes 0 (defaults)", u)
	}
	cases := []struct {
		recipe string
		sets   []string
		want   string
	}{
		{"agent_equations", []string{"sft.until={completion: 0}"}, "sft.until.completion: 0: want a completion rate in (0, 1]"},
		{"agent_equations", []string{"sft.until={completion: 1.5}"}, "sft.until.completion: 1.5: want a completion rate in (0, 1]"},
		{"agent_equations", []string{"sft.until={completion: .nan}"}, "sft.until.completion: want a finite number"},
		{"agent_equations", []string{"sft.until={completion: 0.2, every: -1}"}, "sft.until.every: -1: want 1 or more steps"},
		{"agent_equations", []string{"sft.until={completion: 0.2, episodes: 5000}"}, "sft.until.episodes: 5000: want 1..4096"},
		{"agent_equations", []string{"sft.until={completion: 0.2}", "sft.steps=0"}, "sft.until: set, but sft.steps is 0"},
		{"quickstart", []string{"sft.until={completion: 0.2}"}, `sft.until: set, but episode.type is "single"`},
		{"quickstart", []string{"algorithm.name=rw_sft", "algorithm.rw_sft.weighting=group_filter"}, `algorithm.rw_sft.weighting: group_filter: want episode.type agent`},
		{"agent_equations", []string{"algorithm.rw_sft.weighting=group_filter", "episode.agent.returns=discounted"}, "algorithm.rw_sft.weighting: group_filter: want episode.agent.returns episode"},
		{"agent_equations", []string{"algorithm.rw_sft.weighting=best"}, `algorithm.rw_sft.weighting: "best": want one of exp, filter, group_filter`},
	}
	for _, c := range cases {
		_, err := Load(c.recipe, c.sets)
		var es Errors
		if !errors.As(err, &es) || len(es) != 1 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: want one error containing %q, got %v", c.recipe, c.sets, c.want, err)
		}
	}
}
