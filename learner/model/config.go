package model

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rlnode/rlnode/internal/readfile"
)

// maxConfigBytes caps a config.json: they are kilobytes.
const maxConfigBytes = 16 << 20

// Config is the part of a Hugging Face config.json the model reads.
type Config struct {
	Architecture      string  // Qwen2ForCausalLM or LlamaForCausalLM
	HiddenSize        int     // hidden_size
	IntermediateSize  int     // intermediate_size
	NumLayers         int     // num_hidden_layers
	NumHeads          int     // num_attention_heads
	NumKVHeads        int     // num_key_value_heads
	HeadDim           int     // head_dim, default hidden_size/num_attention_heads
	VocabSize         int     // vocab_size
	MaxPositions      int     // max_position_embeddings
	RMSNormEps        float64 // rms_norm_eps
	RopeTheta         float64 // rope_theta
	TieWordEmbeddings bool    // tie_word_embeddings
	AttentionBias     bool    // q/k/v bias: always for Qwen2, attention_bias for Llama
	TorchDType        string  // torch_dtype: float32, bfloat16, float16

	// raw keeps every field of the file so a saved config round-trips
	// fields this package does not interpret (token ids, model_type, ...).
	raw map[string]any
}

// Supported architectures.
const (
	Qwen2 = "Qwen2ForCausalLM"
	Llama = "LlamaForCausalLM"
)

