package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// Param is one parameter tensor with its gradient, named as in the
// Hugging Face checkpoint.
type Param struct {
	Name  string
	Shape []int
	W     backend.Tensor
	G     backend.Tensor // nil while frozen
}

// Len is the number of elements.
func (p *Param) Len() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// Linear is y = x W^T + b with W out×in, as torch.nn.Linear, plus an
// optional LoRA adapter.
type Linear struct {
	In, Out int
	Weight  *Param
	Bias    *Param // nil without bias
	LoRA    *LoRA  // nil without adapter
}

// Attention is the self-attention block's projections.
type Attention struct {
	Q, K, V, O *Linear
}

// MLP is the SwiGLU feed-forward block: down(silu(gate(x)) * up(x)).
type MLP struct {
	Gate, Up, Down *Linear
}

// Layer is one decoder layer: x + attn(norm(x)), then h + mlp(norm(h)).
type Layer struct {
	InputNorm *Param
	Attn      Attention
	PostNorm  *Param
	MLP       MLP
}

// Model is the transformer with its parameters on a backend.
type Model struct {
	Config Config
	B      backend.Backend
	Embed  *Param // model.embed_tokens.weight, vocab×hidden
	Layers []*Layer
	Norm   *Param     // model.norm.weight
	LMHead *Param     // lm_head.weight; the embedding when tied
	Value  *ValueHead // the critic's value head; nil without one (AddValueHead)

	params []*Param // checkpoint order
	frozen bool     // no parameter gradients (reference model, LoRA base)
	pass   *pass    // activations of the last Forward

	// CheckpointActivations keeps, of each decoder layer's activations,
	// only its input (the residual stream) through the forward pass, and
	// recomputes the rest layer by layer during the backward pass: one
	// layer's activations in memory instead of every layer's, for one
	// more forward pass of the layers. Gradients are the same bits.
	CheckpointActivations bool

	// ActivationsBF16 keeps each decoder layer's large activations (norm
	// outputs, projections, attention output, MLP) as bf16 between the
	// forward and the backward pass, on a backend with
	// backend.BF16Storage: the layers compute in float32 in one shared
	// set of tensors, each layer's are rounded into bf16 copies after its
	// forward pass and widened back before its backward pass (1/rms and
	// the attention's log-sum-exp stay float32). About half the
	// activation memory; the gradients then differ from float32's by the
	// rounding. Checkpointing, which keeps none, takes precedence.
	ActivationsBF16 bool

	// Training turns LoRA dropout on; DropoutSeed seeds its masks.
	Training    bool
	DropoutSeed uint64
	dropRNG     *rand.Rand
	dropPCG     *rand.PCG // dropRNG's source, for DropoutState
	lora        *LoRAConfig
}

// New allocates a model with zero weights. Gradient buffers are allocated
// on first use (ZeroGrad, Backward, Grads, TrainableParams), so a model that
// only runs forward (inference, a reference policy) holds its weights once.
func New(cfg Config, b backend.Backend) (*Model, error) {
	if err := cfg.validate(""); err != nil {
		return nil, fmt.Errorf("new model: %w", err)
	}
	return build(cfg, b), nil
}

// build lays out the model of a valid cfg; with a nil backend it
// allocates nothing (the parameters' names and shapes only).
func build(cfg Config, b backend.Backend) *Model {
	m := &Model{Config: cfg, B: b}
	h, d := cfg.HiddenSize, cfg.HeadDim
	param := func(name string, shape ...int) *Param {
		p := &Param{Name: name, Shape: shape}
		if b != nil {
			p.W = b.Alloc(p.Len())
		}
		m.params = append(m.params, p)
		return p
	}
	linear := func(name string, in, out int, bias bool) *Linear {
		l := &Linear{In: in, Out: out, Weight: param(name+".weight", out, in)}
		if bias {
			l.Bias = param(name+".bias", out)
		}
		return l
	}
	m.Embed = param("model.embed_tokens.weight", cfg.VocabSize, h)
	for i := 0; i < cfg.NumLayers; i++ {
		pre := fmt.Sprintf("model.layers.%d.", i)
		l := &Layer{}
		l.InputNorm = param(pre+"input_layernorm.weight", h)
		l.Attn.Q = linear(pre+"self_attn.q_proj", h, cfg.NumHeads*d, cfg.AttentionBias)
		l.Attn.K = linear(pre+"self_attn.k_proj", h, cfg.NumKVHeads*d, cfg.AttentionBias)
		l.Attn.V = linear(pre+"self_attn.v_proj", h, cfg.NumKVHeads*d, cfg.AttentionBias)
		l.Attn.O = linear(pre+"self_attn.o_proj", cfg.NumHeads*d, h, false)
		l.PostNorm = param(pre+"post_attention_layernorm.weight", h)
		l.MLP.Gate = linear(pre+"mlp.gate_proj", h, cfg.IntermediateSize, false)
		l.MLP.Up = linear(pre+"mlp.up_proj", h, cfg.IntermediateSize, false)
		l.MLP.Down = linear(pre+"mlp.down_proj", cfg.IntermediateSize, h, false)
		m.Layers = append(m.Layers, l)
	}
	m.Norm = param("model.norm.weight", h)
	if cfg.TieWordEmbeddings {
		m.LMHead = m.Embed
	} else {
		m.LMHead = param("lm_head.weight", cfg.VocabSize, h)
	}
	return m
}

