package weightsync

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
)

// tinyConfig is a small Qwen2 model over the built-in tokenizer.
func tinyConfig() model.Config {
	return model.Config{Architecture: model.Qwen2, HiddenSize: 32, IntermediateSize: 48, NumLayers: 2,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 8, VocabSize: tokenizer.BuiltinVocabSize, MaxPositions: 256,
		RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
}

// randomModel has weights large enough that next-token distributions are
// far from uniform, so different weights give clearly different logprobs.
func randomModel(t testing.TB, cfg model.Config, seed uint64) *model.Model {
	t.Helper()
	m, err := model.New(cfg, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, p := range m.Params() {
		v := make([]float32, p.Len())
		for i := range v {
			if len(p.Shape) == 1 && strings.HasSuffix(p.Name, "norm.weight") {
				v[i] = 1
			} else {
				v[i] = float32(rng.NormFloat64() * 0.25)
			}
		}
		m.B.Upload(p.W, v)
	}
	return m
}

// saveModel writes m and the built-in tokenizer as a checkpoint directory
// the native engine loads.
func saveModel(t testing.TB, m *model.Model) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	if err := tokenizer.Builtin().Save(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	return dir
}

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

// spawnEngines starts count EngineKind actors serving dir on node (any
// node when node is "").
func spawnEngines(t testing.TB, n *cluster.Node, prefix, dir, node string, count int) []actor.Ref {
	t.Helper()
	var refs []actor.Ref
	for i := range count {
		h, err := n.Spawn(testCtx(t, 30*time.Second), EngineKind, cluster.SpawnOptions{
			Name: prefix + string(rune('a'+i)), Node: node, Args: EngineConfig{Model: dir}})
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
	v, err := sys.Call(testCtx(t, 30*time.Second), ref, Generate{Requests: reqs})
	if err != nil {
		t.Fatalf("generate on %s: %v", ref.Name, err)
	}
	return v.(Generated).Results
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
