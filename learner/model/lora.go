package model

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rlnode/rlnode/internal/readfile"
	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// LoRA is a low-rank adapter on a Linear: y += (Alpha/Rank) * drop(x) A^T B^T
// with A rank×in and B out×rank, as PEFT defines it.
type LoRA struct {
	Rank    int
	Alpha   float64
	Dropout float64
	A, B    *Param
}

// Scaling is Alpha/Rank.
func (a *LoRA) Scaling() float32 { return float32(a.Alpha / float64(a.Rank)) }

// LoRAConfig selects where adapters go and their size. TargetModules are
// module names as PEFT spells them (q_proj, k_proj, v_proj, o_proj,
// gate_proj, up_proj, down_proj).
type LoRAConfig struct {
	Rank          int
	Alpha         float64
	Dropout       float64
	TargetModules []string
	Seed          uint64
}

var moduleNames = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// moduleName is "self_attn.q_proj" for index 0, matching Layer.linears.
func moduleName(i int) string {
	if i < 4 {
		return "self_attn." + moduleNames[i]
	}
	return "mlp." + moduleNames[i]
}

func (c *LoRAConfig) validate() error {
	switch {
	case c.Rank <= 0:
		return fmt.Errorf("lora: r must be positive, got %d", c.Rank)
	case !(c.Alpha > 0):
		return fmt.Errorf("lora: lora_alpha must be positive, got %v", c.Alpha)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("lora: lora_dropout must be in [0, 1), got %v", c.Dropout)
	case len(c.TargetModules) == 0:
		return fmt.Errorf("lora: target_modules is empty")
	}
	for _, t := range c.TargetModules {
		if !slices.Contains(moduleNames, t) {
			return fmt.Errorf("lora: target_modules: unknown module %q (want some of %s)", t, strings.Join(moduleNames, ", "))
		}
	}
	return nil
}

// CheckRank reports a rank above the smaller dimension of a target
// module's matrix in a model of config mc: such adapters are no longer low
// rank, and a mistyped rank (100000000) would allocate without bound.
func (c LoRAConfig) CheckRank(mc *Config) error {
	worst, wi, wo := "", 0, 0 // the target with the smallest dimension
	for _, t := range c.TargetModules {
		if in, out, ok := mc.LinearDims(t); ok && (worst == "" || min(in, out) < min(wi, wo)) {
			worst, wi, wo = t, in, out
		}
	}
	if worst != "" && c.Rank > min(wi, wo) {
		return fmt.Errorf("lora: r %d exceeds %s's smaller dimension %d (%d inputs, %d outputs): want at most %d", c.Rank, worst, min(wi, wo), wi, wo, min(wi, wo))
	}
	return nil
}

// AddLoRA freezes the base weights and puts fresh adapters on the target
// modules of every layer: A from PEFT's default Kaiming-uniform
// (bound 1/sqrt(in)), B zero, so the model's outputs are unchanged. A value
// head stays trainable.
func (m *Model) AddLoRA(cfg LoRAConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := cfg.CheckRank(&m.Config); err != nil {
		return err
	}
	m.freezeBase()
	m.dropPass()
	m.lora = &cfg
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6c6f7261))
	for i, l := range m.Layers {
		for j, lin := range l.linears() {
			if !slices.Contains(cfg.TargetModules, moduleNames[j]) {
				continue
			}
			pre := fmt.Sprintf("base_model.model.model.layers.%d.%s.", i, moduleName(j))
			a := &LoRA{Rank: cfg.Rank, Alpha: cfg.Alpha, Dropout: cfg.Dropout,
				A: m.newParam(pre+"lora_A.weight", cfg.Rank, lin.In),
				B: m.newParam(pre+"lora_B.weight", lin.Out, cfg.Rank)}
			bound := 1 / math.Sqrt(float64(lin.In))
			v := make([]float32, a.A.Len())
			for k := range v {
				v[k] = float32((2*rng.Float64() - 1) * bound)
			}
			m.B.Upload(a.A.W, v)
			lin.LoRA = a
		}
	}
	return nil
}

