package train

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// loraVLLMRun is loraRun on two fake vLLM servers that read the
// checkpoints and PEFT adapters they are told to load.
func loraVLLMRun(t *testing.T, out string) (Config, [2]*vllmtest.Server) {
	t.Helper()
	cfg := loraRun(out)
	opts := vllmtest.Options{Model: "tiny", Vocab: cfg.Model.VocabSize, ReadFiles: true}
	var ss [2]*vllmtest.Server
	for i := range ss {
		ss[i] = vllmtest.New(opts)
		t.Cleanup(ss[i].Close)
	}
	cfg.VLLM = &VLLM{Servers: []string{ss[0].URL(), ss[1].URL()}, Model: "tiny", ReloadTimeout: 5 * time.Second}
	return cfg, ss
}

// vLLM with weight_sync lora: the warm-up reloads full weights; from the
// first RL step on every server loads the adapter from
// Out/vllm-weights/step-N/ (PEFT layout) under VLLMLoRAName and requests
// name it. The adapter files hold the learner's adapters; the base the
// servers hold is the checkpoint's frozen base.
func TestLoRAOnVLLM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, ss := loraVLLMRun(t, t.TempDir())
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
	for _, s := range ss {
		rl := s.Reloads()
		if len(rl) != 1+cfg.WarmupSteps {
			t.Errorf("%s: %d full reloads %+v, want %d (start and warm-up only)", s.URL(), len(rl), rl, 1+cfg.WarmupSteps)
		}
		var want []vllmtest.LoRALoad
		for v := cfg.WarmupSteps + 1; v <= int(last); v++ {
			want = append(want, vllmtest.LoRALoad{Name: VLLMLoRAName, Path: filepath.Join(dir, "step-"+strconv.Itoa(v))})
		}
		if got := s.LoRALoads(); !slices.Equal(got, want) {
			t.Errorf("%s: adapter loads %+v, want %+v", s.URL(), got, want)
		}
		byModel := map[string]int{}
		for _, m := range s.Models() {
			byModel[m]++
		}
		if byModel[VLLMLoRAName] == 0 || byModel["tiny"] == 0 {
			t.Errorf("%s: requests by model %v, want both the base (warm-up) and %s (RL)", s.URL(), byModel, VLLMLoRAName)
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
	cfg, ss := loraVLLMRun(t, t.TempDir())
	cfg.Resume = filepath.Join(full.Out, "checkpoints", "step-4")
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cfg.Out, "vllm-weights")
	for _, s := range ss {
		if rl := s.Reloads(); len(rl) != 1 || rl[0].Path != filepath.Join(dir, "base-4") || rl[0].Version != "4" {
			t.Errorf("%s: reloads %+v, want one of %s/base-4 as version 4", s.URL(), rl, dir)
		}
		want := []vllmtest.LoRALoad{{Name: VLLMLoRAName, Path: filepath.Join(dir, "step-4")}, {Name: VLLMLoRAName, Path: filepath.Join(dir, "step-5")}}
		if got := s.LoRALoads(); !slices.Equal(got, want) {
			t.Errorf("%s: adapter loads %+v, want %+v", s.URL(), got, want)
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

// A server restarted between two RL steps holds the base it started with
// and no adapter: the next push reloads the learner's base on every server
// before the adapter (before: the adapter went onto the launch base,
// unsaid, and the run trained on its samples).
func TestLoRAOnVLLMServerRestarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, ss := loraVLLMRun(t, t.TempDir())
	restartAt := int64(cfg.WarmupSteps + 1)
	var reloadsAt int
	cfg.OnWeights = func(v int64, eng engine.Engine) {
		if v == restartAt {
			reloadsAt = len(ss[0].Reloads())
			if err := ss[0].Restart(); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cfg.Out, "vllm-weights")
	rl := ss[0].Reloads()
	want := filepath.Join(dir, "base-"+strconv.FormatInt(restartAt+1, 10))
	if len(rl) != reloadsAt+1 || rl[reloadsAt].Path != want {
		t.Fatalf("%s after its restart: reloads %+v, want one more of %s", ss[0].URL(), rl[reloadsAt:], want)
	}
	loads := ss[0].LoRALoads()
	if got, last := loads[len(loads)-1].Path, filepath.Join(dir, "step-"+strconv.Itoa(cfg.WarmupSteps+cfg.Steps)); got != last {
		t.Errorf("last adapter load %s, want %s", got, last)
	}
}
