package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestQwen25Config(t *testing.T) {
	c, err := ReadConfig("testdata/qwen2.5-0.5b-instruct.config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Architecture != Qwen2 || c.HeadDim != 64 || c.NumKVHeads != 2 || !c.AttentionBias || !c.TieWordEmbeddings || c.RopeTheta != 1e6 {
		t.Errorf("parsed %+v", c)
	}
	// Qwen2.5-0.5B has 494,032,768 parameters (tied embeddings).
	if n := c.NumParams(); n != 494032768 {
		t.Errorf("NumParams = %d, want 494032768", n)
	}
	js, err := c.JSON()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := ParseConfig("round-trip", js)
	if err != nil {
		t.Fatal(err)
	}
	if c2.NumParams() != c.NumParams() || c2.raw["bos_token_id"] != c.raw["bos_token_id"] {
		t.Errorf("round trip lost fields: %s", js)
	}
}

func TestConfigErrors(t *testing.T) {
	base := `"hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":64`
	cases := []struct{ name, json, want string }{
		{"unknown architecture", `{"architectures":["GPT2LMHeadModel"],` + base + `}`, `field architectures: unsupported architecture "GPT2LMHeadModel"`},
		{"no architecture", `{` + base + `}`, "field architectures"},
		{"missing hidden_size", `{"architectures":["LlamaForCausalLM"],"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":64}`, "field hidden_size: missing"},
		{"kv heads", `{"architectures":["LlamaForCausalLM"],` + strings.Replace(base, `"num_key_value_heads":2`, `"num_key_value_heads":3`, 1) + `}`, "field num_key_value_heads: 3 does not divide"},
		{"heads", `{"architectures":["LlamaForCausalLM"],` + strings.Replace(base, `"num_attention_heads":4,"num_key_value_heads":2`, `"num_attention_heads":5,"num_key_value_heads":1`, 1) + `}`, "field num_attention_heads: 5 does not divide hidden_size 32"},
		{"type", `{"architectures":["LlamaForCausalLM"],` + strings.Replace(base, `"vocab_size":64`, `"vocab_size":"64"`, 1) + `}`, "field vocab_size: want an integer"},
		{"negative", `{"architectures":["LlamaForCausalLM"],` + strings.Replace(base, `"vocab_size":64`, `"vocab_size":-1`, 1) + `}`, "field vocab_size: must be positive"},
		{"rope scaling", `{"architectures":["LlamaForCausalLM"],"rope_scaling":{"type":"linear","factor":2},` + base + `}`, "field rope_scaling"},
		{"activation", `{"architectures":["LlamaForCausalLM"],"hidden_act":"gelu",` + base + `}`, `field hidden_act: unsupported activation "gelu"`},
		{"sliding window", `{"architectures":["Qwen2ForCausalLM"],"use_sliding_window":true,` + base + `}`, "field use_sliding_window"},
		{"dtype", `{"architectures":["Qwen2ForCausalLM"],"torch_dtype":"int8",` + base + `}`, `field torch_dtype: unsupported "int8"`},
		{"eps", `{"architectures":["Qwen2ForCausalLM"],"rms_norm_eps":0,` + base + `}`, "field rms_norm_eps"},
		{"json", `{"architectures":`, "unexpected end"},
		{"attention dropout", `{"architectures":["Qwen2ForCausalLM"],"attention_dropout":0.1,` + base + `}`, "field attention_dropout: 0.1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig("dir/config.json", []byte(c.json))
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "dir/config.json") {
				t.Errorf("error %q does not name the file and %q", err, c.want)
			}
		})
	}
}

func TestLlamaAttentionBias(t *testing.T) {
	js := `{"architectures":["LlamaForCausalLM"],"attention_bias":true,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":64}`
	c, err := ParseConfig("c.json", []byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if !c.AttentionBias || c.NumKVHeads != 4 || c.TieWordEmbeddings {
		t.Errorf("parsed %+v", c)
	}
}

// Fields a config.json leaves out take the defaults of the architecture's
// transformers config class.
func TestConfigDefaults(t *testing.T) {
	base := `"hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":64`
	for _, c := range []struct {
		arch      string
		positions int
	}{{Qwen2, 32768}, {Llama, 2048}} {
		cfg, err := ParseConfig("c.json", []byte(`{"architectures":["`+c.arch+`"],`+base+`}`))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.MaxPositions != c.positions || cfg.NumKVHeads != 4 || cfg.RMSNormEps != 1e-6 || cfg.RopeTheta != 10000 || cfg.TieWordEmbeddings || cfg.HeadDim != 8 {
			t.Errorf("%s defaults: %+v", c.arch, cfg)
		}
	}
}

// A config.json that is a device or a pipe is refused before it is read:
// /dev/zero was read into memory until the process died, and a pipe
// blocked the load until something wrote into it.
func TestReadConfigNotARegularFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.Symlink("/dev/zero", p); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadConfig(p); err == nil || !strings.Contains(err.Error(), p+": a device, not a regular file") {
		t.Errorf("config.json → /dev/zero: %v", err)
	}
}