// ReadConfig reads and validates a config.json.
func ReadConfig(path string) (*Config, error) {
	b, err := readfile.Regular(path, maxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return ParseConfig(path, b)
}

// ParseConfig parses and validates config.json bytes; path names the file
// in errors.
func ParseConfig(path string, b []byte) (*Config, error) {
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c := &Config{raw: raw}
	p := fieldParser{path: path, raw: raw}
	archs, ok := raw["architectures"].([]any)
	if !ok || len(archs) != 1 {
		return nil, fmt.Errorf("config %s: field architectures: want a list of one name, got %v", path, raw["architectures"])
	}
	c.Architecture, _ = archs[0].(string)
	switch c.Architecture {
	case Qwen2, Llama:
	default:
		return nil, fmt.Errorf("config %s: field architectures: unsupported architecture %q (want %s or %s)", path, archs[0], Qwen2, Llama)
	}
	c.HiddenSize = p.int("hidden_size", true, 0)
	c.IntermediateSize = p.int("intermediate_size", true, 0)
	c.NumLayers = p.int("num_hidden_layers", true, 0)
	c.NumHeads = p.int("num_attention_heads", true, 0)
	c.NumKVHeads = p.int("num_key_value_heads", false, c.NumHeads)
	c.VocabSize = p.int("vocab_size", true, 0)
	// Missing fields take the defaults of the architecture's
	// transformers config class, as from_pretrained would.
	defaultPositions := 2048 // LlamaConfig
	if c.Architecture == Qwen2 {
		defaultPositions = 32768 // Qwen2Config
	}
	c.MaxPositions = p.int("max_position_embeddings", false, defaultPositions)
	c.RMSNormEps = p.float("rms_norm_eps", false, 1e-6)
	c.RopeTheta = p.float("rope_theta", false, 10000)
	c.TieWordEmbeddings = p.bool("tie_word_embeddings", false, false)
	c.TorchDType = p.string("torch_dtype", false, "float32")
	if c.NumHeads > 0 {
		c.HeadDim = p.int("head_dim", false, c.HiddenSize/c.NumHeads)
	}
	if c.Architecture == Qwen2 {
		c.AttentionBias = true
		if p.bool("use_sliding_window", false, false) {
			p.fail("use_sliding_window", "sliding-window attention is not supported")
		}
	} else {
		c.AttentionBias = p.bool("attention_bias", false, false)
		if p.bool("mlp_bias", false, false) {
			p.fail("mlp_bias", "MLP bias is not supported")
		}
	}
	if act := p.string("hidden_act", false, "silu"); act != "silu" {
		p.fail("hidden_act", fmt.Sprintf("unsupported activation %q (want silu)", act))
	}
	if rs, ok := raw["rope_scaling"]; ok && rs != nil {
		p.fail("rope_scaling", "RoPE scaling is not supported")
	}
	if d := p.float("attention_dropout", false, 0); d != 0 {
		p.fail("attention_dropout", fmt.Sprintf("%v: attention dropout is not supported (want 0)", d))
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	if err := c.validate("config " + path + ": "); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks sizes fit together.
func (c *Config) Validate() error { return c.validate("") }

// validate returns every problem found, each message starting with prefix.
func (c *Config) validate(prefix string) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(prefix+format, args...)) }
	pos := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumLayers}, {"num_attention_heads", c.NumHeads},
		{"num_key_value_heads", c.NumKVHeads}, {"vocab_size", c.VocabSize},
		{"max_position_embeddings", c.MaxPositions}, {"head_dim", c.HeadDim},
	}
	for _, f := range pos {
		if f.v <= 0 {
			bad("field %s: must be positive, got %d", f.name, f.v)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...) // the checks below divide by these
	}
	// NumParams in int would wrap around for sizes a hostile or mistyped
	// config.json can give (vocab_size 2^40 × hidden_size 2^30), and pass
	// every memory check as a small model; counted in float64 first.
	if n := c.numParamsFloat(); n > MaxParams {
		bad("the sizes give a model of %.3g parameters, over the %.3g a model may have (hidden_size %d, intermediate_size %d, num_hidden_layers %d, vocab_size %d)", n, float64(MaxParams), c.HiddenSize, c.IntermediateSize, c.NumLayers, c.VocabSize)
		return errors.Join(errs...)
	}
	if c.Architecture != Qwen2 && c.Architecture != Llama {
		bad("field architectures: unsupported architecture %q", c.Architecture)
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		bad("field num_key_value_heads: %d does not divide num_attention_heads %d", c.NumKVHeads, c.NumHeads)
	}
	if c.HeadDim%2 != 0 {
		bad("field head_dim: %d must be even for rotary embeddings", c.HeadDim)
	}
	if c.HiddenSize%c.NumHeads != 0 && c.raw["head_dim"] == nil {
		bad("field num_attention_heads: %d does not divide hidden_size %d", c.NumHeads, c.HiddenSize)
	}
	if !(c.RMSNormEps > 0) {
		bad("field rms_norm_eps: must be positive, got %v", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) {
		bad("field rope_theta: must be positive, got %v", c.RopeTheta)
	}
	switch c.TorchDType {
	case "float32", "bfloat16", "float16":
	default:
		bad("field torch_dtype: unsupported %q (want float32, bfloat16 or float16)", c.TorchDType)
	}
	return errors.Join(errs...)
}

// JSON renders the config as a Hugging Face config.json, keeping fields of
// the file it was read from.
func (c *Config) JSON() ([]byte, error) {
	out := map[string]any{}
	for k, v := range c.raw {
		out[k] = v
	}
	modelType := "qwen2"
	if c.Architecture == Llama {
		modelType = "llama"
		out["attention_bias"] = c.AttentionBias
	}
	if _, ok := out["model_type"]; !ok {
		out["model_type"] = modelType
	}
	out["architectures"] = []string{c.Architecture}
	out["hidden_size"] = c.HiddenSize
	out["intermediate_size"] = c.IntermediateSize
	out["num_hidden_layers"] = c.NumLayers
	out["num_attention_heads"] = c.NumHeads
	out["num_key_value_heads"] = c.NumKVHeads
	out["vocab_size"] = c.VocabSize
	out["max_position_embeddings"] = c.MaxPositions
	out["rms_norm_eps"] = c.RMSNormEps
	out["rope_theta"] = c.RopeTheta
	out["tie_word_embeddings"] = c.TieWordEmbeddings
	out["torch_dtype"] = c.TorchDType
	out["hidden_act"] = "silu"
	if c.HeadDim*c.NumHeads != c.HiddenSize {
		out["head_dim"] = c.HeadDim
	}
	return json.MarshalIndent(out, "", "  ")
}

