package train

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/traces"
)

// WarmupTraces makes the SFT warm-up train on recorded model calls from a
// trace store (recipe data.traces) instead of reference answers.
type WarmupTraces struct {
	Store string
	// Filter selects the traces; Reward names the reward MinReward bounds
	// ("" sums all).
	Filter    traces.Filter
	Reward    string
	MinReward float64 // NaN: every call
}

// loadWarmupTraces reads the store's calls as trajectory rows (recorded
// token ids where the calls carried them, else tok re-tokenizes), keeps
// those whose reward is at least w.MinReward, and shuffles them with seed.
// A call longer than the policy's context is an error naming its trace.
func loadWarmupTraces(w *WarmupTraces, tok *tokenizer.Tokenizer, pc *policyContext, seed uint64) ([]data.Turn, error) {
	ts, skipped, err := traces.Load(w.Store, w.Filter)
	if err != nil {
		return nil, fmt.Errorf("driver: data.traces: %w", err)
	}
	if len(skipped) > 0 {
		return nil, fmt.Errorf("driver: data.traces: %s cannot be read (%d files or lines in all)", skipped[0], len(skipped))
	}
	rows, _ := traces.Trajectories(ts, traces.TrajectoryOptions{Policy: "solver", Reward: w.Reward, Model: w.Filter.Model,
		Tokenizer: tok, KeepUnrewarded: math.IsNaN(w.MinReward)})
	kept := rows[:0]
	for _, r := range rows {
		if !math.IsNaN(w.MinReward) && r.Reward < w.MinReward {
			continue
		}
		if n := len(r.PromptIDs) + len(r.ResponseIDs); n > pc.positions {
			return nil, fmt.Errorf("driver: data.traces: trace %s call %d: %d tokens exceed the policy's context %d (%s)",
				r.EpisodeID, r.Turn, n, pc.positions, pc.field)
		}
		kept = append(kept, r)
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("driver: data.traces: %s holds no model call that passes the filters (%d traces read)", w.Store, len(ts))
	}
	rand.New(rand.NewPCG(seed, 0x7472616365)).Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
	return kept, nil
}

// warmupBatchFromTraces is warm-up step k's batch: batch rows taken in
// turn from the shuffled rows, so a resumed run at step k takes the same.
func warmupBatchFromTraces(rows []data.Turn, k, batch int) learner.Batch {
	var b learner.Batch
	for i := range batch {
		r := &rows[(k*batch+i)%len(rows)]
		b.Prompts = append(b.Prompts, append([]int32(nil), r.PromptIDs...))
		b.Responses = append(b.Responses, append([]int32(nil), r.ResponseIDs...))
	}
	return b
}

// warmupTraces is the recipe's data.traces section as a WarmupTraces.
func warmupTraces(tr *recipes.TracesData) *WarmupTraces {
	f := traces.Any()
	f.Agent, f.Model, f.Run, f.Source = tr.Agent, tr.Model, tr.Run, tr.Source
	w := &WarmupTraces{Store: tr.Store, Filter: f, Reward: tr.Reward, MinReward: math.NaN()}
	if tr.MinReward != nil {
		w.MinReward = *tr.MinReward
	}
	return w
}
