package weights

import (
	"math"
	"slices"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
)

// MergeLoRA (the engines' merge) agrees with the model's own merged
// weights, and WriteAdapter's directory loads back as the same adapters
// through the PEFT reader.
func TestMergeAndWriteAdapter(t *testing.T) {
	cfg := model.Config{Architecture: model.Qwen2, HiddenSize: 16, IntermediateSize: 32, NumLayers: 2, NumHeads: 2,
		NumKVHeads: 1, HeadDim: 8, VocabSize: 12, MaxPositions: 32, RMSNormEps: 1e-6, RopeTheta: 10000,
		TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
	m, err := model.New(cfg, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	m.InitRandom(1)
	base := m.Weights()
	if err := m.AddLoRA(model.LoRAConfig{Rank: 2, Alpha: 3, TargetModules: []string{"k_proj", "gate_proj"}, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers { // B is zero at start: make the adapters do something
		for _, lin := range []*model.Linear{l.Attn.K, l.MLP.Gate} {
			v := make([]float32, lin.LoRA.B.Len())
			for i := range v {
				v[i] = float32(math.Sin(float64(i)))
			}
			m.B.Upload(lin.LoRA.B.W, v)
		}
	}
	u, err := LoRAUpdate(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := MergeLoRA(u, base)
	if err != nil {
		t.Fatal(err)
	}
	want := m.MergedWeights()
	if len(got) != 4 {
		t.Errorf("merged %d tensors, want 4 (2 projections × 2 layers)", len(got))
	}
	for name, w := range got {
		var d float64
		for i := range w {
			d = max(d, math.Abs(float64(w[i]-want[name][i])))
		}
		if d > 1e-6 {
			t.Errorf("%s: MergeLoRA differs from the model's merge by %g", name, d)
		}
		if slices.Equal(w, base[name]) {
			t.Errorf("%s: unchanged by the merge", name)
		}
	}
	if _, err := MergeLoRA(Update{Tensors: base}, base); err == nil {
		t.Error("MergeLoRA took a full update")
	}

	dir := t.TempDir()
	if err := WriteAdapter(dir, u, "base"); err != nil {
		t.Fatal(err)
	}
	back, err := model.New(cfg, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := back.LoadLoRA(dir); err != nil {
		t.Fatalf("the adapter directory does not load as PEFT: %v", err)
	}
	bw := back.LoRAWeights()
	for name, w := range u.Tensors {
		if !slices.Equal(w, bw[name]) {
			t.Errorf("%s differs after WriteAdapter and LoadLoRA", name)
		}
	}
	if lc := back.LoRA(); lc.Rank != 2 || lc.Alpha != 3 {
		t.Errorf("loaded adapter config %+v", lc)
	}
}
