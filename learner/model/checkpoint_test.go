package model

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/slowfile"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/safetensors"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	for _, c := range []struct {
		arch  string
		dtype safetensors.DType
	}{{Qwen2, safetensors.F32}, {Llama, safetensors.F32}, {Qwen2, safetensors.BF16}} {
		t.Run(c.arch+"/"+string(c.dtype), func(t *testing.T) {
			m := tinyModel(t, tinyConfig(c.arch), 3)
			dir := t.TempDir()
			if err := m.Save(dir, c.dtype); err != nil {
				t.Fatal(err)
			}
			m2, err := Load(dir, cpu.New())
			if err != nil {
				t.Fatal(err)
			}
			if want := map[safetensors.DType]string{safetensors.F32: "float32", safetensors.BF16: "bfloat16"}[c.dtype]; m2.Config.TorchDType != want {
				t.Errorf("torch_dtype %q, want %q", m2.Config.TorchDType, want)
			}
			w1, w2 := m.Weights(), m2.Weights()
			if len(w1) != len(w2) {
				t.Fatalf("%d tensors saved, %d loaded", len(w1), len(w2))
			}
			for name, v := range w1 {
				for i := range v {
					want := v[i]
					if c.dtype == safetensors.BF16 {
						want = bf16(want)
					}
					if w2[name][i] != want {
						t.Fatalf("%s[%d] = %v, want %v", name, i, w2[name][i], want)
					}
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
				t.Error(err)
			}
		})
	}
}

func bf16(x float32) float32 {
	t, _ := safetensors.FromFloat32("x", safetensors.BF16, []int{1}, []float32{x})
	v, _ := t.Float32()
	return v[0]
}

func TestLoadSharded(t *testing.T) {
	m := tinyModel(t, tinyConfig(Llama), 3)
	dir := t.TempDir()
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	ts, err := m.tensors(context.Background(), safetensors.F32)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "model.safetensors"))
	if err := safetensors.WriteCheckpoint(dir, ts, 4096); err != nil {
		t.Fatal(err)
	}
	m2, err := Load(dir, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range m.Weights() {
		if got := m2.Weights()[name]; got[len(got)-1] != v[len(v)-1] {
			t.Errorf("%s differs after sharded load", name)
		}
	}
}

// The bf16 golden checkpoint has Qwen2.5-0.5B-Instruct's layout (bias, tied
// embeddings, bfloat16, torch_dtype bfloat16) at small size.
func TestLoadQwenLayoutBF16(t *testing.T) {
	m, err := Load("testdata/qwen2-bf16", cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	if m.LMHead != m.Embed || m.Layers[0].Attn.Q.Bias == nil || m.NumParams() != m.Config.NumParams() {
		t.Errorf("layout: tied=%v bias=%v params %d vs %d", m.LMHead == m.Embed, m.Layers[0].Attn.Q.Bias != nil, m.NumParams(), m.Config.NumParams())
	}
}

func TestLoadErrors(t *testing.T) {
	m := tinyModel(t, tinyConfig(Qwen2), 3)
	good, err := m.tensors(context.Background(), safetensors.F32)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(fn func([]safetensors.Tensor) []safetensors.Tensor) []safetensors.Tensor {
		return fn(append([]safetensors.Tensor(nil), good...))
	}
	cases := []struct {
		name    string
		tensors []safetensors.Tensor
		want    string
	}{
		{"missing", edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(ts[:3], ts[4:]...)
		}), `tensor "` + good[3].Name + `": missing`},
		{"misshaped", edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
			ts[4].Shape = []int{ts[4].Shape[1], ts[4].Shape[0]}
			return ts
		}), `tensor "` + good[4].Name + `": shape [16 8], want [8 16]`},
		// A diverged run's checkpoint or a damaged file: every logit the
		// weight touches would be NaN, and a run would train on it.
		{"a NaN weight", edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
			ts[4] = withElement(t, ts[4], 1*ts[4].Shape[1]+2, float32(math.NaN()))
			return ts
		}), `tensor "` + good[4].Name + `": element [1 2] of shape [8 16] is NaN: not a finite number`},
		{"an infinite weight", edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
			ts[0] = withElement(t, ts[0], 5, float32(math.Inf(-1)))
			return ts
		}), `tensor "` + good[0].Name + `": element [0 5] of shape [32 16] is -Inf`},
		{"unexpected", edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
			x, _ := safetensors.FromFloat32("model.layers.0.mlp.gate_proj.bias", safetensors.F32, []int{1}, []float32{0})
			return append(ts, x)
		}), `tensor "model.layers.0.mlp.gate_proj.bias": not a parameter`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			js, _ := m.Config.JSON()
			os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644)
			if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), c.tensors, nil); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir, cpu.New())
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Join(dir, "model.safetensors")) {
				t.Errorf("error %v, want the file and %q", err, c.want)
			}
		})
	}
	// An element type the loader cannot convert names file and tensor.
	dir := t.TempDir()
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "model.safetensors")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.ReplaceAll(string(b), `"dtype":"F32"`, `"dtype":"I32"`)), 0o644)
	if _, err := Load(dir, cpu.New()); err == nil || !strings.Contains(err.Error(), p+`: tensor "model.embed_tokens.weight": dtype "I32": unsupported dtype`) {
		t.Errorf("dtype: %v", err)
	}
	// A truncated file names the file.
	os.WriteFile(p, b[:len(b)-10], 0o644)
	if _, err := Load(dir, cpu.New()); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("truncated: %v", err)
	}
}

