package train

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/rollout/data"
)

// turn is a trajectory row of policy pol: episode (g, s), turn index k,
// one response token per unit of reward+1 so rows are told apart.
func turn(pol string, g int64, s, k int, reward float64, mask ...float32) data.Turn {
	resp := []int32{int32(100*g) + int32(10*s) + int32(k)}
	if mask == nil {
		mask = []float32{1}
	}
	return data.Turn{EpisodeID: fmt.Sprintf("g%d-s%d", g, s), GroupID: g, Sample: int32(s), Turn: int32(k), PolicyID: pol,
		PromptIDs: []int32{int32(g), int32(k)}, ResponseIDs: resp, LogProbs: []float32{-float32(k + 1)}, LossMask: mask,
		Reward: reward, FinalReward: reward, FinishReason: "stop"}
}

// mlmtTurns are two groups (7, 8) of two MLMT episodes each: solver turns
// 0 and 2, feedback turn 1, in episode order.
func mlmtTurns() []data.Turn {
	var out []data.Turn
	for _, g := range []int64{7, 8} {
		for s := range 2 {
			r := float64(s)
			out = append(out, turn("solver", g, s, 0, 0.5), turn("feedback", g, s, 1, r-0.5), turn("solver", g, s, 2, r))
		}
	}
	return out
}

func TestBatchFromTrajectories(t *testing.T) {
	type row struct {
		resp   int32 // the row's one response token: 100g + 10s + k
		reward float64
		group  int64
	}
	cases := []struct {
		name   string
		turns  []data.Turn
		policy string
		train  func(data.Turn) bool
		want   []row
		masks  bool
	}{
		{"single turn: one group per prompt, sample order", []data.Turn{
			turn("solver", 3, 0, 0, 1), turn("solver", 3, 1, 0, 0), turn("solver", 4, 0, 0, 0.25), turn("solver", 4, 1, 0, 1)},
			"solver", nil,
			[]row{{300, 1, 3}, {310, 0, 3}, {400, 0.25, 4}, {410, 1, 4}}, false},
		{"mlmt solver: the first attempts, then the refined answers, of each prompt", mlmtTurns(), "solver", nil,
			[]row{{700, 0.5, 14}, {710, 0.5, 14}, {702, 0, 15}, {712, 1, 15}, {800, 0.5, 16}, {810, 0.5, 16}, {802, 0, 17}, {812, 1, 17}}, false},
		{"mlmt feedback: one group per prompt", mlmtTurns(), "feedback", nil,
			[]row{{701, -0.5, 7}, {711, 0.5, 7}, {801, -0.5, 8}, {811, 0.5, 8}}, false},
		{"stop-gradient: the first attempts keep their group ids", mlmtTurns(), "solver", func(t data.Turn) bool { return t.Turn == 0 },
			[]row{{700, 0.5, 14}, {710, 0.5, 14}, {800, 0.5, 16}, {810, 0.5, 16}}, false},
		{"tool output masked out: masks kept", []data.Turn{turn("solver", 0, 0, 0, 1, 1), turn("solver", 0, 1, 0, 0, 0)},
			"solver", nil, []row{{0, 1, 0}, {10, 0, 0}}, true},
		{"another policy's turns only: empty", []data.Turn{turn("solver", 0, 0, 0, 1)}, "feedback", nil, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := BatchFromTrajectories(c.policy, c.turns, c.train)
			if err != nil {
				t.Fatal(err)
			}
			var got []row
			for i := range b.Responses {
				got = append(got, row{b.Responses[i][0], b.Rewards[i], b.GroupIDs[i]})
				src := c.turns[0]
				for _, tr := range c.turns {
					if tr.ResponseIDs[0] == b.Responses[i][0] {
						src = tr
					}
				}
				if !reflect.DeepEqual(b.Prompts[i], src.PromptIDs) || !reflect.DeepEqual(b.SampleLogProbs[i], src.LogProbs) {
					t.Errorf("sequence %d: prompt %v logprobs %v, want the row's %v %v", i, b.Prompts[i], b.SampleLogProbs[i], src.PromptIDs, src.LogProbs)
				}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("sequences (response, reward, group):\n got %v\nwant %v", got, c.want)
			}
			if b.PolicyID != c.policy || (b.Masks != nil) != c.masks || b.Advantages != nil {
				t.Errorf("policy %q, masks %v, advantages %v", b.PolicyID, b.Masks, b.Advantages)
			}
			if c.masks && !reflect.DeepEqual(b.Masks, [][]float32{{1}, {0}}) {
				t.Errorf("masks %v", b.Masks)
			}
		})
	}
}

func TestBatchFromTrajectoriesRefuses(t *testing.T) {
	failed := turn("solver", 1, 0, 0, 0)
	failed.FinishReason, failed.Note = "error", "turn 0: engine refused"
	short := turn("solver", 1, 0, 0, 0)
	short.LogProbs = nil
	withAdv := turn("solver", 1, 0, 0, 0)
	withAdv.Advantages = []float32{0.5}
	for _, c := range []struct {
		turns []data.Turn
		want  string
	}{
		{[]data.Turn{failed}, "episode g1-s0 turn 0 failed: turn 0: engine refused"},
		{[]data.Turn{short}, "0 logprobs for 1 response tokens"},
		{[]data.Turn{withAdv, turn("solver", 1, 1, 0, 0)}, "sequence 1 has no advantages"},
	} {
		if _, err := BatchFromTrajectories("solver", c.turns, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
	b, err := BatchFromTrajectories("solver", []data.Turn{withAdv}, nil)
	if err != nil || !reflect.DeepEqual(b.Advantages, [][]float32{{0.5}}) {
		t.Errorf("advantages %v, %v", b.Advantages, err)
	}
}
