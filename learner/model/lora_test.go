package model

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/safetensors"
)

var allModules = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// randomizeLoRA gives B nonzero values so the adapters change the output.
func randomizeLoRA(m *Model, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 5))
	for _, p := range m.loraParams() {
		m.B.Upload(p.W, randomWeights(rng, p.Len()))
		m.B.Scale(p.W, 0.2) // keep the adapters' contribution near the base's

	}
}

func forwardOrFail(t *testing.T, m *Model, bt *Batch) []float32 {
	t.Helper()
	logp, _, err := m.Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	return logp
}

func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > tol {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestLoRA(t *testing.T) {
	seqs := randomSequences(rand.New(rand.NewPCG(8, 8)), 4, 32)
	bt, _ := NewBatch(seqs, 12, true, 32)
	m := tinyModel(t, tinyConfig(Qwen2), 4)
	base := forwardOrFail(t, m, bt)
	if err := m.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, TargetModules: allModules, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	// B starts at zero: nothing changes, and only adapters train.
	closeTo(t, "fresh adapter logp", forwardOrFail(t, m, bt), base, 0)
	tp := m.TrainableParams()
	if len(tp) != 2*7*2 || tp[0].Name != "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" ||
		tp[1].Name != "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight" || tp[1].Shape[0] != 16 || tp[1].Shape[1] != 2 {
		t.Fatalf("trainable params: %d, first %s %v", len(tp), tp[1].Name, tp[1].Shape)
	}
	randomizeLoRA(m, 2)
	adapted := forwardOrFail(t, m, bt)
	t.Run("gradients", func(t *testing.T) { gradCheck(t, m, bt, 3) })

	// Save as a PEFT adapter, load onto a fresh copy of the base.
	dir := t.TempDir()
	if err := m.SaveLoRA(dir, "tiny-base"); err != nil {
		t.Fatal(err)
	}
	var ac map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, AdapterConfig))
	if err := json.Unmarshal(b, &ac); err != nil {
		t.Fatal(err)
	}
	if ac["peft_type"] != "LORA" || ac["r"] != 2.0 || ac["lora_alpha"] != 4.0 || ac["base_model_name_or_path"] != "tiny-base" || len(ac["target_modules"].([]any)) != 7 {
		t.Errorf("adapter_config.json = %s", b)
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, AdapterWeights))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Tensor("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"); !ok || len(f.Tensors) != 28 {
		t.Errorf("adapter tensors: %v", f.Names())
	}
	m2 := tinyModel(t, tinyConfig(Qwen2), 4)
	if err := m2.LoadLoRA(dir); err != nil {
		t.Fatal(err)
	}
	closeTo(t, "reloaded adapter logp", forwardOrFail(t, m2, bt), adapted, 0)

	// Merging gives the adapted model's outputs without adapters.
	m2.MergeLoRA()
	if len(m2.loraParams()) != 0 {
		t.Fatal("adapters left after merge")
	}
	closeTo(t, "merged logp", forwardOrFail(t, m2, bt), adapted, 1e-5)
	// The reference copy of an adapted model is the merged model.
	ref, err := m.Clone()
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "reference logp", forwardOrFail(t, ref, bt), adapted, 1e-5)
}

func TestLoRADropout(t *testing.T) {
	seqs := randomSequences(rand.New(rand.NewPCG(8, 8)), 3, 32)
	bt, _ := NewBatch(seqs, 0, false, 32)
	m := tinyModel(t, tinyConfig(Llama), 4)
	if err := m.AddLoRA(LoRAConfig{Rank: 4, Alpha: 8, Dropout: 0.5, TargetModules: []string{"q_proj", "v_proj"}}); err != nil {
		t.Fatal(err)
	}
	randomizeLoRA(m, 3)
	eval := forwardOrFail(t, m, bt)
	closeTo(t, "eval is deterministic", forwardOrFail(t, m, bt), eval, 0)
	m.Training = true
	train := forwardOrFail(t, m, bt)
	same := true
	for i := range train {
		same = same && train[i] == eval[i]
	}
	if same {
		t.Error("dropout changed nothing while training")
	}
	// Backward with the same masks runs and touches only q/v adapters.
	m.ZeroGrad()
	if err := m.Backward(randomWeights(rand.New(rand.NewPCG(1, 1)), len(train)), nil); err != nil {
		t.Fatal(err)
	}
	for name, g := range m.Grads() {
		if !strings.Contains(name, "q_proj") && !strings.Contains(name, "v_proj") {
			t.Errorf("gradient for %s", name)
		}
		nz := false
		for _, v := range g {
			nz = nz || v != 0
		}
		if !nz {
			t.Errorf("%s: zero gradient", name)
		}
	}
}

