package weightsync

import (
	"fmt"
	"path/filepath"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/native"
)

// AdapterUpdate is a LoRA Update of adapter tensors by PEFT name (as a
// learner offers them) with their rank, alpha and target modules.
func AdapterUpdate(tensors map[string][]float32, rank int, alpha float64, targets []string) Update {
	return Update{Tensors: tensors, LoRA: &LoRA{Rank: rank, Alpha: alpha, TargetModules: append([]string(nil), targets...)}}
}

// MergeLoRA returns the adapted projections' weights W + (alpha/r)·B·A of
// a LoRA update, one tensor per adapted module ("<module>.weight"), from
// base weights by name: what a Receiver applies, for an engine the caller
// feeds itself (the driver's in-process engine).
func MergeLoRA(u Update, base map[string][]float32) (map[string][]float32, error) {
	if u.LoRA == nil {
		return nil, fmt.Errorf("lora: the update is a full one")
	}
	if err := u.validate(); err != nil {
		return nil, err
	}
	return mergeLoRA(u, base)
}

// LoadNative starts a native engine on a checkpoint directory as
// native.Load does, but serves base plus adapter when the directory also
// holds a PEFT adapter (an rlnode LoRA checkpoint: the frozen base in
// model.safetensors, the adapter beside it). CheckpointBase still reads
// the base from it, which later adapter pushes merge onto.
func LoadNative(dir string, cfg native.Config) (*native.Engine, error) {
	if !model.HasAdapter(dir) {
		return native.Load(dir, cfg)
	}
	m, err := model.LoadServed(dir, cpu.New())
	if err != nil {
		return nil, fmt.Errorf("native engine: %w", err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("native engine: model %s: %w", dir, err)
	}
	return native.New(m, tok, cfg)
}
