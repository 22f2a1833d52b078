package learner_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
)

// The learner actor on an embedded cluster: SFT then GRPO steps, the
// weights offered over the bulk path equal the checkpoint it writes, and a
// loaded checkpoint brings the step back.
func TestLearnerActor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := cluster.Start(ctx, cluster.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()

	cfg := learner.DefaultConfig()
	cfg.Model = &model.Config{Architecture: model.Qwen2, HiddenSize: 16, IntermediateSize: 32, NumLayers: 1, NumHeads: 2,
		NumKVHeads: 1, HeadDim: 8, VocabSize: 12, MaxPositions: 32, RMSNormEps: 1e-6, RopeTheta: 10000,
		TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
	cfg.LR = 1e-2
	h, err := node.Spawn(ctx, learner.ActorKind, cluster.SpawnOptions{Name: "learner", Args: learner.ActorConfig{Config: cfg}})
	if err != nil {
		t.Fatal(err)
	}
	weights := func() map[string][]float32 {
		t.Helper()
		off, err := cluster.Call[learner.WeightsOffer](ctx, h, learner.WeightsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		data, err := node.System().Bulk().Fetch(ctx, off.Ref)
		if err != nil {
			t.Fatal(err)
		}
		w, err := learner.DecodeWeights("offer", data)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w0 := weights()

	sft := learner.Batch{Prompts: [][]int32{{1, 2}, {1, 3}}, Responses: [][]int32{{4, 5}, {6}}}
	if _, err := cluster.Call[learner.AlgorithmSet](ctx, h, learner.SetAlgorithmRequest{Algorithm: learner.SFT, LR: 5e-3}); err != nil {
		t.Fatal(err)
	}
	st, err := cluster.Call[learner.Stats](ctx, h, learner.TrainRequest{Batch: sft})
	if err != nil {
		t.Fatal(err)
	}
	if st.Step != 1 || st.Tokens != 3 || st.LR != 5e-3 {
		t.Errorf("SFT step %d tokens %d lr %v, want 1, 3, 0.005", st.Step, st.Tokens, st.LR)
	}
	if _, err := cluster.Call[learner.AlgorithmSet](ctx, h, learner.SetAlgorithmRequest{Algorithm: learner.GRPO}); err != nil {
		t.Fatal(err)
	}
	grpo := learner.Batch{Prompts: [][]int32{{1, 2}, {1, 2}, {1, 3}, {1, 3}}, Responses: [][]int32{{4}, {5}, {6, 7}, {8}},
		Rewards: []float64{1, 0, 0, 1}, GroupIDs: []int64{7, 7, 8, 8}}
	if st, err = cluster.Call[learner.Stats](ctx, h, learner.TrainRequest{Batch: grpo}); err != nil {
		t.Fatal(err)
	}
	if st.Step != 2 || st.RewardMean != 0.5 || st.LR != 5e-3 {
		t.Errorf("GRPO step %d reward mean %v lr %v, want 2, 0.5 and the SFT rate kept", st.Step, st.RewardMean, st.LR)
	}
	bad := grpo
	bad.GroupIDs = []int64{7, 8, 7, 8}
	if _, err := cluster.Call[learner.Stats](ctx, h, learner.TrainRequest{Batch: bad}); err == nil || !strings.Contains(err.Error(), "group_ids[2]") {
		t.Errorf("bad groups: error %v, want one naming group_ids[2]", err)
	}

	w2 := weights()
	changed := false
	for name, v := range w2 {
		for i := range v {
			changed = changed || v[i] != w0[name][i]
		}
	}
	if !changed {
		t.Error("the offered weights did not change after two steps")
	}
	dir := filepath.Join(t.TempDir(), "step-2")
	saved, err := cluster.Call[learner.Saved](ctx, h, learner.SaveRequest{Dir: dir})
	if err != nil || saved.Step != 2 {
		t.Fatalf("save: %v (step %d)", err, saved.Step)
	}
	m, err := model.Load(dir, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range m.Weights() {
		for i := range v {
			if v[i] != w2[name][i] {
				t.Fatalf("checkpoint %s[%d] = %v, offered %v", name, i, v[i], w2[name][i])
			}
		}
	}
	if _, err := cluster.Call[learner.Stats](ctx, h, learner.TrainRequest{Batch: grpo}); err != nil {
		t.Fatal(err)
	}
	loaded, err := cluster.Call[learner.Loaded](ctx, h, learner.LoadRequest{Dir: dir})
	if err != nil || loaded.Step != 2 {
		t.Fatalf("load: %v (step %d)", err, loaded.Step)
	}
	if _, err := cluster.Call[learner.Loaded](ctx, h, learner.LoadRequest{Dir: filepath.Join(dir, "missing")}); err == nil {
		t.Error("loading a missing checkpoint succeeded")
	}
}

// TestWeightsEncodingGivesUp: encoding and decoding a weight push check
// their context between tensors (a large model's take seconds, which a
// stopping run once waited for), and with a live context write and read
// EncodeWeights' bytes.
func TestWeightsEncodingGivesUp(t *testing.T) {
	w := map[string][]float32{"a": {1, 2, 3}, "b": {4, 5}, "c": {6}}
	want, err := learner.EncodeWeights(w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := learner.EncodeWeightsContext(context.Background(), w)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("EncodeWeightsContext: %d bytes, %v; want EncodeWeights' %d", len(got), err, len(want))
	}
	back, err := learner.DecodeWeightsContext(context.Background(), "push", got)
	if err != nil || len(back) != len(w) || back["b"][1] != 5 {
		t.Fatalf("DecodeWeightsContext: %v, %v", back, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := learner.EncodeWeightsContext(ctx, w); !errors.Is(err, context.Canceled) {
		t.Errorf("EncodeWeightsContext after its context ended: %v, want context.Canceled", err)
	}
	if _, err := learner.DecodeWeightsContext(ctx, "push", want); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "push") {
		t.Errorf("DecodeWeightsContext after its context ended: %v, want context.Canceled naming the payload", err)
	}
}

// TestWeightsCopyGivesUp: the copy of the weights a push offers
// (PolicyWeightsPart, before they are encoded) checks its context too:
// it once copied a large model's every tensor, seconds that a stopped
// run waited. With a live context it copies what PolicyWeights and
// BaseWeights do.
func TestWeightsCopyGivesUp(t *testing.T) {
	cfg := learner.DefaultConfig()
	cfg.Model = &model.Config{Architecture: model.Qwen2, HiddenSize: 16, IntermediateSize: 32, NumLayers: 1, NumHeads: 2,
		NumKVHeads: 1, HeadDim: 8, VocabSize: 12, MaxPositions: 32, RMSNormEps: 1e-6, RopeTheta: 10000,
		TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
	l, err := learner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		part string
		want map[string][]float32
	}{{learner.WeightsPolicy, l.PolicyWeights()}, {learner.WeightsBase, l.BaseWeights()}, {learner.WeightsAdapter, l.PolicyWeights()}} {
		w, _, err := l.PolicyWeightsPart(context.Background(), c.part)
		if err != nil || len(w) != len(c.want) {
			t.Fatalf("part %q: %d tensors, %v; want %d", c.part, len(w), err, len(c.want))
		}
		for n, v := range c.want {
			if !slices.Equal(w[n], v) {
				t.Errorf("part %q: %s differs", c.part, n)
			}
		}
		if _, _, err := l.PolicyWeightsPart(ctx, c.part); !errors.Is(err, context.Canceled) {
			t.Errorf("part %q after its context ended: %v, want context.Canceled", c.part, err)
		}
	}
}