func TestLoRAErrors(t *testing.T) {
	m, _ := New(tinyConfig(Qwen2), cpu.New())
	cases := []struct {
		cfg  LoRAConfig
		want string
	}{
		{LoRAConfig{Rank: 0, Alpha: 1, TargetModules: allModules}, "r must be positive"},
		{LoRAConfig{Rank: 2, Alpha: 0, TargetModules: allModules}, "lora_alpha must be positive"},
		{LoRAConfig{Rank: 2, Alpha: 1, Dropout: 1, TargetModules: allModules}, "lora_dropout"},
		{LoRAConfig{Rank: 2, Alpha: 1, TargetModules: []string{"qkv"}}, `unknown module "qkv"`},
		{LoRAConfig{Rank: 2, Alpha: 1}, "target_modules is empty"},
	}
	for _, c := range cases {
		if err := m.AddLoRA(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, AdapterConfig), []byte(`{"peft_type":"IA3"}`), 0o644)
	if err := m.LoadLoRA(dir); err == nil || !strings.Contains(err.Error(), "field peft_type") || !strings.Contains(err.Error(), AdapterConfig) {
		t.Errorf("IA3: %v", err)
	}
}

// An adapter directory this package cannot load as PEFT would is refused
// with the file and field or tensor, and the model is left as it was.
func TestLoadLoRARefuses(t *testing.T) {
	src := tinyModel(t, tinyConfig(Qwen2), 4)
	if err := src.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj"}}); err != nil {
		t.Fatal(err)
	}
	good := t.TempDir()
	if err := src.SaveLoRA(good, "tiny-base"); err != nil {
		t.Fatal(err)
	}
	goodCfg, _ := os.ReadFile(filepath.Join(good, AdapterConfig))
	goodW, err := safetensors.ReadFile(filepath.Join(good, AdapterWeights))
	if err != nil {
		t.Fatal(err)
	}
	editCfg := func(field, value string) func(string) {
		return func(dir string) {
			var c map[string]any
			json.Unmarshal(goodCfg, &c)
			var v any
			json.Unmarshal([]byte(value), &v)
			c[field] = v
			b, _ := json.Marshal(c)
			os.WriteFile(filepath.Join(dir, AdapterConfig), b, 0o644)
		}
	}
	editWeights := func(fn func([]safetensors.Tensor) []safetensors.Tensor) func(string) {
		return func(dir string) {
			ts := fn(append([]safetensors.Tensor(nil), goodW.Tensors...))
			if err := safetensors.WriteFile(filepath.Join(dir, AdapterWeights), ts, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	q0A := "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
	cases := []struct {
		name string
		edit func(dir string)
		file string
		want string
	}{
		{"modules_to_save", editCfg("modules_to_save", `["lm_head"]`), AdapterConfig, `field modules_to_save: ["lm_head"]`},
		{"layers_to_transform", editCfg("layers_to_transform", `[0]`), AdapterConfig, "field layers_to_transform: [0]"},
		{"rank_pattern", editCfg("rank_pattern", `{"q_proj":4}`), AdapterConfig, "field rank_pattern"},
		{"alpha_pattern", editCfg("alpha_pattern", `{"q_proj":4}`), AdapterConfig, "field alpha_pattern"},
		{"target_modules pattern", editCfg("target_modules", `"all-linear"`), AdapterConfig, `field target_modules: "all-linear": want a list`},
		{"dora", editCfg("use_dora", `true`), AdapterConfig, "field use_dora"},
		{"rslora", editCfg("use_rslora", `true`), AdapterConfig, "field use_rslora"},
		{"rank", editCfg("r", `0`), AdapterConfig, "r must be positive"},
		{"missing tensor", editWeights(func(ts []safetensors.Tensor) []safetensors.Tensor { return ts[1:] }), AdapterWeights, "tensor \"" + goodW.Tensors[0].Name + "\": missing"},
		{"misshaped tensor", editWeights(func(ts []safetensors.Tensor) []safetensors.Tensor {
			for i := range ts {
				if ts[i].Name == q0A {
					ts[i].Shape = []int{ts[i].Shape[1], ts[i].Shape[0]}
				}
			}
			return ts
		}), AdapterWeights, `tensor "` + q0A + `": shape [16 2], want [2 16]`},
		{"extra tensor", editWeights(func(ts []safetensors.Tensor) []safetensors.Tensor {
			x, _ := safetensors.FromFloat32("base_model.model.model.layers.0.mlp.up_proj.lora_A.weight", safetensors.F32, []int{2, 16}, make([]float32, 32))
			return append(ts, x)
		}), AdapterWeights, `tensor "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight": not an adapter weight of r=2 on q_proj, v_proj`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, AdapterConfig), goodCfg, 0o644)
			if err := safetensors.WriteFile(filepath.Join(dir, AdapterWeights), goodW.Tensors, nil); err != nil {
				t.Fatal(err)
			}
			c.edit(dir)
			m := tinyModel(t, tinyConfig(Qwen2), 4)
			err := m.LoadLoRA(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Join(dir, c.file)) {
				t.Fatalf("error %v, want %s and %q", err, c.file, c.want)
			}
			if n := len(m.TrainableParams()); n != len(m.Params()) || m.Layers[0].Attn.Q.LoRA != nil {
				t.Errorf("a refused adapter changed the model: %d trainable params, q_proj adapter %v", n, m.Layers[0].Attn.Q.LoRA)
			}
		})
	}
}
