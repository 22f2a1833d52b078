package train

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// loraProxy puts vLLM's runtime LoRA surface in front of a vllmtest
// server (which answers the LoRA endpoints 404): POST
// /v1/load_lora_adapter checks the adapter directory the way vLLM's PEFT
// loader needs it (adapter_config.json with r, lora_alpha and
// target_modules; adapter_model.safetensors with lora_A/lora_B tensors)
// and registers the name; completions may then name the adapter as their
// model (forwarded to the fake as its base model), and a name that is not
// loaded is answered 404 as vLLM does.
type loraProxy struct {
	srv  *httptest.Server
	base string

	mu      sync.Mutex
	loaded  map[string]string // name → path
	loads   []vllmLoad
	byModel map[string]int // completions per requested model name
}

type vllmLoad struct{ Name, Path string }

func newLoRAProxy(t *testing.T, s *vllmtest.Server, base string) *loraProxy {
	t.Helper()
	target, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	p := &loraProxy{base: base, loaded: map[string]string{}, byModel: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/load_lora_adapter":
			p.load(w, r)
			return
		case "/v1/completions":
			body, _ := io.ReadAll(r.Body)
			var req map[string]any
			if err := json.Unmarshal(body, &req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			name, _ := req["model"].(string)
			p.mu.Lock()
			_, ok := p.loaded[name]
			p.byModel[name]++
			p.mu.Unlock()
			if !ok && name != base {
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(`{"object":"error","message":"The model ` + "`" + name + "`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}`))
				return
			}
			req["model"] = base
			body, _ = json.Marshal(req)
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *loraProxy) load(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name        string `json:"lora_name"`
		Path        string `json:"lora_path"`
		LoadInplace bool   `json:"load_inplace"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" || req.Path == "" {
		http.Error(w, `{"detail":"lora_name and lora_path are required"}`, http.StatusBadRequest)
		return
	}
	fail := func(msg string) {
		http.Error(w, `{"object":"error","message":"`+msg+`","type":"BadRequestError","code":400}`, http.StatusBadRequest)
	}
	js, err := os.ReadFile(filepath.Join(req.Path, model.AdapterConfig))
	if err != nil {
		fail("No adapter found for " + req.Path)
		return
	}
	var ac struct {
		R       int      `json:"r"`
		Alpha   float64  `json:"lora_alpha"`
		Targets []string `json:"target_modules"`
		Peft    string   `json:"peft_type"`
	}
	if err := json.Unmarshal(js, &ac); err != nil || ac.R <= 0 || ac.Alpha <= 0 || len(ac.Targets) == 0 || ac.Peft != "LORA" {
		fail("bad adapter_config.json")
		return
	}
	f, err := safetensors.ReadFile(filepath.Join(req.Path, model.AdapterWeights))
	if err != nil || len(f.Names()) == 0 {
		fail("bad adapter_model.safetensors")
		return
	}
	p.mu.Lock()
	if _, ok := p.loaded[req.Name]; ok && !req.LoadInplace {
		p.mu.Unlock()
		fail("The lora adapter " + req.Name + " has already been loaded.")
		return
	}
	p.loaded[req.Name] = req.Path
	p.loads = append(p.loads, vllmLoad{req.Name, req.Path})
	p.mu.Unlock()
	_, _ = w.Write([]byte("Success: LoRA adapter '" + req.Name + "' added successfully."))
}

// loraVLLMRun is loraRun on two fake vLLM servers behind LoRA proxies.
func loraVLLMRun(t *testing.T, out string) (Config, [2]*vllmtest.Server, [2]*loraProxy) {
	t.Helper()
	cfg := loraRun(out)
	opts := vllmtest.Options{Model: "tiny", Vocab: cfg.Model.VocabSize}
	var ss [2]*vllmtest.Server
	var ps [2]*loraProxy
	for i := range ss {
		ss[i] = vllmtest.New(opts)
		t.Cleanup(ss[i].Close)
		ps[i] = newLoRAProxy(t, ss[i], "tiny")
	}
	cfg.VLLM = &VLLM{Servers: []string{ps[0].srv.URL, ps[1].srv.URL}, Model: "tiny", ReloadTimeout: 5 * time.Second}
	return cfg, ss, ps
}

// vLLM with weight_sync lora: the warm-up reloads full weights; from the
// first RL step on every server loads the adapter from
// Out/vllm-weights/step-N/ (PEFT layout) under VLLMLoRAName and requests
// name it. The adapter files hold the learner's adapters; the base the
// servers hold is the checkpoint's frozen base.
func TestLoRAOnVLLM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, ss, ps := loraVLLMRun(t, t.TempDir())
	dir := filepath.Join(cfg.Out, "vllm-weights")
	var servedBase map[string][]float32
	cfg.OnWeights = func(v int64, eng engine.Engine) {
		if eng.WeightVersion() != v {
			t.Errorf("OnWeights(%d): the client serves version %d", v, eng.WeightVersion())
		}
		if v == int64(cfg.WarmupSteps) {
			servedBase = weightsOf(t, filepath.Join(dir, "step-"+strconv.FormatInt(v, 10)))
		}
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	last := int64(cfg.WarmupSteps + cfg.Steps)
	if res.WeightVersion != last {
		t.Fatalf("version %d, want %d", res.WeightVersion, last)
	}
	for i, s := range ss {
		rl := s.Reloads()
		if len(rl) != 1+cfg.WarmupSteps {
			t.Errorf("%s: %d full reloads %+v, want %d (start and warm-up only)", s.URL(), len(rl), rl, 1+cfg.WarmupSteps)
		}
		p := ps[i]
		var want []vllmLoad
		for v := cfg.WarmupSteps + 1; v <= int(last); v++ {
			want = append(want, vllmLoad{VLLMLoRAName, filepath.Join(dir, "step-"+strconv.Itoa(v))})
		}
		if !slices.Equal(p.loads, want) {
			t.Errorf("%s: adapter loads %+v, want %+v", p.srv.URL, p.loads, want)
		}
		if p.byModel[VLLMLoRAName] == 0 || p.byModel["tiny"] == 0 {
			t.Errorf("%s: requests by model %v, want both the base (warm-up) and %s (RL)", p.srv.URL, p.byModel, VLLMLoRAName)
		}
	}
	lastDir := filepath.Join(dir, "step-"+strconv.FormatInt(last, 10))
	ents, err := os.ReadDir(lastDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{model.AdapterConfig, model.AdapterWeights}) {
		t.Errorf("%s holds %v, want the PEFT adapter only", lastDir, names)
	}
	ck := filepath.Join(cfg.Out, "checkpoints", "step-"+strconv.FormatInt(last, 10))
	if !sameWeights(adapterOf(t, lastDir), adapterOf(t, ck)) {
		t.Errorf("%s holds other adapters than the run's last checkpoint", lastDir)
	}
	if servedBase == nil || !sameWeights(servedBase, weightsOf(t, ck)) {
		t.Error("the weights the servers reloaded last differ from the checkpoint's frozen base")
	}
}

// A resumed LoRA run on vLLM servers first reloads the checkpoint's base
// (base-N/), then loads its adapter, before generating.
func TestLoRAOnVLLMResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := loraRun(t.TempDir())
	if _, err := Run(ctx, full); err != nil {
		t.Fatal(err)
	}
	cfg, ss, ps := loraVLLMRun(t, t.TempDir())
	cfg.Resume = filepath.Join(full.Out, "checkpoints", "step-4")
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cfg.Out, "vllm-weights")
	for i, s := range ss {
		if rl := s.Reloads(); len(rl) != 1 || rl[0].Path != filepath.Join(dir, "base-4") || rl[0].Version != "4" {
			t.Errorf("%s: reloads %+v, want one of %s/base-4 as version 4", s.URL(), rl, dir)
		}
		want := []vllmLoad{{VLLMLoRAName, filepath.Join(dir, "step-4")}, {VLLMLoRAName, filepath.Join(dir, "step-5")}}
		if !slices.Equal(ps[i].loads, want) {
			t.Errorf("adapter loads %+v, want %+v", ps[i].loads, want)
		}
	}
	if !sameWeights(weightsOf(t, filepath.Join(dir, "base-4")), weightsOf(t, cfg.Resume)) {
		t.Error("base-4 is not the checkpoint's base")
	}
}

func adapterOf(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	f, err := safetensors.ReadFile(filepath.Join(dir, model.AdapterWeights))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, n := range f.Names() {
		v, _, err := f.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = v
	}
	return out
}