// fieldParser reads typed fields and keeps the first error, which names the
// file and field.
type fieldParser struct {
	path string
	raw  map[string]any
	errs []error // every field's problem, reported together
}

func (p *fieldParser) fail(field, msg string) {
	p.errs = append(p.errs, fmt.Errorf("config %s: field %s: %s", p.path, field, msg))
}

func (p *fieldParser) get(field string, required bool) (any, bool) {
	v, ok := p.raw[field]
	if !ok || v == nil {
		if required {
			p.fail(field, "missing")
		}
		return nil, false
	}
	return v, true
}

func (p *fieldParser) int(field string, required bool, def int) int {
	v, ok := p.get(field, required)
	if !ok {
		return def
	}
	x, isNum := v.(float64)
	if !isNum || x != float64(int(x)) {
		p.fail(field, fmt.Sprintf("want an integer, got %v", v))
		return def
	}
	return int(x)
}

func (p *fieldParser) float(field string, required bool, def float64) float64 {
	v, ok := p.get(field, required)
	if !ok {
		return def
	}
	x, isNum := v.(float64)
	if !isNum {
		p.fail(field, fmt.Sprintf("want a number, got %v", v))
		return def
	}
	return x
}

func (p *fieldParser) bool(field string, required bool, def bool) bool {
	v, ok := p.get(field, required)
	if !ok {
		return def
	}
	x, isBool := v.(bool)
	if !isBool {
		p.fail(field, fmt.Sprintf("want true or false, got %v", v))
		return def
	}
	return x
}

func (p *fieldParser) string(field string, required bool, def string) string {
	v, ok := p.get(field, required)
	if !ok {
		return def
	}
	x, isStr := v.(string)
	if !isStr {
		p.fail(field, fmt.Sprintf("want a string, got %v", v))
		return def
	}
	return x
}

// MaxParams bounds the parameters a config may give a model: 2^40, past
// any model this project can train or serve, and far from where an int
// count wraps around.
const MaxParams = 1 << 40

// numParamsFloat is NumParams counted in float64, which cannot wrap.
func (c *Config) numParamsFloat() float64 {
	h, q, kv := float64(c.HiddenSize), float64(c.NumHeads)*float64(c.HeadDim), float64(c.NumKVHeads)*float64(c.HeadDim)
	layer := 2*h + h*q + 2*h*kv + q*h + 3*h*float64(c.IntermediateSize)
	if c.AttentionBias {
		layer += q + 2*kv
	}
	n := float64(c.VocabSize)*h + float64(c.NumLayers)*layer + h
	if !c.TieWordEmbeddings {
		n += float64(c.VocabSize) * h
	}
	return n
}

// NumParams is the parameter count the config implies (a tied lm_head
// counted once), without allocating the model.
func (c *Config) NumParams() int {
	h, q, kv := c.HiddenSize, c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim
	layer := 2*h + h*q + 2*h*kv + q*h + 3*h*c.IntermediateSize
	if c.AttentionBias {
		layer += q + 2*kv
	}
	n := c.VocabSize*h + c.NumLayers*layer + h
	if !c.TieWordEmbeddings {
		n += c.VocabSize * h
	}
	return n
}

// LinearDims are the input and output sizes of one of a layer's seven
// matrices, named as PEFT names them (q_proj ... down_proj); ok is false
// for another name.
func (c *Config) LinearDims(module string) (in, out int, ok bool) {
	h, q, kv, m := c.HiddenSize, c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim, c.IntermediateSize
	switch module {
	case "q_proj":
		return h, q, true
	case "k_proj", "v_proj":
		return h, kv, true
	case "o_proj":
		return q, h, true
	case "gate_proj", "up_proj":
		return h, m, true
	case "down_proj":
		return m, h, true
	}
	return 0, 0, false
}