// Params lists the parameters in checkpoint order (the tied lm_head once).
func (m *Model) Params() []*Param { return m.params }

// NumParams counts parameter elements.
func (m *Model) NumParams() int {
	n := 0
	for _, p := range m.params {
		n += p.Len()
	}
	return n
}

// Freeze drops the parameter gradients: the model still runs forward (a
// reference policy for KL) and backward to its inputs and adapters, but
// computes no weight gradients.
//
// A value head is frozen with the rest.
func (m *Model) Freeze() {
	m.freezeBase()
	if v := m.Value; v != nil {
		for _, p := range v.params() {
			if p.G != nil {
				m.B.Free(p.G)
				p.G = nil
			}
		}
		v.frozen = true
	}
}

// freezeBase freezes every weight but the value head's.
func (m *Model) freezeBase() {
	for _, p := range m.params {
		if p.G != nil && !m.Value.owns(p) {
			m.B.Free(p.G)
			p.G = nil
		}
	}
	m.frozen = true
}

// Clone returns a frozen copy of the weights on the same backend: the
// reference policy. LoRA adapters are merged into the copy; a value head is
// copied (frozen too).
func (m *Model) Clone() (*Model, error) {
	c, err := New(m.Config, m.B)
	if err != nil {
		return nil, err
	}
	if m.Value != nil {
		c.addValueHead()
	}
	c.Freeze()
	for i, p := range m.params {
		m.B.Copy(c.params[i].W, p.W)
	}
	for li, l := range m.Layers {
		for j, lin := range l.linears() {
			if lin.LoRA != nil {
				lin.LoRA.mergeInto(m.B, c.Layers[li].linears()[j])
			}
		}
	}
	return c, nil
}

// allocGrads gives every weight of an unfrozen model, and a trainable
// value head, its gradient buffer.
func (m *Model) allocGrads() {
	for _, p := range m.params {
		if p.G == nil && (!m.frozen || m.Value.trains(p)) {
			p.G = m.B.Alloc(p.Len())
		}
	}
}

// ZeroGrad clears every gradient (parameters and adapters).
func (m *Model) ZeroGrad() {
	for _, p := range m.TrainableParams() {
		m.B.Zero(p.G)
	}
}

// TrainableParams are the parameters that receive gradients: the adapters
// when the model has LoRA, else every weight unless frozen; a value head
// added to a model with LoRA trains beside the adapters.
func (m *Model) TrainableParams() []*Param {
	m.allocGrads()
	out := m.loraParams()
	if !m.frozen {
		out = append(out, m.params...)
	} else if v := m.Value; v != nil && !v.frozen {
		out = append(out, v.params()...)
	}
	return out
}

func (l *Layer) linears() []*Linear {
	return []*Linear{l.Attn.Q, l.Attn.K, l.Attn.V, l.Attn.O, l.MLP.Gate, l.MLP.Up, l.MLP.Down}
}

// InitRandom fills weights as Hugging Face initializes them: normal with
// std 0.02 for matrices and embeddings, 1 for norm weights, 0 for biases.
func (m *Model) InitRandom(seed uint64) {
	_ = m.InitRandomContext(context.Background(), seed)
}

// InitRandomContext is InitRandom that checks ctx between tensors and
// returns its error, the weights partly filled, once it is done: a large
// model's init takes seconds that an interrupted run should not wait.
// The weights it fills are InitRandom's.
func (m *Model) InitRandomContext(ctx context.Context, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x726c6e6f6465))
	for _, p := range m.params {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("init model: %w", err)
		}
		v := make([]float32, p.Len())
		switch {
		case len(p.Shape) == 2:
			for i := range v {
				v[i] = float32(rng.NormFloat64() * 0.02)
			}
		case isNorm(p.Name):
			for i := range v {
				v[i] = 1
			}
		}
		m.B.Upload(p.W, v)
	}
	return nil
}

func isNorm(name string) bool {
	return strings.HasSuffix(name, "layernorm.weight") || name == "model.norm.weight"
}

// Load reads dir/config.json and the checkpoint's weights (single file or
// sharded; float32, bfloat16 or float16, converted to float32 master
// weights). A checkpoint holding v_head.summary.weight gets a value head.
func Load(dir string, b backend.Backend) (*Model, error) {
	return LoadContext(context.Background(), dir, b)
}

