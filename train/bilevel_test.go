package train

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/rollout/data"
)

// biLevelTurns are episodes g0-s0, g0-s1, g1-s0, g1-s1 of solver (turns 0
// and 2) and feedback (turn 1), with the final rewards given.
func biLevelTurns(final []float64) []data.Turn {
	var turns []data.Turn
	for e, r := range final {
		g, s := int64(e/2), int32(e%2)
		for k, pol := range []string{"solver", "feedback", "solver"} {
			n := 2 + k + e // ragged
			turns = append(turns, data.Turn{
				EpisodeID: fmt.Sprintf("g%d-s%d", g, s), GroupID: g, Sample: s, Turn: int32(k), PolicyID: pol,
				PromptIDs: []int32{1}, ResponseIDs: make([]int32, n), LogProbs: make([]float32, n), LossMask: ones32(n),
				Reward: r, FinalReward: r,
			})
		}
	}
	return turns
}

func ones32(n int) []float32 {
	m := make([]float32, n)
	for i := range m {
		m[i] = 1
	}
	return m
}

// Each solver row gets R − V_L of its episode on every token, V_L the
// feedback learner's value of the episode's feedback row.
func TestBiLevelAdvantages(t *testing.T) {
	final := []float64{1, 0, 0, 1}
	values := []float64{0.25, 0.5, 0.125, 0.75} // feedback rows g0-s0, g0-s1, g1-s0, g1-s1
	turns := biLevelTurns(final)
	for _, stopGradient := range []bool{false, true} {
		admit := func(t data.Turn) bool { return !stopGradient || t.Turn == 0 }
		sb, err := BatchFromTrajectories("solver", turns, admit)
		if err != nil {
			t.Fatal(err)
		}
		if err := biLevelAdvantages(&sb, turns, "solver", "feedback", admit, values); err != nil {
			t.Fatal(err)
		}
		// Rows: group 0 turn 0 (s0, s1), turn 2 (s0, s1), then group 1.
		var want []float64
		for g := range 2 {
			for _, k := range []int{0, 2} {
				if stopGradient && k == 2 {
					continue
				}
				for s := range 2 {
					e := 2*g + s
					want = append(want, final[e]-values[e])
				}
			}
		}
		if len(sb.Advantages) != len(want) {
			t.Fatalf("stop %v: %d rows, want %d", stopGradient, len(sb.Advantages), len(want))
		}
		for i, a := range sb.Advantages {
			if len(a) != len(sb.Responses[i]) || len(a) == 0 {
				t.Fatalf("row %d: %d advantages for %d tokens", i, len(a), len(sb.Responses[i]))
			}
			for _, v := range a {
				if v != float32(want[i]) {
					t.Fatalf("stop %v: row %d advantage %v, want %v", stopGradient, i, v, want[i])
				}
			}
		}
	}

	sb, _ := BatchFromTrajectories("solver", turns, nil)
	if err := biLevelAdvantages(&sb, turns, "solver", "feedback", nil, values[:3]); err == nil || !strings.Contains(err.Error(), "3 values for 4 feedback turns") {
		t.Errorf("short values: %v", err)
	}
	noFeedback := biLevelTurns(final)
	noFeedback[4].PolicyID = "other" // episode g0-s1 without its feedback row
	sb, _ = BatchFromTrajectories("solver", noFeedback, nil)
	if err := biLevelAdvantages(&sb, noFeedback, "solver", "feedback", nil, values[:3]); err == nil || !strings.Contains(err.Error(), "episode g0-s1 has no feedback turn") {
		t.Errorf("missing feedback row: %v", err)
	}
}
