package learner

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// Files of a learner checkpoint directory, beside the model's config.json
// and model.safetensors (Hugging Face layout, loadable by model.Load and
// the native engine).
const (
	OptimizerFile = "optimizer.safetensors" // AdamW moments, torch's state keys; metadata "step"
	ReferenceFile = "reference.safetensors" // the frozen KL reference policy, when the loss has a KL term
	StateFile     = "learner_state.json"
)

// checkpointState is StateFile.
type checkpointState struct {
	Step      int    `json:"step"`
	Algorithm string `json:"algorithm"`
	Seed      uint64 `json:"seed"`
}

// Save writes a checkpoint to dir: policy weights (float32), optimizer
// state, the reference policy when there is one, and the step.
func (l *Learner) Save(dir string) error {
	if err := l.SaveModel(dir); err != nil {
		return err
	}
	st := l.trainer.Opt.State()
	ts := make([]safetensors.Tensor, 0, len(st.Tensors))
	for _, t := range st.Tensors {
		x, err := safetensors.FromFloat32(t.Name, safetensors.F32, []int{len(t.Data)}, t.Data)
		if err != nil {
			return fmt.Errorf("learner: save %s: optimizer: %w", dir, err)
		}
		ts = append(ts, x)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, OptimizerFile), ts, map[string]string{"step": strconv.Itoa(st.Step)}); err != nil {
		return fmt.Errorf("learner: save %s: optimizer: %w", dir, err)
	}
	return removeShardFiles(dir, 0)
}

// SaveModel writes everything of a checkpoint but the optimizer state:
// policy weights, the reference policy when there is one, and
// learner_state.json. A ZeRO-1 group's rank 0 calls it while every rank
// writes its optimizer shard (WriteOptimizerShard).
func (l *Learner) SaveModel(dir string) error {
	if err := l.model.Save(dir, safetensors.F32); err != nil {
		return fmt.Errorf("learner: save %s: %w", dir, err)
	}
	if l.ref != nil {
		var rt []safetensors.Tensor
		for _, p := range l.ref.Params() {
			v := make([]float32, p.Len())
			l.ref.B.Download(v, p.W)
			x, err := safetensors.FromFloat32(p.Name, safetensors.F32, p.Shape, v)
			if err != nil {
				return fmt.Errorf("learner: save %s: reference: %w", dir, err)
			}
			rt = append(rt, x)
		}
		if err := safetensors.WriteFile(filepath.Join(dir, ReferenceFile), rt, nil); err != nil {
			return fmt.Errorf("learner: save %s: reference: %w", dir, err)
		}
	}
	js, err := json.MarshalIndent(checkpointState{Step: l.step, Algorithm: l.cfg.Algorithm, Seed: l.cfg.Seed}, "", "  ")
	if err != nil {
		return fmt.Errorf("learner: save %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, StateFile), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("learner: save %s: %w", dir, err)
	}
	return nil
}

// Load replaces the learner's policy, optimizer state, reference and step
// with a checkpoint written by Save. The model's architecture must match
// the learner's. Everything is read and checked before anything changes.
func (l *Learner) Load(dir string) error {
	m, err := model.Load(dir, cpu.New())
	if err != nil {
		return fmt.Errorf("learner: load: %w", err)
	}
	if err := sameArch(m.Config, l.model.Config); err != nil {
		return fmt.Errorf("learner: load %s: %w", dir, err)
	}
	if (m.Value == nil) != (l.model.Value == nil) {
		return fmt.Errorf("learner: load %s: value head present %v, the learner's %v", dir, m.Value != nil, l.model.Value != nil)
	}
	var state checkpointState
	js, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return fmt.Errorf("learner: load: %w", err)
	}
	if err := json.Unmarshal(js, &state); err != nil {
		return fmt.Errorf("learner: load %s: %w", filepath.Join(dir, StateFile), err)
	}
	if state.Step < 0 {
		return fmt.Errorf("learner: load %s: step %d is negative", filepath.Join(dir, StateFile), state.Step)
	}
	sizes := map[string]int{}
	for _, p := range m.TrainableParams() {
		sizes[p.Name] = p.Len()
	}
	ost, optPath, err := ReadOptimizerState(dir, sizes)
	if err != nil {
		return fmt.Errorf("learner: load: %w", err)
	}
	var ref *model.Model
	if l.ref != nil {
		refPath := filepath.Join(dir, ReferenceFile)
		rf, err := safetensors.ReadFile(refPath)
		if err != nil {
			return fmt.Errorf("learner: load: %w", err)
		}
		if ref, err = m.Clone(); err != nil {
			return fmt.Errorf("learner: load %s: %w", dir, err)
		}
		for _, p := range ref.Params() {
			v, shape, err := rf.Float32(p.Name)
			if err != nil {
				return fmt.Errorf("learner: load %s: %w", refPath, err)
			}
			if len(v) != p.Len() {
				return fmt.Errorf("learner: load %s: tensor %q: shape %v, want %v", refPath, p.Name, shape, p.Shape)
			}
			ref.B.Upload(p.W, v)
		}
	}
	tr := &model.Trainer{Model: m, Opt: optim.NewAdamW(l.cfg.Beta1, l.cfg.Beta2, l.cfg.Eps, l.cfg.WeightDecay), MaxGradNorm: l.cfg.MaxGradNorm}
	params := make([]*optim.Param, 0)
	for _, p := range m.TrainableParams() {
		params = append(params, &optim.Param{Name: p.Name, Data: make([]float32, p.Len()), Grad: make([]float32, p.Len())})
	}
	if err := tr.Opt.LoadState(params, ost); err != nil {
		return fmt.Errorf("learner: load %s: %w", optPath, err)
	}
	l.model, l.ref, l.trainer, l.step = m, ref, tr, state.Step
	return nil
}

// sameArch reports the first architecture field where a and b differ.
func sameArch(a, b model.Config) error {
	type f struct {
		name string
		x, y any
	}
	for _, c := range []f{
		{"architecture", a.Architecture, b.Architecture}, {"hidden_size", a.HiddenSize, b.HiddenSize},
		{"intermediate_size", a.IntermediateSize, b.IntermediateSize}, {"num_hidden_layers", a.NumLayers, b.NumLayers},
		{"num_attention_heads", a.NumHeads, b.NumHeads}, {"num_key_value_heads", a.NumKVHeads, b.NumKVHeads},
		{"head_dim", a.HeadDim, b.HeadDim}, {"vocab_size", a.VocabSize, b.VocabSize},
		{"tie_word_embeddings", a.TieWordEmbeddings, b.TieWordEmbeddings},
	} {
		if c.x != c.y {
			return fmt.Errorf("config %s is %v, the learner's %v", c.name, c.x, c.y)
		}
	}
	return nil
}
