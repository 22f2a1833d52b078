package weightsync

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/rollout/vllm"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
	"github.com/rlnode/rlnode/rollout/weights"
)

// A vLLM target beside a native engine: a full update is written as a
// checkpoint and reloaded, a LoRA update written as a PEFT adapter and
// loaded in place; the servers read exactly the learner's tensors.
func TestPublishToVLLM(t *testing.T) {
	n := embedded(t)
	dir := nativetest.Save(t, nativetest.Model(t, nativetest.Config(), 1))
	native := spawnEngines(t, n, "nat-", dir, "", 1)
	srv := vllmtest.New(vllmtest.Options{Model: "base", ReadFiles: true})
	t.Cleanup(srv.Close)
	ctx := testCtx(t, 60*time.Second)
	client, err := vllm.New(ctx, vllm.Config{Servers: []string{srv.URL()}, Model: "base", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s := startSyncer(t, n, Config{})
	register(t, s, native...)
	shared := t.TempDir()
	if _, err := s.RegisterVLLM("vllm", VLLM{Client: client, Dir: shared, BaseModel: "base", Keep: 1}); err != nil {
		t.Fatal(err)
	}

	learner := nativetest.Model(t, nativetest.Config(), 2)
	full := weights.FullUpdate(learner)
	if _, err := s.Publish(ctx, 1, full); err != nil {
		t.Fatal(err)
	}
	got := srv.Loaded()
	if rl := srv.Reloads(); len(rl) != 1 || rl[0].Version != "1" || client.WeightVersion() != 1 || len(got.Weights) != len(full.Tensors) {
		t.Fatalf("server reloads %+v, client %d, %d tensors loaded", rl, client.WeightVersion(), len(got.Weights))
	}
	for name, v := range full.Tensors {
		if !equal(got.Weights[name], v) {
			t.Fatalf("tensor %s differs on the server", name)
		}
	}

	if err := learner.AddLoRA(model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"v_proj"}, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	u, err := weights.LoRAUpdate(learner)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(ctx, 2, u); err != nil {
		t.Fatal(err)
	}
	got = srv.Loaded()
	if client.WeightVersion() != 2 || client.Model() != "policy" || got.Adapter == nil {
		t.Fatalf("after LoRA: version %d model %q", client.WeightVersion(), client.Model())
	}
	for name, v := range u.Tensors {
		w, shape, err := got.Adapter.Float32(name)
		if err != nil || !equal(w, v) || len(shape) != 2 {
			t.Fatalf("adapter tensor %s: shape %v, %v", name, shape, err)
		}
	}
	var mods []string
	_ = json.Unmarshal(got.AdapterConfig["target_modules"], &mods)
	if string(got.AdapterConfig["r"]) != "2" || strings.Join(mods, ",") != "v_proj" {
		t.Fatalf("adapter_config.json: r %s, target_modules %s", got.AdapterConfig["r"], got.AdapterConfig["target_modules"])
	}
	// Keep 1: only the newest version's directory stays.
	ents, _ := os.ReadDir(shared)
	if len(ents) != 1 || ents[0].Name() != "lora-2" {
		t.Fatalf("shared dir holds %v", ents)
	}

	// The server fails to load: the vLLM target is removed, named by its
	// server; the native engine serves the version.
	srv.Fail("/v1/load_lora_adapter")
	rep, err := s.Publish(ctx, 3, u)
	if !errors.Is(err, ErrEngineFailed) || !strings.Contains(err.Error(), "engine vllm on node "+srv.URL()) || !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("failing server: %v", err)
	}
	if len(rep.Applied) != 1 || rep.Applied[0].Name != "nat-a" || rep.Applied[0].Version != 3 {
		t.Fatalf("report %+v", rep)
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
