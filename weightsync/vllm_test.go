package weightsync

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/rollout/vllm"
)

// vllmServer answers the vLLM endpoints a weight update uses, with vLLM's
// documented shapes, and reads what it is told to load from disk the way
// vLLM would: the "disk" backend's checkpoint and PEFT adapter directories.
type vllmServer struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	calls   []string
	fail    string                     // path answered with HTTP 500
	weights map[string][]float32       // last checkpoint loaded
	adapter *safetensors.File          // last adapter loaded
	config  map[string]json.RawMessage // its adapter_config.json
	version string
}

// loaded is what the server loaded last (read under its lock).
type vllmLoaded struct {
	weights map[string][]float32
	adapter *safetensors.File
	config  map[string]json.RawMessage
	version string
}

func (f *vllmServer) loaded() vllmLoaded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return vllmLoaded{weights: f.weights, adapter: f.adapter, config: f.config, version: f.version}
}

func newVLLMServer(t *testing.T) *vllmServer {
	f := &vllmServer{t: t}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *vllmServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, r.URL.Path)
	if f.fail == r.URL.Path {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"object":"error","message":"CUDA error: out of memory","type":"InternalServerError","code":500}`))
		return
	}
	var body map[string]json.RawMessage
	if r.Method == http.MethodPost && r.ContentLength != 0 {
		_ = json.NewDecoder(r.Body).Decode(&body)
	}
	switch r.URL.Path {
	case "/health", "/pause", "/resume", "/start_weight_update":
	case "/v1/models":
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"base","object":"model","owned_by":"vllm","root":"base","parent":null}]}`))
		return
	case "/update_weights":
		var info struct{ Path string }
		_ = json.Unmarshal(body["update_info"], &info)
		ck, err := safetensors.OpenCheckpoint(info.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.weights = map[string][]float32{}
		for _, n := range ck.Names() {
			tn, _, _ := ck.Tensor(n)
			f.weights[n], _ = tn.Float32()
		}
	case "/finish_weight_update":
		_ = json.Unmarshal(body["weight_version"], &f.version)
	case "/v1/load_lora_adapter":
		var path string
		_ = json.Unmarshal(body["lora_path"], &path)
		a, err := safetensors.ReadFile(filepath.Join(path, model.AdapterWeights))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		js, _ := os.ReadFile(filepath.Join(path, model.AdapterConfig))
		f.config = nil
		_ = json.Unmarshal(js, &f.config)
		f.adapter = a
	default:
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	_, _ = w.Write([]byte(`{}`))
}

// A vLLM target beside a native engine: a full update is written as a
// checkpoint and reloaded, a LoRA update written as a PEFT adapter and
// loaded in place; the servers read exactly the learner's tensors.
func TestPublishToVLLM(t *testing.T) {
	n := embedded(t)
	dir := nativetest.Save(t, nativetest.Model(t, nativetest.Config(), 1))
	native := spawnEngines(t, n, "nat-", dir, "", 1)
	srv := newVLLMServer(t)
	ctx := testCtx(t, 60*time.Second)
	client, err := vllm.New(ctx, vllm.Config{Servers: []string{srv.srv.URL}, Model: "base", MaxAttempts: 1})
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
	full := FullUpdate(learner)
	if _, err := s.Publish(ctx, 1, full); err != nil {
		t.Fatal(err)
	}
	got := srv.loaded()
	if got.version != "1" || client.WeightVersion() != 1 || len(got.weights) != len(full.Tensors) {
		t.Fatalf("server version %q, client %d, %d tensors loaded", got.version, client.WeightVersion(), len(got.weights))
	}
	for name, v := range full.Tensors {
		if !equal(got.weights[name], v) {
			t.Fatalf("tensor %s differs on the server", name)
		}
	}

	if err := learner.AddLoRA(model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"v_proj"}, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	u, err := LoRAUpdate(learner)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(ctx, 2, u); err != nil {
		t.Fatal(err)
	}
	got = srv.loaded()
	if client.WeightVersion() != 2 || client.Model() != "policy" || got.adapter == nil {
		t.Fatalf("after LoRA: version %d model %q", client.WeightVersion(), client.Model())
	}
	for name, v := range u.Tensors {
		w, shape, err := got.adapter.Float32(name)
		if err != nil || !equal(w, v) || len(shape) != 2 {
			t.Fatalf("adapter tensor %s: shape %v, %v", name, shape, err)
		}
	}
	var mods []string
	_ = json.Unmarshal(got.config["target_modules"], &mods)
	if string(got.config["r"]) != "2" || strings.Join(mods, ",") != "v_proj" {
		t.Fatalf("adapter_config.json: r %s, target_modules %s", got.config["r"], got.config["target_modules"])
	}
	// Keep 1: only the newest version's directory stays.
	ents, _ := os.ReadDir(shared)
	if len(ents) != 1 || ents[0].Name() != "lora-2" {
		t.Fatalf("shared dir holds %v", ents)
	}

	// The server fails to load: the vLLM target is removed, named by its
	// server; the native engine serves the version.
	srv.mu.Lock()
	srv.fail = "/v1/load_lora_adapter"
	srv.mu.Unlock()
	rep, err := s.Publish(ctx, 3, u)
	if !errors.Is(err, ErrEngineFailed) || !strings.Contains(err.Error(), "engine vllm on node "+srv.srv.URL) || !strings.Contains(err.Error(), "out of memory") {
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
