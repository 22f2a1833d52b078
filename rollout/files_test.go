package rollout_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/rollout"
	"github.com/rlnode/rlnode/rollout/native"
)

// An engine built from model files alone serves no version and refuses to
// generate until a push sets every parameter; then it samples exactly as
// the model pushed.
func TestNativeFromFiles(t *testing.T) {
	files := modelFiles(t)
	for _, name := range []string{"config.json", "tokenizer.json"} {
		short := map[string][]byte{}
		for k, v := range files {
			if k != name {
				short[k] = v
			}
		}
		if _, err := rollout.NewNativeFromFiles(short, native.Config{}); err == nil || !strings.Contains(err.Error(), "no "+name) {
			t.Errorf("without %s: %v", name, err)
		}
	}
	e, err := rollout.NewNativeFromFiles(files, native.Config{MaxBatch: 8, WeightVersion: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := testCtx(t)
	reqs := poolRequests("f", 4)
	if v := e.WeightVersion(); v != rollout.NoWeights {
		t.Errorf("version %d before any push, want NoWeights", v)
	}
	if _, err := e.Generate(ctx, reqs); !errors.Is(err, rollout.ErrNoWeights) {
		t.Fatalf("generate before a push: %v", err)
	}
	m := otherModel(t, 3)
	w := m.Weights()
	partial := map[string][]float32{"model.norm.weight": w["model.norm.weight"]}
	if err := e.SetWeights(ctx, 1, partial); err == nil || !strings.Contains(err.Error(), "must set every parameter") {
		t.Fatalf("a partial first push: %v", err)
	}
	if err := e.SetWeights(ctx, 1, w); err != nil {
		t.Fatal(err)
	}
	got, err := e.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sameSamples(t, "after the push", got, reference(t, m, reqs), 1)
	if err := e.SetWeights(ctx, 2, partial); err != nil {
		t.Errorf("a partial later push: %v", err)
	}
}

// A rollout actor's engine runs on the device the driver names: it travels
// in the engine settings of the model files, and an engine on a GPU is
// refused, with the reason, where the CUDA backend cannot run.
func TestNativeFromFilesDevice(t *testing.T) {
	files := modelFiles(t)
	pf, err := rollout.PushedNativeFiles(files["config.json"], files["tokenizer.json"], 8, "cuda:1")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(pf[rollout.EngineConfigFile]); got != `{"max_batch":8,"device":"cuda:1"}` {
		t.Errorf("engine settings %s", got)
	}
	if pf, _ = rollout.PushedNativeFiles(files["config.json"], files["tokenizer.json"], 8, ""); string(pf[rollout.EngineConfigFile]) != `{"max_batch":8}` {
		t.Errorf("engine settings on the cpu %s: want no device", pf[rollout.EngineConfigFile])
	}
	if cuda.Available().Err() != nil {
		_, err := rollout.NewNativeFromFiles(files, native.Config{Device: "cuda"})
		if err == nil || !strings.Contains(err.Error(), "cuda: the CUDA backend cannot run here") {
			t.Errorf("an engine on cuda without the CUDA backend: %v", err)
		}
	}
}

// A rollout actor given ModelFiles must be able to get weights pushed
// (WeightSync) and must not also name a directory.
func TestActorModelFilesNeedWeightSync(t *testing.T) {
	n := startNode(t)
	for _, cfg := range []rollout.ActorConfig{
		{Engine: "native", ModelFiles: modelFiles(t)},
		{Engine: "native", ModelFiles: modelFiles(t), Model: "/somewhere", WeightSync: true},
	} {
		_, err := n.Spawn(testCtx(t), rollout.ActorKind, cluster.SpawnOptions{Args: cfg})
		if err == nil || !strings.Contains(err.Error(), "ModelFiles") {
			t.Errorf("spawn with Model %q, WeightSync %v: %v", cfg.Model, cfg.WeightSync, err)
		}
	}
}
