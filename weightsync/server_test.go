package weightsync

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/rollout/vllm"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
	"github.com/rlnode/rlnode/rollout/weights"
)

// modelSource is a Source over a model standing in for the learner: its
// weights, or its adapters once it has them, and its frozen base.
type modelSource struct {
	m     *model.Model
	base  map[string][]float32 // the weights before adapters were added
	bases int                  // Base calls
}

func (s *modelSource) Update(context.Context) (weights.Update, error) {
	if s.base != nil {
		return weights.LoRAUpdate(s.m)
	}
	return weights.FullUpdate(s.m), nil
}

func (s *modelSource) Adapter(ctx context.Context) (*weights.Update, error) {
	if s.base == nil {
		return nil, nil
	}
	u, err := weights.LoRAUpdate(s.m)
	return &u, err
}

func (s *modelSource) Base(context.Context) (map[string][]float32, error) {
	s.bases++
	if s.base != nil {
		return s.base, nil
	}
	return s.m.Weights(), nil
}

func (s *modelSource) WriteModel(_ context.Context, dir string) error {
	if err := s.m.Save(dir, safetensors.F32); err != nil {
		return err
	}
	return tokenizer.Builtin().Save(filepath.Join(dir, "tokenizer.json"))
}

// addAdapters gives s's model LoRA adapters that change its outputs.
func (s *modelSource) addAdapters(t *testing.T) {
	t.Helper()
	s.base = s.m.Weights()
	if err := s.m.AddLoRA(model.LoRAConfig{Rank: 4, Alpha: 8, TargetModules: []string{"q_proj", "down_proj"}, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	for i, p := range s.m.TrainableParams() {
		v := make([]float32, p.Len())
		for k := range v {
			v[k] = float32((k*7+i*13)%11-5) * 0.05
		}
		s.m.B.Upload(p.W, v)
	}
}

func greedy(t *testing.T, e engine.Engine) []engine.Result {
	t.Helper()
	var reqs []engine.Request
	for i, p := range prompts {
		reqs = append(reqs, engine.Request{ID: string(rune('p' + i)), Prompt: p, Params: engine.SamplingParams{MaxTokens: 8}})
	}
	res, err := e.Generate(testCtx(t, 30*time.Second), reqs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// An in-process engine takes full weights, then adapters merged onto the
// base it reads once.
func TestEngineServerPublish(t *testing.T) {
	cfg := nativetest.Config()
	s, err := StartEngine(context.Background(), &cfg, "", native.Config{MaxBatch: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := testCtx(t, 60*time.Second)
	src := &modelSource{m: nativetest.Model(t, cfg, 2)}
	if err := s.Publish(ctx, 1, src); err != nil {
		t.Fatal(err)
	}
	checkAgainst(t, "full", src.m, greedy(t, s), 1)
	src.addAdapters(t)
	for v := int64(2); v <= 3; v++ {
		if err := s.Publish(ctx, v, src); err != nil {
			t.Fatal(err)
		}
		checkAgainst(t, "lora", src.m, greedy(t, AtVersion(s, v)), v)
	}
	if src.bases != 1 || s.Status() != (ServerStatus{}) {
		t.Errorf("base read %d times (want once), status %+v", src.bases, s.Status())
	}
}

// vLLM servers reload each version from Dir/step-N, older directories are
// pruned, and GenerateFor refuses servers outside the staleness window.
func TestVLLMServerPublish(t *testing.T) {
	opts := vllmtest.Options{Model: "tiny", Vocab: tokenizer.BuiltinVocabSize}
	a, b := vllmtest.New(opts), vllmtest.New(opts)
	defer a.Close()
	defer b.Close()
	dir := t.TempDir()
	ctx := testCtx(t, 60*time.Second)
	s, err := StartVLLM(ctx, VLLMConfig{Policy: "solver", Client: vllm.Config{Servers: []string{a.URL(), b.URL()}, Model: "tiny"},
		Dir: dir, ReloadTimeout: 5 * time.Second, MaxStaleness: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GenerateFor(ctx, 3, []engine.Request{{ID: "x", Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 2}}}); err == nil || !strings.Contains(err.Error(), "serves version -1") {
		t.Fatalf("generate before any publish: %v", err)
	}
	src := &modelSource{m: nativetest.Model(t, nativetest.Config(), 2)}
	for v := int64(1); v <= 3; v++ {
		if err := s.Publish(ctx, v, src); err != nil {
			t.Fatal(err)
		}
	}
	for _, srv := range []*vllmtest.Server{a, b} {
		rl := srv.Reloads()
		if len(rl) != 3 || rl[2] != (vllmtest.Reload{Path: filepath.Join(dir, "step-3"), Version: "3"}) {
			t.Errorf("%s reloads %+v, want 3, the last of %s/step-3", srv.URL(), rl, dir)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 || ents[0].Name() != "step-2" || ents[1].Name() != "step-3" {
		t.Errorf("%s holds %v, want step-2 and step-3", dir, ents)
	}
	req := []engine.Request{{ID: "y", Prompt: []int{1, 2}, Params: engine.SamplingParams{MaxTokens: 2}}}
	if res, err := s.GenerateFor(ctx, 4, req); err != nil || res[0].WeightVersion != 3 {
		t.Errorf("on-policy 4, max staleness 1: %+v, %v", res, err)
	}
	if _, err := s.GenerateFor(ctx, 5, req); err == nil || !strings.Contains(err.Error(), "not on a version in [4, 5]") {
		t.Errorf("on-policy 5: %v, want the servers named outside [4, 5]", err)
	}
}

// Rollout actors start from model files alone, get the source's weights
// when they register, and every version published after.
func TestRolloutServerPublish(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	s, src, cfg := startPushedRollout(t, ctx, 2)
	checkAgainst(t, "started", src.m, greedy(t, s), 0)
	if rs := s.Status().Replicas; !s.Status().PushOnDemand || rs == nil || rs.Live != 2 || rs.Want != 2 {
		t.Fatalf("status %+v, replicas %+v", s.Status(), rs)
	}
	src.m = nativetest.Model(t, cfg, 3)
	if err := s.Publish(ctx, 1, src); err != nil {
		t.Fatal(err)
	}
	checkAgainst(t, "version 1", src.m, greedy(t, AtVersion(s, 1)), 1)
	if v := s.WeightVersion(); v != 1 {
		t.Errorf("serves %d, want 1", v)
	}
}

// The syncer drops an engine whose push failed (its node lost) before the
// cluster's death notice reaches the pool: generation then replaces that
// replica instead of failing with ErrNoEngines (seen on a cluster when a
// rollout node was killed just before an evaluation).
func TestRolloutServerReplacesAnEngineTheSyncerDropped(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	s, src, _ := startPushedRollout(t, ctx, 1)
	engines := s.syncer.Versions().Engines
	if len(engines) != 1 {
		t.Fatalf("engines %+v, want 1", engines)
	}
	// What Publish does to an engine it could not push to.
	if !s.syncer.Remove(engines[0].Name, "push version 1: node lost") {
		t.Fatal("Remove found no engine")
	}
	checkAgainst(t, "after the engine was dropped", src.m, greedy(t, s), 0)
	if rs := s.Status().Replicas; rs == nil || rs.Live != 1 || rs.Replaced != 1 {
		t.Errorf("replicas %+v, want 1 live, 1 replaced", rs)
	}
}

// Once the learner has adapters, the servers reload its base (base-N) and
// load each version's PEFT adapter (step-N) in place; the base is
// reloaded only once.
func TestVLLMServerLoRA(t *testing.T) {
	srv := vllmtest.New(vllmtest.Options{Model: "tiny", Vocab: tokenizer.BuiltinVocabSize, ReadFiles: true})
	defer srv.Close()
	dir := t.TempDir()
	ctx := testCtx(t, 60*time.Second)
	s, err := StartVLLM(ctx, VLLMConfig{Policy: "solver", Client: vllm.Config{Servers: []string{srv.URL()}, Model: "tiny"},
		Dir: dir, ReloadTimeout: 5 * time.Second, LoRAName: "policy"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src := &modelSource{m: nativetest.Model(t, nativetest.Config(), 2)}
	src.addAdapters(t)
	for v := int64(1); v <= 2; v++ {
		if err := s.Publish(ctx, v, src); err != nil {
			t.Fatal(err)
		}
	}
	if rl := srv.Reloads(); len(rl) != 1 || rl[0] != (vllmtest.Reload{Path: filepath.Join(dir, "base-1"), Version: "1"}) {
		t.Errorf("reloads %+v, want the base once from %s/base-1", rl, dir)
	}
	want := []vllmtest.LoRALoad{{Name: "policy", Path: filepath.Join(dir, "step-1")}, {Name: "policy", Path: filepath.Join(dir, "step-2")}}
	if got := srv.LoRALoads(); !slices.Equal(got, want) {
		t.Errorf("LoRA loads %+v, want %+v", got, want)
	}
	if ad := srv.Loaded().Adapter; ad == nil || len(ad.Names()) != 8 {
		t.Errorf("the server read adapter %+v, want 8 tensors (A and B of q_proj and down_proj in 2 layers)", ad)
	}
	if v := s.WeightVersion(); v != 2 {
		t.Errorf("serves %d, want 2", v)
	}
}

func TestReplicaNodes(t *testing.T) {
	for _, c := range []struct {
		in   []rollout.ReplicaStatus
		want string
	}{
		{nil, ""},
		{[]rollout.ReplicaStatus{{Name: "r0", Node: "a"}}, "a×1"},
		{[]rollout.ReplicaStatus{{Node: "b"}, {Node: "a"}, {Node: "b"}, {Node: "b"}}, "b×3,a×1"},
	} {
		if got := replicaNodes(c.in); got != c.want {
			t.Errorf("replicaNodes(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// startPushedRollout starts replicas rollout actors on an embedded node from
// model files alone; they get src's weights (a model of seed 2) when they
// register. The server is closed when the test ends.
func startPushedRollout(t *testing.T, ctx context.Context, replicas int) (*RolloutServer, *modelSource, model.Config) {
	t.Helper()
	n := embedded(t)
	cfg := nativetest.Config()
	mc, err := cfg.JSON()
	if err != nil {
		t.Fatal(err)
	}
	tj, err := tokenizer.Builtin().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	files, err := rollout.PushedNativeFiles(mc, tj, 8, "")
	if err != nil {
		t.Fatal(err)
	}
	src := &modelSource{m: nativetest.Model(t, cfg, 2)}
	s, err := StartRollout(ctx, n, RolloutConfig{Policy: "solver", Actor: rollout.ActorConfig{Engine: rollout.PushedNative, ModelFiles: files},
		Replicas: replicas, Resources: cluster.Resources{cluster.CPU: 0.5}, Name: "test"}, 0, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, src, cfg
}

// poison puts a NaN into value 3 of m's final norm, as a diverged learner
// step leaves its weights.
func poison(m *model.Model) {
	v := make([]float32, m.Norm.Len())
	m.B.Download(v, m.Norm.W)
	v[3] = float32(math.NaN())
	m.B.Upload(m.Norm.W, v)
}

// A version holding a NaN is refused before any engine loads it, with an
// error naming the version and the tensor; the engines keep serving the
// version before.
func TestPublishRefusesNonFiniteWeights(t *testing.T) {
	const want = `tensor "model.norm.weight"`
	refused := func(t *testing.T, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "version 2") || !strings.Contains(err.Error(), "NaN") || !errors.Is(err, safetensors.ErrNotFinite) {
			t.Fatalf("publish of a NaN version: error %v, want one naming version 2, %s and NaN", err, want)
		}
	}
	t.Run("engine", func(t *testing.T) {
		cfg := nativetest.Config()
		s, err := StartEngine(context.Background(), &cfg, "", native.Config{MaxBatch: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := testCtx(t, 60*time.Second)
		src := &modelSource{m: nativetest.Model(t, cfg, 2)}
		if err := s.Publish(ctx, 1, src); err != nil {
			t.Fatal(err)
		}
		good := nativetest.Model(t, cfg, 2)
		poison(src.m)
		refused(t, s.Publish(ctx, 2, src))
		checkAgainst(t, "after the refused version", good, greedy(t, s), 1)
	})
	t.Run("vllm", func(t *testing.T) {
		opts := vllmtest.Options{Model: "tiny", Vocab: tokenizer.BuiltinVocabSize}
		a := vllmtest.New(opts)
		defer a.Close()
		ctx := testCtx(t, 60*time.Second)
		s, err := StartVLLM(ctx, VLLMConfig{Policy: "solver", Client: vllm.Config{Servers: []string{a.URL()}, Model: "tiny"},
			Dir: t.TempDir(), ReloadTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		src := &modelSource{m: nativetest.Model(t, nativetest.Config(), 2)}
		if err := s.Publish(ctx, 1, src); err != nil {
			t.Fatal(err)
		}
		poison(src.m)
		refused(t, s.Publish(ctx, 2, src))
		if rl := a.Reloads(); len(rl) != 1 || s.WeightVersion() != 1 {
			t.Errorf("reloads %+v, version %d: want only version 1's", rl, s.WeightVersion())
		}
	})
	t.Run("rollout", func(t *testing.T) {
		ctx := testCtx(t, 2*time.Minute)
		s, src, cfg := startPushedRollout(t, ctx, 2)
		src.m = nativetest.Model(t, cfg, 3)
		if err := s.Publish(ctx, 1, src); err != nil {
			t.Fatal(err)
		}
		good := nativetest.Model(t, cfg, 3)
		poison(src.m)
		refused(t, s.Publish(ctx, 2, src))
		if rs := s.Status().Replicas; rs == nil || rs.Live != 2 || rs.Replaced != 0 {
			t.Errorf("replicas %+v after the refused version, want the 2 engines kept", rs)
		}
		checkAgainst(t, "after the refused version", good, greedy(t, s), 1)
	})
}

// Copying a folder onto the nodes of servers that do not see it
// (vllm.Config.Stage) has its own bound, StageTimeout, before the
// reload's bound starts: a copy slower than ReloadTimeout still reloads
// (the update stages once, and the reload reads that copy), and a copy
// over StageTimeout fails naming the copy, before any server is paused.
// Before, the copy counted against ReloadTimeout: a model that took
// longer to copy than a reload may take could never be served.
func TestVLLMStagingBoundApartFromReload(t *testing.T) {
	for _, c := range []struct {
		name          string
		stageTakes    time.Duration // 0: until the copy's context ends
		reload, stage time.Duration // ReloadTimeout, StageTimeout
		wantErr       string
	}{
		{name: "a copy slower than a reload may take", stageTakes: 3 * time.Second, reload: 2 * time.Second},
		{name: "a copy over its own bound", reload: time.Minute, stage: time.Second, wantErr: "copying"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := vllmtest.New(vllmtest.Options{Model: "tiny", Vocab: tokenizer.BuiltinVocabSize})
			defer srv.Close()
			dir := t.TempDir()
			ctx := testCtx(t, 60*time.Second)
			var stages []string
			locate := func(context.Context, int) (vllm.Location, error) {
				return vllm.Location{URL: srv.URL(), Process: "node-1/1", Staged: true}, nil
			}
			stage := func(ctx context.Context, _ int, d string) (string, error) {
				stages = append(stages, d)
				wait := c.stageTakes
				if wait == 0 {
					wait = time.Hour
				}
				select {
				case <-time.After(wait):
					return d, nil // the test's node sees the folder: its "copy" is the folder
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			s, err := StartVLLM(ctx, VLLMConfig{Policy: "solver", Client: vllm.Config{Servers: []string{srv.URL()}, Model: "tiny", Locate: locate, Stage: stage},
				Dir: dir, ReloadTimeout: c.reload, StageTimeout: c.stage})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.Publish(ctx, 1, &modelSource{m: nativetest.Model(t, nativetest.Config(), 2)})
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("publish with a copy of %v and ReloadTimeout %v: %v", c.stageTakes, c.reload, err)
				}
				if rl := srv.Reloads(); len(rl) != 1 || rl[0].Path != filepath.Join(dir, "step-1") {
					t.Errorf("reloads %+v, want one of %s/step-1", rl, dir)
				}
				if len(stages) != 1 {
					t.Errorf("staged %v, want step-1 once (the reload reads the copy made before it)", stages)
				}
				return
			}
			t.Logf("Publish: %v", err)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), c.stage.String()) {
				t.Errorf("publish with a copy that never ends: %v; want an error about the copy naming %v", err, c.stage)
			}
			if rl := srv.Reloads(); len(rl) != 0 {
				t.Errorf("reloads %+v after a copy that failed, want none", rl)
			}
			if ctx.Err() != nil {
				t.Error("the publish did not end before the test's context")
			}
		})
	}
}
