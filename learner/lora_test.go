package learner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
)

func loraConfig(alg string) Config {
	c := tinyConfig(alg)
	c.LoRA = &model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj", "down_proj"}, Seed: 5}
	return c
}

func train(t *testing.T, l *Learner, b Batch) {
	t.Helper()
	if _, err := l.Train(b); err != nil {
		t.Fatal(err)
	}
}

// SFT trains every weight; the first step of an RL algorithm starts the
// adapters, and from then on training moves only the adapters, with optimizer state for them alone, and the engine's weights
// are the base with the adapters merged.
func TestLoRAStartsAfterSFT(t *testing.T) {
	l := newLearner(t, loraConfig(SFT))
	if l.Adapter() != nil {
		t.Fatal("adapters before any RL algorithm")
	}
	w0 := l.PolicyWeights()
	train(t, l, groupBatch())
	sft := l.PolicyWeights()
	if maxDiff(sft, w0) == 0 {
		t.Fatal("SFT moved no weight")
	}
	if err := l.SetAlgorithm(GRPO, 0); err != nil {
		t.Fatal(err)
	}
	if l.Adapter() != nil {
		t.Fatal("adapters before the first RL step")
	}
	for range 3 {
		train(t, l, groupBatch())
	}
	ad := l.Adapter()
	if ad == nil || ad.Rank != 2 || ad.Alpha != 4 || !slices.Equal(ad.TargetModules, []string{"q_proj", "v_proj", "down_proj"}) {
		t.Fatalf("adapter after the RL steps: %+v", ad)
	}
	if d := maxDiff(l.BaseWeights(), sft); d != 0 {
		t.Errorf("the frozen base moved by %g", d)
	}
	merged := l.PolicyWeights()
	if maxDiff(merged, sft) == 0 {
		t.Error("RL steps moved no adapter")
	}
	for name, w := range merged {
		adapted := strings.Contains(name, "q_proj.weight") || strings.Contains(name, "v_proj.weight") || strings.Contains(name, "down_proj.weight")
		if moved := !slices.Equal(w, sft[name]); moved != adapted {
			t.Errorf("%s: moved %v, adapted %v", name, moved, adapted)
		}
	}
	aw := l.AdapterWeights()
	if len(aw) != 6 {
		t.Errorf("%d adapter tensors, want 6 (A and B of 3 projections)", len(aw))
	}
	st := l.Optimizer().State()
	if len(st.Tensors) != 2*len(aw) {
		t.Errorf("optimizer state has %d tensors, want %d (two moments per adapter tensor)", len(st.Tensors), 2*len(aw))
	}
	for _, x := range st.Tensors {
		if !strings.Contains(x.Name, "lora_") {
			t.Errorf("optimizer state for %s, not an adapter", x.Name)
		}
	}
	// The merged weights are what the model computes with: the learner's
	// forward equals a plain model built from them.
	m, err := model.New(l.Model().Config, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Params() {
		m.B.Upload(p.W, merged[p.Name])
	}
	if d := logprobDiff(t, l.Model(), m, groupBatch()); d > 1e-5 {
		t.Errorf("merged model's log probs differ from the adapted model's by %g", d)
	}
}

func logprobDiff(t *testing.T, a, b *model.Model, bb Batch) float64 {
	t.Helper()
	seqs := make([]model.Sequence, len(bb.Prompts))
	for i := range seqs {
		seqs[i] = model.Sequence{Prompt: bb.Prompts[i], Response: bb.Responses[i]}
	}
	bt, err := model.NewBatch(seqs, 0, true, a.Config.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	la, _, err := a.Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	la = slices.Clone(la)
	lb, _, err := b.Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	var d float64
	for i := range la {
		d = max(d, float64(abs32(la[i]-lb[i])))
	}
	return d
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// A LoRA checkpoint is the base model plus a PEFT adapter and the
// adapters' optimizer state; a learner loading it continues exactly as
// the one that wrote it. With dropout, the dropout source's state travels
// too.
func TestLoRACheckpointResumes(t *testing.T) {
	for _, dropout := range []float64{0, 0.1} {
		c := loraConfig(GRPO)
		c.LoRA.Dropout = dropout
		a := newLearner(t, c)
		train(t, a, groupBatch())
		train(t, a, groupBatch())
		dir := savedTo(t, a)
		for _, f := range []string{"config.json", "model.safetensors", model.AdapterWeights, model.AdapterConfig, OptimizerFile, StateFile} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("dropout %v: %v", dropout, err)
			}
		}
		f, err := safetensors.ReadFile(filepath.Join(dir, OptimizerFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range f.Names() {
			if !strings.Contains(n, "lora_") {
				t.Errorf("optimizer file holds %s", n)
			}
		}
		// The directory serves base + adapter.
		served, err := model.LoadServed(dir, cpu.New())
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(served.Weights(), a.PolicyWeights()); d > 1e-6 {
			t.Errorf("LoadServed differs from the learner's merged weights by %g", d)
		}

		b := loaded(t, c, dir)
		train(t, a, groupBatch())
		train(t, b, groupBatch())
		if d := maxDiff(a.PolicyWeights(), b.PolicyWeights()); d != 0 {
			t.Errorf("dropout %v: resumed learner differs by %g after a step", dropout, d)
		}
		if d := maxDiff(a.AdapterWeights(), b.AdapterWeights()); d != 0 {
			t.Errorf("dropout %v: resumed adapters differ by %g", dropout, d)
		}
	}
}

// A checkpoint's adapter must match the learner's LoRA config.
func TestLoRALoadRefusesMismatch(t *testing.T) {
	a := newLearner(t, loraConfig(GRPO))
	train(t, a, groupBatch())
	dir := savedTo(t, a)
	noLoRA := newLearner(t, tinyConfig(GRPO))
	if err := noLoRA.Load(dir); err == nil || !strings.Contains(err.Error(), "no lora") {
		t.Errorf("load into a learner without lora: %v", err)
	}
	c := loraConfig(GRPO)
	c.LoRA.Rank = 4
	other := newLearner(t, c)
	if err := other.Load(dir); err == nil || !strings.Contains(err.Error(), "r=2") {
		t.Errorf("load into a learner of rank 4: %v", err)
	}
	bad := loraConfig(GRPO)
	bad.LoRA.TargetModules = []string{"qkv"}
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "qkv") {
		t.Errorf("bad target accepted: %v", err)
	}
}

// With LoRAWarmup, SFT starts the adapters and trains only them; RL goes
// on with the same adapters.
func TestLoRAWarmup(t *testing.T) {
	c := loraConfig(SFT)
	c.LoRAWarmup = true
	l := newLearner(t, c)
	w0 := l.PolicyWeights()
	b := groupBatch()
	b.Weights = []float64{2, 0, 1, 1, 0, 1, 1, 1}
	train(t, l, b)
	if l.Adapter() == nil {
		t.Fatal("no adapters after a LoRA warm-up step")
	}
	if d := maxDiff(l.BaseWeights(), w0); d != 0 {
		t.Fatalf("the base moved by %g in a LoRA warm-up", d)
	}
	sft := l.PolicyWeights()
	if maxDiff(sft, w0) == 0 {
		t.Fatal("the LoRA warm-up moved no adapter")
	}
	adapters := l.AdapterWeights()
	if err := l.SetAlgorithm(GRPO, 0); err != nil {
		t.Fatal(err)
	}
	train(t, l, groupBatch())
	if d := maxDiff(l.BaseWeights(), w0); d != 0 {
		t.Fatalf("the base moved by %g in RL", d)
	}
	if maxDiff(l.AdapterWeights(), adapters) == 0 {
		t.Fatal("RL after the LoRA warm-up moved no adapter")
	}
}

// With LoRAWarmupAfter k, the first k SFT steps train every weight and
// the adapters start at step k on the base those steps left; a negative
// value, or one without LoRAWarmup, is refused.
func TestLoRAWarmupAfter(t *testing.T) {
	c := loraConfig(SFT)
	c.LoRAWarmup, c.LoRAWarmupAfter = true, 2
	l := newLearner(t, c)
	w := l.PolicyWeights()
	for k := range 2 {
		train(t, l, groupBatch())
		if l.Adapter() != nil {
			t.Fatalf("adapters after base step %d of 2", k+1)
		}
		if maxDiff(l.PolicyWeights(), w) == 0 {
			t.Fatalf("base step %d moved no weight", k+1)
		}
		w = l.PolicyWeights()
	}
	train(t, l, groupBatch())
	if l.Adapter() == nil {
		t.Fatal("no adapters at step 3")
	}
	if d := maxDiff(l.BaseWeights(), w); d != 0 {
		t.Fatalf("the base moved by %g once the adapters started", d)
	}
	if maxDiff(l.PolicyWeights(), w) == 0 {
		t.Fatal("the LoRA step moved no adapter")
	}
	for _, bad := range []struct {
		warmup bool
		after  int
	}{{true, -1}, {false, 2}} {
		c := loraConfig(SFT)
		c.LoRAWarmup, c.LoRAWarmupAfter = bad.warmup, bad.after
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), "lora_warmup_after") {
			t.Errorf("lora_warmup %v, lora_warmup_after %d: %v", bad.warmup, bad.after, err)
		}
	}
}

// A rank above a target matrix's smaller dimension is refused before the
// model is loaded or built, naming the rank, the module and the
// dimension: rank 100000000 ended in the Go runtime's out-of-memory crash
// once the adapters started.
func TestLoRARankAboveModelRefused(t *testing.T) {
	dir := t.TempDir()
	m, err := model.New(*tinyModel(), cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	for _, fromDir := range []bool{false, true} {
		c := loraConfig(GRPO)
		c.LoRA.Rank = 100000000 // down_proj is 32×16, v_proj 16×8
		if fromDir {
			c.Model, c.ModelDir = nil, dir
		}
		_, err := New(c)
		if err == nil || !strings.Contains(err.Error(), "r 100000000 exceeds v_proj's smaller dimension 8") {
			t.Errorf("model dir %v: New: %v", fromDir, err)
		}
		if fromDir && (err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "config.json"))) {
			t.Errorf("the error does not name %s: %v", filepath.Join(dir, "config.json"), err)
		}
	}
	c := loraConfig(GRPO)
	c.LoRA.Rank = 8 // v_proj's outputs: allowed
	newLearner(t, c)
}
