package weightsync

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/weights"
)

func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func embedded(t testing.TB) *cluster.Node {
	t.Helper()
	n, err := cluster.Start(testCtx(t, 30*time.Second), cluster.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// spawnEngines starts count weights.EngineKind actors serving dir on node (any
// node when node is "").
func spawnEngines(t testing.TB, n *cluster.Node, prefix, dir, node string, count int) []actor.Ref {
	t.Helper()
	var refs []actor.Ref
	for i := range count {
		h, err := n.Spawn(testCtx(t, 30*time.Second), weights.EngineKind, cluster.SpawnOptions{
			Name: prefix + string(rune('a'+i)), Node: node, Args: weights.EngineConfig{Model: dir}})
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := h.Record()
		refs = append(refs, rec.Ref)
	}
	return refs
}

var prompts = [][]int{{5, 17, 42, 9}, {100, 3, 77}}

// generate runs greedy generation on an engine host.
func generate(t *testing.T, sys *actor.System, ref actor.Ref) []engine.Result {
	t.Helper()
	var reqs []engine.Request
	for i, p := range prompts {
		reqs = append(reqs, engine.Request{ID: string(rune('p' + i)), Prompt: p, Params: engine.SamplingParams{MaxTokens: 8}})
	}
	v, err := sys.Call(testCtx(t, 30*time.Second), ref, weights.Generate{Requests: reqs})
	if err != nil {
		t.Fatalf("generate on %s: %v", ref.Name, err)
	}
	return v.(weights.Generated).Results
}

// checkAgainst holds every result to ref's training forward: each sampled
// token's logprob equals ref's (greedy sampling reports T=1 logprobs).
func checkAgainst(t *testing.T, who string, ref *model.Model, results []engine.Result, version int64) {
	t.Helper()
	for _, res := range results {
		if res.WeightVersion != version {
			t.Errorf("%s request %s: weight version %d, want %d", who, res.RequestID, res.WeightVersion, version)
		}
		for _, s := range res.Samples {
			seq := model.Sequence{Prompt: toInt32(res.PromptTokenIDs), Response: toInt32(s.TokenIDs)}
			bt, err := model.NewBatch([]model.Sequence{seq}, 0, false, ref.Config.VocabSize)
			if err != nil {
				t.Fatal(err)
			}
			logp, _, err := ref.Forward(bt)
			if err != nil {
				t.Fatal(err)
			}
			if len(logp) != len(s.LogProbs) {
				t.Fatalf("%s: %d reference logprobs for %d tokens", who, len(logp), len(s.LogProbs))
			}
			for k := range logp {
				if d := math.Abs(float64(logp[k] - s.LogProbs[k])); d > 2e-4 {
					t.Errorf("%s request %s token %d: logprob %v, reference %v", who, res.RequestID, k, s.LogProbs[k], logp[k])
				}
			}
		}
	}
}

func toInt32(x []int) []int32 {
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32(v)
	}
	return out
}
