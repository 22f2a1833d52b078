package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestModelInitThenForward(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":32,"intermediate_size":64,
		"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":800,
		"tie_word_embeddings":true,"torch_dtype":"bfloat16","bos_token_id":1}`), 0o644)
	out := filepath.Join(dir, "ckpt")
	if code, _, stderr := run(t, "model", "init", "--config", cfg, "--out", out, "--seed", "3"); code != 0 {
		t.Fatalf("init: exit %d: %s", code, stderr)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	st, err := safetensors.ReadFile(filepath.Join(out, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if tt, ok := st.Tensor("model.layers.1.self_attn.k_proj.bias"); !ok || tt.DType != safetensors.BF16 {
		t.Errorf("k_proj bias missing or not bf16")
	}
	if _, ok := st.Tensor("lm_head.weight"); ok {
		t.Error("tied checkpoint has lm_head.weight")
	}
	// The same seed gives the same weights.
	out2 := filepath.Join(dir, "ckpt2")
	run(t, "model", "init", "--config", cfg, "--out", out2, "--seed", "3")
	a, _ := os.ReadFile(filepath.Join(out, "model.safetensors"))
	b, _ := os.ReadFile(filepath.Join(out2, "model.safetensors"))
	if !bytes.Equal(a, b) {
		t.Error("same seed, different weights")
	}

	in := filepath.Join(dir, "in.json")
	os.WriteFile(in, []byte(`{"sequences":[{"prompt":[1,2,3],"response":[4,5]},{"prompt":[7],"response":[799,0,1]}]}`), 0o644)
	res := filepath.Join(dir, "out.safetensors")
	if code, _, stderr := run(t, "model", "forward", "--model", out, "--input", in, "--out", res, "--grad"); code != 0 {
		t.Fatalf("forward: exit %d: %s", code, stderr)
	}
	f, err := safetensors.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{2, 3} {
		v, shape, err := f.Float32("logprobs." + strconv.Itoa(i))
		if err != nil || len(shape) != 1 || shape[0] != n {
			t.Fatalf("logprobs.%d: %v %v", i, shape, err)
		}
		for _, x := range v {
			// A fresh model is close to uniform over 800 tokens.
			if math.Abs(float64(x)+math.Log(800)) > 0.5 {
				t.Errorf("logprobs.%d = %v, far from -log(800)", i, v)
			}
		}
	}
	if _, _, err := f.Float32("grad.model.embed_tokens.weight"); err != nil {
		t.Error(err)
	}
}

func TestModelCommandErrors(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("..", "..", "learner", "model", "testdata")
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"sequences":[{"prompt":[1],"response":[2],"extra":1}]}`), 0o644)
	big := filepath.Join(dir, "big.json")
	os.WriteFile(big, []byte(`{"sequences":[{"prompt":[1],"response":[64]}]}`), 0o644)
	inputs := map[string]string{
		"frac":     `{"sequences":[{"prompt":[1],"response":[2]},{"prompt":[1],"response":[3,1.5]}]}`,
		"string":   `{"sequences":[{"prompt":["7"],"response":[2]}]}`,
		"null":     `{"sequences":[{"prompt":[1,null],"response":[2]}]}`,
		"neg":      `{"sequences":[{"prompt":[1],"response":[2]},{"prompt":[-1],"response":[2]}]}`,
		"huge":     `{"sequences":[{"prompt":[1],"response":[99999999999]}]}`,
		"trailing": `{"sequences":[{"prompt":[1],"response":[2]}]} {"sequences":[]}`,
		"empty":    ``,
		"none":     `{"sequences":[]}`,
		"noprompt": `{"sequences":[{"prompt":[1],"response":[2]},{"response":[2]}]}`,
		"long":     `{"sequences":[{"prompt":[` + strings.Repeat("1,", 128) + `1],"response":[2]}]}`,
	}
	for name, js := range inputs {
		os.WriteFile(filepath.Join(dir, name+".json"), []byte(js), 0o644)
	}
	forward := func(name string) []string {
		return []string{"model", "forward", "--model", filepath.Join(src, "qwen2"), "--input", filepath.Join(dir, name+".json"), "--out", filepath.Join(dir, "o")}
	}
	smallVocab := filepath.Join(dir, "small-vocab.json")
	os.WriteFile(smallVocab, []byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":16,"intermediate_size":32,
		"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":277}`), 0o644)
	// Sizes whose parameter count wraps an int around (2^40 × 2^30),
	// and sizes that fit the bound but not this host's memory.
	wraps := filepath.Join(dir, "wraps.json")
	os.WriteFile(wraps, []byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":1073741824,"intermediate_size":64,
		"num_hidden_layers":1,"num_attention_heads":1,"vocab_size":1099511627776}`), 0o644)
	tooBig := filepath.Join(dir, "too-big.json")
	os.WriteFile(tooBig, []byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":8192,"intermediate_size":32768,
		"num_hidden_layers":512,"num_attention_heads":64,"vocab_size":152064}`), 0o644)
	badCfg := filepath.Join(dir, "config.json")
	os.WriteFile(badCfg, []byte(`{"architectures":["MistralForCausalLM"]}`), 0o644)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"model", "frobnicate"}, 2, `unknown subcommand "frobnicate"`},
		{[]string{"model", "init", "--out", dir}, 2, "--config is required"},
		{[]string{"model", "init", "--config", badCfg, "--out", dir}, 1, "field architectures"},
		{[]string{"model", "init", "--config", wraps, "--out", filepath.Join(dir, "wraps")}, 1, "parameters, over the 1.1e+12 a model may have"},
		{[]string{"model", "init", "--config", tooBig, "--out", filepath.Join(dir, "too-big")}, 1, "GiB as float32 to initialise, over this host's"},
		{[]string{"model", "init", "--config", smallVocab, "--out", filepath.Join(dir, "small")}, 1, "field vocab_size: 277 is too small for the built-in tokenizer (at least 278"},
		{[]string{"model", "forward", "--model", dir}, 2, "--input is required"},
		{[]string{"model", "forward", "--model", filepath.Join(src, "qwen2"), "--input", bad, "--out", filepath.Join(dir, "o")}, 1, `unknown field "extra"`},
		{[]string{"model", "forward", "--model", filepath.Join(src, "qwen2"), "--input", big, "--out", filepath.Join(dir, "o")}, 1, "sequences[0].response[0]: token id 64 out of range [0, 64) (vocab_size of " + filepath.Join(src, "qwen2", "config.json")},
		{forward("frac"), 1, "sequences[1].response[1]: 1.5 is not a token id"},
		{forward("string"), 1, `sequences[0].prompt[0]: "7" is not a token id`},
		{forward("null"), 1, "sequences[0].prompt[1]: null is not a token id"},
		{forward("neg"), 1, "sequences[1].prompt[0]: token id -1 out of range"},
		{forward("huge"), 1, "sequences[0].response[0]: token id 99999999999 out of range"},
		{forward("trailing"), 1, "data after the top-level object"},
		{forward("empty"), 1, "empty file"},
		{forward("none"), 1, "field sequences: missing or empty"},
		{forward("noprompt"), 1, "sequences[1].prompt: missing or empty"},
		{forward("long"), 1, "sequences[0]: 130 tokens exceed max_position_embeddings 128"},
		{[]string{"model", "forward", "--model", dir, "--input", filepath.Join(src, "golden_input.json"), "--out", filepath.Join(dir, "o")}, 1, "config.json"},
	}
	for _, c := range cases {
		code, _, stderr := run(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	if code, stdout, _ := run(t, "model", "--help"); code != 0 || !strings.Contains(stdout, "rlnode model forward") {
		t.Errorf("help: %d %q", code, stdout)
	}
}

// A vocabulary below the built-in tokenizer's 768 tokens gets the tokenizer
// trained to that size, so every id it produces is a row of the embedding.
func TestModelInitSmallVocab(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":16,"intermediate_size":32,
		"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":300}`), 0o644)
	out := filepath.Join(dir, "ckpt")
	if code, _, stderr := run(t, "model", "init", "--config", cfg, "--out", out); code != 0 {
		t.Fatalf("init: exit %d: %s", code, stderr)
	}
	tok, err := tokenizer.Load(filepath.Join(out, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 300 {
		t.Errorf("tokenizer has %d tokens, want 300", tok.VocabSize())
	}
	for _, id := range tok.EncodeChat([]tokenizer.Message{{Role: "user", Content: "What is 2 + 3?"}}, true) {
		if id >= 300 {
			t.Errorf("token id %d outside the model's vocabulary", id)
		}
	}
}

// model init reports every problem of a config at once.
func TestModelInitReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"fields.json": `{"architectures":["Qwen2ForCausalLM"],"hidden_size":"wide","num_hidden_layers":1.5,
			"num_attention_heads":4,"vocab_size":800}`,
		"sizes.json": `{"architectures":["Qwen2ForCausalLM"],"hidden_size":30,"intermediate_size":64,"num_hidden_layers":1,
			"num_attention_heads":4,"num_key_value_heads":3,"vocab_size":800,"rope_theta":0}`,
	} {
		cfg := filepath.Join(dir, name)
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := run(t, "model", "init", "--config", cfg, "--out", filepath.Join(dir, "out-"+name))
		want := map[string][]string{
			"fields.json": {"field hidden_size: want an integer", "field intermediate_size: missing", "field num_hidden_layers: want an integer"},
			"sizes.json": {"field num_key_value_heads: 3 does not divide num_attention_heads 4",
				"field num_attention_heads: 4 does not divide hidden_size 30", "field rope_theta: must be positive"},
		}[name]
		for _, w := range want {
			if code == 0 || !strings.Contains(stderr, cfg+": "+w) {
				t.Errorf("model init %s: exit %d, stderr lacks %q:\n%s", name, code, w, stderr)
			}
		}
	}
}