func (m *Model) newParam(name string, shape ...int) *Param {
	p := &Param{Name: name, Shape: shape}
	p.W = m.B.Alloc(p.Len())
	p.G = m.B.Alloc(p.Len())
	return p
}

func (m *Model) dropPass() {
	if m.pass != nil {
		m.pass.free(m.B)
		m.pass = nil
	}
}

// drawDropout fills the LoRA dropout masks: while training, each input
// element is kept with probability 1-p and scaled by 1/(1-p); otherwise the
// masks are all ones.
func (m *Model) drawDropout(p *pass, N int) {
	for i, a := range p.layers {
		// In the layer's projection order, not the map's (random): the
		// masks must repeat with the seed.
		for _, lin := range m.Layers[i].linears() {
			la := a.lora[lin]
			if la == nil || la.mask == nil {
				continue
			}
			v := make([]float32, N*lin.In)
			keep := float32(1 / (1 - lin.LoRA.Dropout))
			for i := range v {
				if !m.Training || m.rng().Float64() >= lin.LoRA.Dropout {
					v[i] = keep
					if !m.Training {
						v[i] = 1
					}
				}
			}
			m.B.Upload(la.mask, v)
		}
	}
}

func (m *Model) rng() *rand.Rand {
	if m.dropRNG == nil {
		m.dropPCG = rand.NewPCG(m.DropoutSeed, 0x64726f70)
		m.dropRNG = rand.New(m.dropPCG)
	}
	return m.dropRNG
}

// mergeInto adds Scaling * B A to dst's weight.
func (a *LoRA) mergeInto(b backend.Backend, dst *Linear) {
	b.MatMul(false, false, dst.Out, dst.In, a.Rank, a.Scaling(), a.B.W, a.A.W, 1, dst.Weight.W)
}

// MergeLoRA folds every adapter into its base weight and removes the
// adapters; the merged model computes what the adapted one did (without
// dropout).
func (m *Model) MergeLoRA() {
	for _, l := range m.Layers {
		for _, lin := range l.linears() {
			if lin.LoRA != nil {
				lin.LoRA.mergeInto(m.B, lin)
				m.B.Free(lin.LoRA.A.W)
				m.B.Free(lin.LoRA.B.W)
				lin.LoRA = nil
			}
		}
	}
	m.lora = nil
	m.dropPass()
}

// adapterConfig is PEFT's adapter_config.json for a LoRA adapter.
type adapterConfig struct {
	PeftType         string   `json:"peft_type"`
	TaskType         string   `json:"task_type"`
	R                int      `json:"r"`
	LoraAlpha        float64  `json:"lora_alpha"`
	LoraDropout      float64  `json:"lora_dropout"`
	TargetModules    []string `json:"target_modules"`
	Bias             string   `json:"bias"`
	FanInFanOut      bool     `json:"fan_in_fan_out"`
	InferenceMode    bool     `json:"inference_mode"`
	UseRSLoRA        bool     `json:"use_rslora"`
	UseDoRA          bool     `json:"use_dora"`
	InitLoraWeights  bool     `json:"init_lora_weights"`
	BaseModelName    string   `json:"base_model_name_or_path"`
	ModulesToSave    []string `json:"modules_to_save"`
	LayersToTransfom []int    `json:"layers_to_transform"`
}

// adapterConfigIn is adapter_config.json as read: PEFT fields this package
// cannot honour are kept raw so that a file using them is refused rather
// than loaded as something else.
type adapterConfigIn struct {
	PeftType          string          `json:"peft_type"`
	R                 int             `json:"r"`
	LoraAlpha         float64         `json:"lora_alpha"`
	LoraDropout       float64         `json:"lora_dropout"`
	TargetModules     json.RawMessage `json:"target_modules"`
	Bias              string          `json:"bias"`
	FanInFanOut       bool            `json:"fan_in_fan_out"`
	UseRSLoRA         bool            `json:"use_rslora"`
	UseDoRA           bool            `json:"use_dora"`
	ModulesToSave     json.RawMessage `json:"modules_to_save"`
	LayersToTransform json.RawMessage `json:"layers_to_transform"`
	RankPattern       json.RawMessage `json:"rank_pattern"`
	AlphaPattern      json.RawMessage `json:"alpha_pattern"`
}