// A config.json whose sizes disagree with the weights' (another model's
// config, a damaged one) is an error naming the tensor and both shapes,
// found before the model is allocated. Before, Load allocated the model
// the config described first: 16M tokens × 16384 wide is 1 TiB, and the
// process died ("fatal error: out of memory"). (Sizes past model.MaxParams
// are refused before, by the config's own check.)
func TestLoadConfigDisagreeingWithWeights(t *testing.T) {
	m := tinyModel(t, tinyConfig(Qwen2), 3)
	dir := t.TempDir()
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	cfg := m.Config
	cfg.VocabSize, cfg.HiddenSize, cfg.IntermediateSize = 1<<24, 1<<14, 1<<14
	cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim = 128, 128, 128
	js, err := cfg.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir, cpu.New())
	want := filepath.Join(dir, "model.safetensors") + `: tensor "model.embed_tokens.weight": shape [32 16], want [16777216 16384]`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
}

// withElement is a copy of t with element i set to x.
func withElement(t *testing.T, ts safetensors.Tensor, i int, x float32) safetensors.Tensor {
	t.Helper()
	v, err := ts.Float32()
	if err != nil {
		t.Fatal(err)
	}
	v[i] = x
	out, err := safetensors.FromFloat32(ts.Name, ts.DType, ts.Shape, v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBatchErrors(t *testing.T) {
	cases := []struct {
		name   string
		seqs   []Sequence
		seqLen int
		want   string
	}{
		{"empty prompt", []Sequence{{Response: []int32{1}}}, 0, "sequence 0: empty prompt"},
		{"token range", []Sequence{{Prompt: []int32{1}, Response: []int32{99}}}, 0, "sequence 0: response[0]: token id 99 out of range [0, 32)"},
		{"negative id", []Sequence{{Prompt: []int32{1}, Response: []int32{2}}, {Prompt: []int32{1, -3}, Response: []int32{2}}}, 0, "sequence 1: prompt[1]: token id -3 out of range"},
		{"too long", []Sequence{{Prompt: []int32{1, 2, 3}, Response: []int32{4}}}, 3, "exceeds the row length 3"},
		{"none", nil, 0, "no sequences"},
	}
	for _, c := range cases {
		if _, err := NewBatch(c.seqs, c.seqLen, true, 32); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestPackingLayout(t *testing.T) {
	seqs := []Sequence{
		{Prompt: []int32{1, 2}, Response: []int32{3}},       // 3 tokens
		{Prompt: []int32{4}, Response: []int32{5, 6, 7, 8}}, // 5 tokens
		{Prompt: []int32{9, 9}, Response: []int32{1, 2}},    // 4 tokens
	}
	bt, err := NewBatch(seqs, 8, true, 32)
	if err != nil {
		t.Fatal(err)
	}
	// Longest first: row 0 = seq1 (5) + seq0 (3); row 1 = seq2 (4) + padding.
	want := struct{ tok, pos, start []int32 }{
		tok:   []int32{4, 5, 6, 7, 8, 1, 2, 3, 9, 9, 1, 2, 0, 0, 0, 0},
		pos:   []int32{0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3},
		start: []int32{0, 0, 0, 0, 0, 5, 5, 5, 0, 0, 0, 0, 4, 4, 4, 4},
	}
	for i := range want.tok {
		if bt.Tokens[i] != want.tok[i] || bt.Positions[i] != want.pos[i] || bt.Starts[i] != want.start[i] {
			t.Fatalf("token %d: (%d, %d, %d), want (%d, %d, %d)", i, bt.Tokens[i], bt.Positions[i], bt.Starts[i], want.tok[i], want.pos[i], want.start[i])
		}
	}
	wantOut := []int32{6, 0, 1, 2, 3, 9, 10}
	for i, o := range bt.Outputs {
		if o != wantOut[i] {
			t.Fatalf("outputs %v, want %v", bt.Outputs, wantOut)
		}
	}
	split := bt.Split([]float32{0, 1, 2, 3, 4, 5, 6})
	if len(split[0]) != 1 || split[1][3] != 4 || split[2][1] != 6 {
		t.Errorf("split %v", split)
	}
}

// A model that only runs forward (inference, the reference policy) holds
// no gradient buffers; they appear when training asks for them.
func TestGradientsAllocatedOnFirstUse(t *testing.T) {
	m, err := Load("testdata/qwen2", cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	bt, err := NewBatch([]Sequence{{Prompt: []int32{1, 2}, Response: []int32{3, 4}}}, 0, false, m.Config.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Forward(bt); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Params() {
		if p.G != nil {
			t.Fatalf("%s has a gradient buffer after a forward pass", p.Name)
		}
	}
	ref, err := m.Clone()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Backward([]float32{1, 1}, nil); err != nil {
		t.Fatal(err)
	}
	var norm float64
	for _, p := range m.Params() {
		if p.G == nil {
			t.Fatalf("%s has no gradient after Backward", p.Name)
		}
		for _, g := range m.download(p.G) {
			norm += float64(g) * float64(g)
		}
	}
	if norm == 0 {
		t.Error("Backward left all gradients zero")
	}
	if _, _, err := ref.Forward(bt); err != nil {
		t.Fatal(err)
	}
	if err := ref.Backward([]float32{1, 1}, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range ref.Params() {
		if p.G != nil {
			t.Fatalf("frozen reference: %s has a gradient buffer", p.Name)
		}
	}
}

// A tensor missing from a sharded checkpoint is reported against the index
// that should list it; a misshaped one against the shard holding it.
func TestLoadShardedErrors(t *testing.T) {
	m := tinyModel(t, tinyConfig(Qwen2), 3)
	ts, err := m.tensors(context.Background(), safetensors.F32)
	if err != nil {
		t.Fatal(err)
	}
	missing, misshaped := ts[5].Name, ts[6].Name
	for _, c := range []struct {
		name string
		edit func(ts []safetensors.Tensor) []safetensors.Tensor
		file string
		want string
	}{
		{"missing", func(ts []safetensors.Tensor) []safetensors.Tensor { return append(ts[:5:5], ts[6:]...) },
			safetensors.IndexFile, `tensor "` + missing + `": missing`},
		{"misshaped", func(ts []safetensors.Tensor) []safetensors.Tensor {
			ts[6].Shape = []int{ts[6].Shape[1], ts[6].Shape[0]}
			return ts
		}, "model-00002-of-00006.safetensors", `tensor "` + misshaped + `": shape`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			js, _ := m.Config.JSON()
			os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644)
			if err := safetensors.WriteCheckpoint(dir, c.edit(append([]safetensors.Tensor(nil), ts...)), 4096); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir, cpu.New())
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), filepath.Join(dir, c.file)) {
				t.Errorf("error %v, want %s and %q", err, c.file, c.want)
			}
		})
	}
}

// TestLoadContextGivesUpWhileReading: a load whose context ends while it
// reads the checkpoint returns at once with the context's error. The
// weights come from a pipe that never ends, as from a very slow disk:
// Load once read on until the file ended (minutes for a 7B model on a
// real disk), so a stopped run waited for it.
func TestLoadContextGivesUpWhileReading(t *testing.T) {
	m := tinyModel(t, tinyConfig(Qwen2), 3)
	dir := t.TempDir()
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	half := slowfile.Replace(t, filepath.Join(dir, safetensors.SingleFile))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loaded := make(chan error, 1)
	go func() {
		_, err := LoadContext(ctx, dir, cpu.New())
		loaded <- err
	}()
	<-half
	cancel()
	select {
	case err := <-loaded:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), dir) {
			t.Errorf("LoadContext: %v, want context.Canceled and the checkpoint named", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("LoadContext did not return within 60 s of its context's end")
	}
}

// TestLoadServedContextGivesUpWhileReadingTheAdapter: the same for a LoRA
// checkpoint's adapter, read after the base. LoadLoRA read it without
// the context, so a load stopped there waited for the whole adapter.
func TestLoadServedContextGivesUpWhileReadingTheAdapter(t *testing.T) {
	m := tinyModel(t, tinyConfig(Qwen2), 3)
	dir := t.TempDir()
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	if err := m.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, TargetModules: allModules, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := m.SaveLoRA(dir, "tiny-base"); err != nil {
		t.Fatal(err)
	}
	adapter := filepath.Join(dir, AdapterWeights)
	half := slowfile.Replace(t, adapter)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loaded := make(chan error, 1)
	go func() {
		_, err := LoadServedContext(ctx, dir, cpu.New())
		loaded <- err
	}()
	<-half
	cancel()
	select {
	case err := <-loaded:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), adapter) {
			t.Errorf("LoadServedContext: %v, want context.Canceled and the adapter named", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("LoadServedContext did not return within 60 s of its context's end")
	}
}