// LoadContext is Load that checks ctx while it reads the checkpoint's
// files and between tensors as it converts and uploads them, and gives up
// once ctx is done with an error wrapping ctx's (the model's memory goes
// back): a large checkpoint takes seconds to minutes that an interrupted
// run should not wait. The weights it loads are Load's.
func LoadContext(ctx context.Context, dir string, b backend.Backend) (*Model, error) {
	cfg, err := ReadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenCheckpointContext(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	if err := cfg.validate(""); err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	// The weights' shapes are checked before the model is allocated: a
	// config.json whose sizes disagree with the weights' (another model's,
	// a damaged one) would have the model take what it says, terabytes.
	for _, p := range build(*cfg, nil).params {
		if err := checkTensor(ck, p); err != nil {
			return nil, err
		}
	}
	m, err := New(*cfg, b)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	if _, _, ok := ck.Tensor(ValueHeadWeight); ok {
		m.addValueHead()
	}
	if err := m.loadWeights(ctx, ck); err != nil {
		m.Release() // device memory goes back
		return nil, err
	}
	return m, nil
}

func (m *Model) loadWeights(ctx context.Context, ck *safetensors.Checkpoint) error {
	want := map[string]bool{}
	for _, p := range m.params {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("load %s: %w", ck.Dir, err)
		}
		want[p.Name] = true
		if err := checkTensor(ck, p); err != nil {
			return err
		}
		t, file, _ := ck.Tensor(p.Name)
		v, err := t.FiniteFloat32()
		if err != nil {
			return fmt.Errorf("load %s: %w", file, err)
		}
		m.B.Upload(p.W, v)
	}
	for _, name := range ck.Names() {
		if want[name] || (name == "lm_head.weight" && m.Config.TieWordEmbeddings) || filepath.Ext(name) == ".inv_freq" {
			continue
		}
		_, file, _ := ck.Tensor(name)
		return fmt.Errorf("load %s: tensor %q: not a parameter of %s with this config", file, name, m.Config.Architecture)
	}
	return nil
}

// checkTensor checks that the checkpoint holds p, of p's shape.
func checkTensor(ck *safetensors.Checkpoint, p *Param) error {
	t, file, ok := ck.Tensor(p.Name)
	if !ok {
		return fmt.Errorf("load %s: tensor %q: missing", file, p.Name)
	}
	if !sameShape(t.Shape, p.Shape) {
		return fmt.Errorf("load %s: tensor %q: shape %v, want %v (as config.json's sizes say)", file, p.Name, t.Shape, p.Shape)
	}
	return nil
}

func sameShape(a, b []int) bool {
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

// Save writes dir/config.json and dir/model.safetensors with weights in
// dtype (F32 or BF16); config's torch_dtype follows dtype.
func (m *Model) Save(dir string, dtype safetensors.DType) error {
	return m.SaveContext(context.Background(), dir, dtype)
}

// SaveContext is Save that checks ctx between tensors as it copies and
// writes them, and gives up, with an error wrapping ctx's, once it is
// done: a large model's save takes seconds that a stop should not wait.
// The files are Save's.
func (m *Model) SaveContext(ctx context.Context, dir string, dtype safetensors.DType) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	cfg := m.Config
	cfg.TorchDType = "float32"
	if dtype == safetensors.BF16 {
		cfg.TorchDType = "bfloat16"
	}
	js, err := cfg.JSON()
	if err != nil {
		return fmt.Errorf("save model %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	ts, err := m.tensors(ctx, dtype)
	if err != nil {
		return fmt.Errorf("save model %s: %w", dir, err)
	}
	return safetensors.WriteCheckpointContext(ctx, dir, ts, 0)
}

func (m *Model) tensors(ctx context.Context, dtype safetensors.DType) ([]safetensors.Tensor, error) {
	var out []safetensors.Tensor
	for _, p := range m.params {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t, err := safetensors.FromFloat32(p.Name, dtype, p.Shape, m.download(p.W))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func (m *Model) download(t backend.Tensor) []float32 {
	v := make([]float32, t.Len())
	m.B.Download(v, t)
	return v
}

// Weights returns a host copy of each parameter's weights by name.
func (m *Model) Weights() map[string][]float32 {
	out, _ := m.WeightsContext(context.Background())
	return out
}

// WeightsContext is Weights that checks ctx between parameters and gives
// up, with an error wrapping ctx's, once it is done: a large model's copy
// takes seconds that a stop should not wait.
func (m *Model) WeightsContext(ctx context.Context) (map[string][]float32, error) {
	out := map[string][]float32{}
	for _, p := range m.params {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("copy the model's weights: %w", err)
		}
		out[p.Name] = m.download(p.W)
	}
	return out, nil
}

// Grads returns a host copy of each trainable parameter's gradient by name.
func (m *Model) Grads() map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range m.TrainableParams() {
		out[p.Name] = m.download(p.G)
	}
	return out
}

func finite(v []float32) bool {
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}

// Release frees the model's tensors on its backend: weights, gradients,
// adapters and the last pass's activations. The model must not be used
// afterwards; a model replaced on a device (a learner's Load) gives its
// memory back so.
func (m *Model) Release() {
	for _, p := range append(m.loraParams(), m.params...) {
		if p.W != nil {
			m.B.Free(p.W)
		}
		if p.G != nil {
			m.B.Free(p.G)
		}
		p.W, p.G = nil, nil
	}
	if m.pass != nil {
		m.pass.free(m.B)
		m.pass = nil
	}
}