// set reports whether a raw JSON field holds something other than null or
// an empty list/object.
func set(raw json.RawMessage) bool {
	switch strings.TrimSpace(string(raw)) {
	case "", "null", "[]", "{}":
		return false
	}
	return true
}

// loraConfig checks an adapter_config.json and returns its LoRAConfig; the
// error names the field.
func (ac *adapterConfigIn) loraConfig() (LoRAConfig, error) {
	switch {
	case ac.PeftType != "LORA":
		return LoRAConfig{}, fmt.Errorf("field peft_type: %q is not LORA", ac.PeftType)
	case ac.UseRSLoRA:
		return LoRAConfig{}, fmt.Errorf("field use_rslora: rank-stabilized scaling is not supported")
	case ac.UseDoRA:
		return LoRAConfig{}, fmt.Errorf("field use_dora: DoRA is not supported")
	case ac.FanInFanOut:
		return LoRAConfig{}, fmt.Errorf("field fan_in_fan_out: transposed (Conv1D) weights are not supported")
	case ac.Bias != "" && ac.Bias != "none":
		return LoRAConfig{}, fmt.Errorf("field bias: %q is not supported (want none)", ac.Bias)
	case set(ac.ModulesToSave):
		return LoRAConfig{}, fmt.Errorf("field modules_to_save: %s: fully trained extra modules are not supported", ac.ModulesToSave)
	case set(ac.LayersToTransform):
		return LoRAConfig{}, fmt.Errorf("field layers_to_transform: %s: adapters on a subset of layers are not supported", ac.LayersToTransform)
	case set(ac.RankPattern):
		return LoRAConfig{}, fmt.Errorf("field rank_pattern: %s: per-module ranks are not supported", ac.RankPattern)
	case set(ac.AlphaPattern):
		return LoRAConfig{}, fmt.Errorf("field alpha_pattern: %s: per-module alphas are not supported", ac.AlphaPattern)
	}
	var targets []string
	if err := json.Unmarshal(ac.TargetModules, &targets); err != nil {
		return LoRAConfig{}, fmt.Errorf("field target_modules: %s: want a list of module names (a pattern string is not supported)", ac.TargetModules)
	}
	cfg := LoRAConfig{Rank: ac.R, Alpha: ac.LoraAlpha, Dropout: ac.LoraDropout, TargetModules: targets}
	return cfg, cfg.validate()
}

// Adapter file names PEFT and vLLM read.
const (
	AdapterWeights = "adapter_model.safetensors"
	AdapterConfig  = "adapter_config.json"
)

// SaveLoRA writes the adapters as a PEFT adapter directory; a value head
// goes beside them in ValueHeadFile.
func (m *Model) SaveLoRA(dir, baseModel string) error {
	if m.lora == nil {
		return fmt.Errorf("save lora %s: the model has no adapters", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save lora: %w", err)
	}
	var ts []safetensors.Tensor
	for _, p := range m.loraParams() {
		t, err := safetensors.FromFloat32(p.Name, safetensors.F32, p.Shape, m.download(p.W))
		if err != nil {
			return fmt.Errorf("save lora %s: %w", dir, err)
		}
		ts = append(ts, t)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, AdapterWeights), ts, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	cfg := adapterConfig{PeftType: "LORA", TaskType: "CAUSAL_LM", R: m.lora.Rank, LoraAlpha: m.lora.Alpha,
		LoraDropout: m.lora.Dropout, TargetModules: m.lora.TargetModules, Bias: "none",
		InferenceMode: true, InitLoraWeights: true, BaseModelName: baseModel}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, AdapterConfig), js, 0o644); err != nil {
		return fmt.Errorf("save lora: %w", err)
	}
	if m.Value != nil {
		if err := m.saveValueHead(dir); err != nil {
			return fmt.Errorf("save lora %s: %w", dir, err)
		}
	}
	return nil
}

