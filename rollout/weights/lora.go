package weights

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// AdapterUpdate is a LoRA Update of adapter tensors by PEFT name (as a
// learner offers them) with their rank, alpha and target modules.
func AdapterUpdate(tensors map[string][]float32, rank int, alpha float64, targets []string) Update {
	return Update{Tensors: tensors, LoRA: &LoRA{Rank: rank, Alpha: alpha, TargetModules: append([]string(nil), targets...)}}
}

// MergeLoRA returns the adapted projections' weights W + (alpha/r)·B·A of
// a LoRA update, one tensor per adapted module ("<module>.weight"), from
// base weights by name: what a Receiver applies, for an engine the caller
// feeds itself.
func MergeLoRA(u Update, base map[string][]float32) (map[string][]float32, error) {
	if u.LoRA == nil {
		return nil, fmt.Errorf("lora: the update is a full one")
	}
	if err := u.validate(); err != nil {
		return nil, err
	}
	return mergeLoRA(u, base)
}

// SafeTensors is u's tensors sorted by name as float32 safetensors
// tensors. With needShapes every tensor must have its shape in u.Shapes
// (a checkpoint needs them); otherwise a tensor without one is flat.
func (u Update) SafeTensors(needShapes bool) ([]safetensors.Tensor, error) {
	names := make([]string, 0, len(u.Tensors))
	for n := range u.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]safetensors.Tensor, 0, len(names))
	for _, n := range names {
		shape, ok := u.Shapes[n]
		if !ok {
			if needShapes {
				return nil, fmt.Errorf("tensor %q: no shape (Update.Shapes): a checkpoint needs every shape", n)
			}
			shape = []int{len(u.Tensors[n])}
		}
		t, err := safetensors.FromFloat32(n, safetensors.F32, shape, u.Tensors[n])
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// WriteAdapter writes a LoRA update into dir as a PEFT adapter directory
// (adapter_model.safetensors, adapter_config.json with baseModel as
// base_model_name_or_path): what vLLM's /v1/load_lora_adapter and PEFT
// load.
func WriteAdapter(dir string, u Update, baseModel string) error {
	if u.LoRA == nil {
		return fmt.Errorf("write adapter %s: the update is a full one", dir)
	}
	if err := u.validate(); err != nil {
		return fmt.Errorf("write adapter %s: %w", dir, err)
	}
	ads, err := u.adapters()
	if err != nil {
		return err
	}
	shapes := map[string][]int{}
	for _, ad := range ads {
		shapes["base_model.model."+ad.module+".lora_A.weight"] = []int{u.LoRA.Rank, ad.in}
		shapes["base_model.model."+ad.module+".lora_B.weight"] = []int{ad.out, u.LoRA.Rank}
	}
	u.Shapes = shapes
	ts, err := u.SafeTensors(true)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := safetensors.WriteFile(filepath.Join(dir, model.AdapterWeights), ts, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	cfg := map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": u.LoRA.Rank, "lora_alpha": u.LoRA.Alpha,
		"lora_dropout": 0.0, "target_modules": u.LoRA.TargetModules, "bias": "none", "inference_mode": true,
		"base_model_name_or_path": baseModel}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, model.AdapterConfig), js, 0o644)
}
