package recipes

import (
	"errors"
	"strings"
	"testing"
)

// sft.collect and sft.base_steps on agent_rwsft: each bad setting is one
// error naming its field.
func TestSFTCollectRules(t *testing.T) {
	if _, err := Load("agent_rwsft", nil); err != nil {
		t.Fatalf("agent_rwsft: %v", err)
	}
	cases := []struct {
		sets []string
		want string
	}{
		{[]string{"sft.trajectories=/etc/hostname"}, "sft.collect: set with sft.trajectories: one source feeds the warm-up"},
		{[]string{"sft.collect.teacher=-1"}, "sft.collect.teacher: -1: want 0..100000 episodes"},
		{[]string{"sft.collect.random=100001"}, "sft.collect.random: 100001: want 0..100000 episodes"},
		{[]string{"sft.collect={teacher: 0, random: 0}"}, "sft.collect: no episodes: set teacher or random above 0"},
		{[]string{"episode.agent.env=http", "episode.agent.url=http://127.0.0.1:8000"}, "sft.collect: env http has no scripted teacher"},
		{[]string{"sft.base_steps=-1"}, "sft.base_steps: -1: want ≥ 0"},
		{[]string{"sft.base_steps=300"}, "sft.base_steps: 300: want fewer than sft.steps (300)"},
		{[]string{"sft.lora=false"}, "sft.base_steps: set, but sft.lora is false"},
		{[]string{"sft.weighting=best"}, `sft.weighting: "best": want one of none, exp, filter`},
	}
	for _, c := range cases {
		_, err := Load("agent_rwsft", c.sets)
		var es Errors
		if !errors.As(err, &es) || len(es) != 1 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: want one error containing %q, got %v", c.sets, c.want, err)
		}
	}
}