func (m *Model) loraParams() []*Param {
	var out []*Param
	for _, l := range m.Layers {
		for _, lin := range l.linears() {
			if lin.LoRA != nil {
				out = append(out, lin.LoRA.A, lin.LoRA.B)
			}
		}
	}
	return out
}

// LoadLoRA reads a PEFT adapter directory onto the model (adding adapters
// as its config says, then loading their weights), and the value head in
// ValueHeadFile when the directory has one. Config and weights are checked
// whole first: on error the model is left as it was.
func (m *Model) LoadLoRA(dir string) error {
	return m.LoadLoRAContext(context.Background(), dir)
}

// LoadLoRAContext is LoadLoRA that gives up once ctx is done (checked
// while the adapter's weights are read and between its tensors), with an
// error wrapping ctx's and the model left as it was: a large model's
// adapter is hundreds of MiB, which a stop should not wait for.
func (m *Model) LoadLoRAContext(ctx context.Context, dir string) error {
	cpath := filepath.Join(dir, AdapterConfig)
	b, err := readfile.Regular(cpath, maxConfigBytes)
	if err != nil {
		return fmt.Errorf("load lora: %w", err)
	}
	var ac adapterConfigIn
	if err := json.Unmarshal(b, &ac); err != nil {
		return fmt.Errorf("load lora %s: %w", cpath, err)
	}
	cfg, err := ac.loraConfig()
	if err != nil {
		return fmt.Errorf("load lora %s: %w", cpath, err)
	}
	wpath := filepath.Join(dir, AdapterWeights)
	f, err := safetensors.ReadFileContext(ctx, wpath)
	if err != nil {
		return fmt.Errorf("load lora: %w", err)
	}
	want := m.loraShapes(cfg)
	values := map[string][]float32{}
	for name, shape := range want {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("load lora %s: %w", wpath, err)
		}
		t, ok := f.Tensor(name)
		if !ok {
			return fmt.Errorf("load lora %s: tensor %q: missing", wpath, name)
		}
		if !sameShape(t.Shape, shape) {
			return fmt.Errorf("load lora %s: tensor %q: shape %v, want %v", wpath, name, t.Shape, shape)
		}
		v, err := t.FiniteFloat32()
		if err != nil {
			return fmt.Errorf("load lora %s: %w", wpath, err)
		}
		values[name] = v
	}
	for _, name := range f.Names() {
		if _, ok := want[name]; !ok {
			return fmt.Errorf("load lora %s: tensor %q: not an adapter weight of r=%d on %s", wpath, name, cfg.Rank, strings.Join(cfg.TargetModules, ", "))
		}
	}
	head, err := m.readValueHead(dir)
	if err != nil {
		return fmt.Errorf("load lora: %w", err)
	}
	if err := m.AddLoRA(cfg); err != nil {
		return fmt.Errorf("load lora %s: %w", cpath, err)
	}
	for _, p := range m.loraParams() {
		m.B.Upload(p.W, values[p.Name])
	}
	if head != nil {
		m.setValueHead(head)
	}
	return nil
}

// loraShapes names the adapter tensors AddLoRA(cfg) would create, with
// their shapes.
func (m *Model) loraShapes(cfg LoRAConfig) map[string][]int {
	out := map[string][]int{}
	for i, l := range m.Layers {
		for j, lin := range l.linears() {
			if !slices.Contains(cfg.TargetModules, moduleNames[j]) {
				continue
			}
			pre := fmt.Sprintf("base_model.model.model.layers.%d.%s.", i, moduleName(j))
			out[pre+"lora_A.weight"] = []int{cfg.Rank, lin.In}
			out[pre+"lora_B.weight"] = []int{lin.Out, cfg.Rank}
		}
	}
	return out
}

