package train

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/traces"
)

func TestLoadWarmupTraces(t *testing.T) {
	store := t.TempDir()
	w, err := traces.OpenWriter(store, traces.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s := traces.NewSpan()
		s.TraceID, s.SpanID = [16]byte{byte(i + 1)}, [8]byte{byte(i + 1)}
		s.Operation, s.Source, s.Start, s.End = traces.OpChat, "a", time.Unix(1e9, 0), time.Unix(1e9, 1000)
		s.OutputMessages = `[{"role":"assistant","parts":[{"type":"text","content":"x"}]}]`
		s.PromptTokenIDs, s.OutputTokenIDs = []int32{1, 2, int32(i)}, slices.Repeat([]int32{7}, i+1)
		if i > 0 {
			s.Rewards = []traces.Reward{{Name: "judge", Value: float64(i)}}
		}
		w.Add(s)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	pc := &policyContext{positions: 64, field: "models.policy.init.max_positions"}
	all := &WarmupTraces{Store: store, Filter: traces.Any(), MinReward: math.NaN()}
	rows, err := loadWarmupTraces(all, nil, pc, 1)
	if err != nil || len(rows) != 3 {
		t.Fatalf("every call: %d rows, %v", len(rows), err)
	}
	best, err := loadWarmupTraces(&WarmupTraces{Store: store, Filter: traces.Any(), Reward: "judge", MinReward: 2}, nil, pc, 1)
	if err != nil || len(best) != 1 || len(best[0].ResponseIDs) != 3 {
		t.Fatalf("judge ≥ 2: %+v, %v", best, err)
	}
	if _, err := loadWarmupTraces(&WarmupTraces{Store: store, Filter: traces.Any(), Reward: "judge", MinReward: 5}, nil, pc, 1); err == nil ||
		!strings.Contains(err.Error(), "no model call that passes the filters") {
		t.Errorf("judge ≥ 5: %v", err)
	}
	short := &policyContext{positions: 5, field: "models.policy.init.max_positions"}
	if _, err := loadWarmupTraces(all, nil, short, 1); err == nil || !strings.Contains(err.Error(), "exceed the policy's context 5 (models.policy.init.max_positions)") {
		t.Errorf("context 5: %v", err)
	}
	// Batches take the shuffled rows in turn, the same for the same step.
	b0, b1 := warmupBatchFromTraces(rows, 0, 2), warmupBatchFromTraces(rows, 1, 2)
	if !slices.EqualFunc(b0.Prompts, [][]int32{rows[0].PromptIDs, rows[1].PromptIDs}, slices.Equal) ||
		!slices.EqualFunc(b1.Prompts, [][]int32{rows[2].PromptIDs, rows[0].PromptIDs}, slices.Equal) {
		t.Errorf("batches %v %v of rows %v", b0.Prompts, b1.Prompts, rows)
	}
}