// Validate reports the first field that makes no adapter.
func (c LoRAConfig) Validate() error { return c.validate() }

// LoRA is the adapters' configuration, or nil when the model has none.
func (m *Model) LoRA() *LoRAConfig {
	if m.lora == nil {
		return nil
	}
	c := *m.lora
	c.TargetModules = slices.Clone(c.TargetModules)
	return &c
}

// LoRAWeights returns a host copy of every adapter tensor (A and B of each
// adapted projection) by its PEFT name; empty without adapters.
func (m *Model) LoRAWeights() map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range m.loraParams() {
		out[p.Name] = m.download(p.W)
	}
	return out
}

// MergedWeights returns a host copy of the weights the adapted model
// computes with: Weights, with each adapted projection's weight replaced
// by W + (Alpha/Rank)·B·A. Without adapters it is Weights.
func (m *Model) MergedWeights() map[string][]float32 {
	w, _ := m.MergedWeightsContext(context.Background())
	return w
}

// MergedWeightsContext is MergedWeights that checks ctx between
// parameters and layers (WeightsContext) and gives up, with an error
// wrapping ctx's, once it is done. The weights are MergedWeights'.
func (m *Model) MergedWeightsContext(ctx context.Context) (map[string][]float32, error) {
	w, err := m.WeightsContext(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range m.Layers {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("merge the adapters into the model's weights: %w", err)
		}
		for _, lin := range l.linears() {
			a := lin.LoRA
			if a == nil {
				continue
			}
			wt := w[lin.Weight.Name]
			av, bv := m.download(a.A.W), m.download(a.B.W)
			s := a.Scaling()
			for o := 0; o < lin.Out; o++ {
				row := wt[o*lin.In : (o+1)*lin.In]
				for k := 0; k < a.Rank; k++ {
					c := s * bv[o*a.Rank+k]
					if c == 0 {
						continue
					}
					for i, x := range av[k*lin.In : (k+1)*lin.In] {
						row[i] += c * x
					}
				}
			}
		}
	}
	return w, nil
}

// DropoutState is the state of the LoRA dropout's random source (nil
// before the first mask was drawn), for checkpoints.
func (m *Model) DropoutState() ([]byte, error) {
	if m.dropPCG == nil {
		return nil, nil
	}
	return m.dropPCG.MarshalBinary()
}

// SetDropoutState restores DropoutState's bytes; nil starts the source
// afresh from DropoutSeed.
func (m *Model) SetDropoutState(b []byte) error {
	m.dropRNG, m.dropPCG = nil, nil
	if b == nil {
		return nil
	}
	m.rng()
	if err := m.dropPCG.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("lora dropout state: %w", err)
	}
	return nil
}

// HasAdapter reports whether dir holds a PEFT adapter (AdapterConfig).
func HasAdapter(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, AdapterConfig))
	return err == nil
}

// LoadServed loads the model a checkpoint directory serves: its weights
// and, when the directory also holds a PEFT adapter (an rlnode LoRA
// checkpoint keeps the frozen base in model.safetensors and the adapter
// beside it), the adapter merged into them. The result is for inference:
// its weights are frozen.
func LoadServed(dir string, b backend.Backend) (*Model, error) {
	return LoadServedContext(context.Background(), dir, b)
}

// LoadServedContext is LoadServed that gives up once ctx is done, as
// LoadContext does.
func LoadServedContext(ctx context.Context, dir string, b backend.Backend) (*Model, error) {
	m, err := LoadContext(ctx, dir, b)
	if err != nil {
		return nil, err
	}
	if !HasAdapter(dir) {
		return m, nil
	}
	if err := m.LoadLoRAContext(ctx, dir); err != nil {
		m.Release() // device memory goes back
		return nil, err
	}
	m.MergeLoRA()
	return m, nil
}
