package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// criticLoss is sum(wl*logp + we*ent) + rl.ValueLoss(values) (token-mean,
// clipped at clip around old) with its gradients, everything in float64.
type criticLoss struct {
	wl, we    []float32
	old, ret  []float32
	clip      float64
	valueOnly bool // no policy terms: dLogp and dEntropy are nil
}

func newCriticLoss(rng *rand.Rand, n int, clip float64, valueOnly bool) *criticLoss {
	return &criticLoss{wl: randomWeights(rng, n), we: randomWeights(rng, n),
		old: randomWeights(rng, n), ret: randomWeights(rng, n), clip: clip, valueOnly: valueOnly}
}

func (c *criticLoss) eval(t *testing.T, bt *Batch, s Scores) (float64, ScoreGrads) {
	t.Helper()
	mask := bt.Split(ones(len(s.Values)))
	vl, err := rl.ValueLoss(rl.ValueBatch{Values: bt.Split(s.Values), OldValues: bt.Split(c.old),
		Returns: bt.Split(c.ret), Mask: mask}, c.clip, rl.TokenMean, rl.CountNorm(mask))
	if err != nil {
		t.Fatal(err)
	}
	dv, err := bt.Join(vl.DValues)
	if err != nil {
		t.Fatal(err)
	}
	d := ScoreGrads{Values: dv}
	loss := vl.Loss
	if !c.valueOnly {
		d.LogProbs, d.Entropy = c.wl, c.we
		for i := range s.LogProbs {
			loss += float64(c.wl[i])*float64(s.LogProbs[i]) + float64(c.we[i])*float64(s.Entropy[i])
		}
	}
	return loss, d
}

func ones(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

func scores(t *testing.T, m *Model, bt *Batch) Scores {
	t.Helper()
	logp, ent, val, err := m.ForwardWithValues(bt)
	if err != nil {
		t.Fatal(err)
	}
	return Scores{LogProbs: logp, Entropy: ent, Values: val}
}

// criticGradCheck compares BackwardWithValues's gradient of every
// trainable parameter with central finite differences at a few random
// elements each (every element of the value head).
func criticGradCheck(t *testing.T, m *Model, bt *Batch, loss *criticLoss, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 2))
	_, d := loss.eval(t, bt, scores(t, m, bt))
	m.ZeroGrad()
	if err := m.BackwardWithValues(d.LogProbs, d.Entropy, d.Values); err != nil {
		t.Fatal(err)
	}
	grads := m.Grads()
	at := func() float64 {
		l, _ := loss.eval(t, bt, scores(t, m, bt))
		return l
	}
	const h = 1e-2
	checked := map[string]int{}
	for _, p := range m.TrainableParams() {
		w := m.download(p.W)
		g := grads[p.Name]
		var gmax float64
		for _, v := range g {
			gmax = max(gmax, math.Abs(float64(v)))
		}
		idx := []int{rng.IntN(len(w)), rng.IntN(len(w)), rng.IntN(len(w))}
		if m.Value.owns(p) {
			idx = idx[:0]
			for i := range w {
				idx = append(idx, i)
			}
		}
		for _, i := range idx {
			orig := w[i]
			w[i] = orig + h
			m.B.Upload(p.W, w)
			lp := at()
			w[i] = orig - h
			m.B.Upload(p.W, w)
			lm := at()
			w[i] = orig
			m.B.Upload(p.W, w)
			fd := (lp - lm) / (2 * h)
			tol := 2e-3 + 2e-2*max(math.Abs(fd), 0.1*gmax)
			if diff := math.Abs(fd - float64(g[i])); diff > tol {
				t.Errorf("%s[%d]: backward %.6f, finite difference %.6f", p.Name, i, g[i], fd)
			}
			checked[p.Name]++
		}
	}
	if checked[ValueHeadWeight] == 0 || checked[ValueHeadBias] == 0 {
		t.Fatalf("value head not checked: %v", checked)
	}
}

func TestValueHeadFiniteDifferenceGradients(t *testing.T) {
	for _, arch := range []string{Qwen2, Llama} {
		for _, pack := range []bool{false, true} {
			for _, valueOnly := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/pack=%v/valueOnly=%v", arch, pack, valueOnly), func(t *testing.T) {
					m := tinyModel(t, tinyConfig(arch), 7)
					if err := m.AddValueHead(3); err != nil {
						t.Fatal(err)
					}
					// A head as large as the trunk's weights, so values
					// and their gradients are of order one.
					w := randomWeights(rand.New(rand.NewPCG(5, 5)), m.Config.HiddenSize)
					m.B.Upload(m.Value.Weight.W, w)
					m.B.Upload(m.Value.Bias.W, []float32{0.3})
					seqs := randomSequences(rand.New(rand.NewPCG(3, 3)), 4, 32)
					seqLen := 0
					if pack {
						seqLen = 12
					}
					bt, err := NewBatch(seqs, seqLen, pack, 32)
					if err != nil {
						t.Fatal(err)
					}
					// Clipping off: a finite difference across the clip's
					// kink says nothing (the golden test covers clipping).
					loss := newCriticLoss(rand.New(rand.NewPCG(11, 1)), len(bt.Outputs), 1e6, valueOnly)
					criticGradCheck(t, m, bt, loss, 11)
				})
			}
		}
	}
}

// Under LoRA the base is frozen; the adapters and the value head train.
func TestValueHeadWithLoRA(t *testing.T) {
	m := tinyModel(t, tinyConfig(Qwen2), 7)
	if err := m.AddValueHead(3); err != nil {
		t.Fatal(err)
	}
	if err := m.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj", "down_proj"}, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	randomizeLoRA(m, 8) // nonzero B, so that A's gradients are nonzero too
	var names []string
	for _, p := range m.TrainableParams() {
		names = append(names, p.Name)
	}
	if n := len(names); n != 2*3*2+2 || names[n-2] != ValueHeadWeight || names[n-1] != ValueHeadBias {
		t.Fatalf("trainable params %v: want 12 adapters then the value head", names)
	}
	seqs := randomSequences(rand.New(rand.NewPCG(3, 3)), 4, 32)
	bt, err := NewBatch(seqs, 12, true, 32)
	if err != nil {
		t.Fatal(err)
	}
	criticGradCheck(t, m, bt, newCriticLoss(rand.New(rand.NewPCG(2, 1)), len(bt.Outputs), 1e6, false), 4)
	if m.Embed.G != nil || m.Layers[0].Attn.Q.Weight.G != nil {
		t.Error("base weights got gradients under LoRA")
	}
	// The head added after the adapters trains too.
	m2 := tinyModel(t, tinyConfig(Llama), 7)
	if err := m2.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj"}}); err != nil {
		t.Fatal(err)
	}
	if err := m2.AddValueHead(1); err != nil {
		t.Fatal(err)
	}
	if got := len(m2.TrainableParams()); got != 2*2+2 {
		t.Errorf("%d trainable params, want 4 adapters and the head", got)
	}
}

// One BackwardWithValues equals the policy part (Backward) plus the value
// part (value-only BackwardWithValues) accumulated.
func TestBackwardWithValuesAddsUp(t *testing.T) {
	m := tinyModel(t, tinyConfig(Qwen2), 5)
	if err := m.AddValueHead(2); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	bt, _ := NewBatch(randomSequences(rng, 5, 32), 0, false, 32)
	dl, de, dv := randomWeights(rng, len(bt.Outputs)), randomWeights(rng, len(bt.Outputs)), randomWeights(rng, len(bt.Outputs))
	scores(t, m, bt)
	m.ZeroGrad()
	if err := m.BackwardWithValues(dl, de, dv); err != nil {
		t.Fatal(err)
	}
	want := m.Grads()
	m.ZeroGrad()
	if err := m.Backward(dl, de); err != nil {
		t.Fatal(err)
	}
	if g := m.Grads()[ValueHeadWeight]; maxAbs(g) != 0 {
		t.Errorf("Backward gave the value head a gradient (max %g)", maxAbs(g))
	}
	if err := m.BackwardWithValues(nil, nil, dv); err != nil {
		t.Fatal(err)
	}
	got := m.Grads()
	for name, w := range want {
		if d := maxDiff(got[name], w); d > 1e-5+1e-4*maxAbs(w) {
			t.Errorf("%s: max diff %g between split and joint backward", name, d)
		}
	}
}

func maxAbs(v []float32) float64 {
	var m float64
	for _, x := range v {
		m = max(m, math.Abs(float64(x)))
	}
	return m
}

func maxDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

func TestValueHeadSaveLoadRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		arch  string
		dtype safetensors.DType
		tol   float64
	}{{Qwen2, safetensors.F32, 0}, {Llama, safetensors.F32, 0}, {Qwen2, safetensors.BF16, 1e-2}} {
		t.Run(fmt.Sprintf("%s/%s", tc.arch, tc.dtype), func(t *testing.T) {
			m := tinyModel(t, tinyConfig(tc.arch), 7)
			if err := m.AddValueHead(3); err != nil {
				t.Fatal(err)
			}
			m.B.Upload(m.Value.Bias.W, []float32{0.25})
			dir := t.TempDir()
			if err := m.Save(dir, tc.dtype); err != nil {
				t.Fatal(err)
			}
			f, err := safetensors.ReadFile(filepath.Join(dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			for name, shape := range map[string][]int{ValueHeadWeight: {1, 16}, ValueHeadBias: {1}} {
				if ts, ok := f.Tensor(name); !ok || !sameShape(ts.Shape, shape) {
					t.Errorf("checkpoint tensor %s: present %v, want shape %v", name, ok, shape)
				}
			}
			l, err := Load(dir, cpu.New())
			if err != nil {
				t.Fatal(err)
			}
			if l.Value == nil {
				t.Fatal("loaded model has no value head")
			}
			bt, _ := NewBatch(randomSequences(rand.New(rand.NewPCG(1, 1)), 3, 32), 0, false, 32)
			want, got := scores(t, m, bt), scores(t, l, bt)
			if d := maxDiff(got.Values, want.Values); d > tc.tol {
				t.Errorf("values differ by %g after the round trip", d)
			}
			if len(l.Params()) != len(m.Params()) || len(l.TrainableParams()) != len(m.Params()) {
				t.Errorf("loaded model: %d params, %d trainable; want %d", len(l.Params()), len(l.TrainableParams()), len(m.Params()))
			}
			// The frozen reference copy keeps the head's weights.
			ref, err := l.Clone()
			if err != nil {
				t.Fatal(err)
			}
			if ref.Value == nil || len(ref.TrainableParams()) != 0 {
				t.Fatalf("clone: head %v, %d trainable params", ref.Value != nil, len(ref.TrainableParams()))
			}
			if d := maxDiff(scores(t, ref, bt).Values, got.Values); d != 0 {
				t.Errorf("clone's values differ by %g", d)
			}
		})
	}
}

func TestValueHeadBadInput(t *testing.T) {
	plain := tinyModel(t, tinyConfig(Qwen2), 7)
	bt, _ := NewBatch(randomSequences(rand.New(rand.NewPCG(1, 1)), 3, 32), 0, false, 32)
	n := len(bt.Outputs)
	if _, _, _, err := plain.ForwardWithValues(bt); err == nil || !strings.Contains(err.Error(), "no value head") {
		t.Errorf("ForwardWithValues without a head: %v", err)
	}
	if _, _, err := plain.Forward(bt); err != nil {
		t.Fatal(err)
	}
	if err := plain.BackwardWithValues(nil, nil, make([]float32, n)); err == nil || !strings.Contains(err.Error(), "no value head") {
		t.Errorf("dValues without a head: %v", err)
	}
	m := tinyModel(t, tinyConfig(Qwen2), 7)
	if err := m.BackwardWithValues(nil, nil, nil); err == nil || !strings.Contains(err.Error(), "no forward pass") {
		t.Errorf("backward before forward: %v", err)
	}
	if err := m.AddValueHead(1); err != nil {
		t.Fatal(err)
	}
	if err := m.AddValueHead(1); err == nil {
		t.Error("a second value head was accepted")
	}
	scores(t, m, bt)
	nan := make([]float32, n)
	nan[1] = float32(math.NaN())
	for _, tc := range []struct {
		name       string
		dl, de, dv []float32
		want       string
	}{
		{"short dValues", nil, nil, make([]float32, n-1), fmt.Sprintf("%d dValues values for %d outputs", n-1, n)},
		{"long dLogp", make([]float32, n+1), nil, nil, fmt.Sprintf("%d dLogp values for %d outputs", n+1, n)},
		{"nan dValues", nil, nil, nan, "dValues is not finite"},
		{"nan dEntropy", nil, nan, make([]float32, n), "dEntropy is not finite"},
	} {
		if err := m.BackwardWithValues(tc.dl, tc.de, tc.dv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	// A checkpoint with the head's weight but not its bias names the
	// missing tensor.
	dir := t.TempDir()
	if err := m.Save(dir, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var keep []safetensors.Tensor
	for _, name := range f.Names() {
		if name != ValueHeadBias {
			ts, _ := f.Tensor(name)
			keep = append(keep, *ts)
		}
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), keep, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, cpu.New()); err == nil || !strings.Contains(err.Error(), `"v_head.summary.bias": missing`) {
		t.Errorf("load without the head's bias: %v", err)
	}
}

// SaveLoRA keeps the head beside the adapter; LoadLoRA brings both back
// onto a base without a head, and refuses a bad head file whole.
func TestValueHeadLoRASaveLoad(t *testing.T) {
	m := tinyModel(t, tinyConfig(Qwen2), 7)
	if err := m.AddValueHead(3); err != nil {
		t.Fatal(err)
	}
	if err := m.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "up_proj"}}); err != nil {
		t.Fatal(err)
	}
	randomizeLoRA(m, 2)
	m.B.Upload(m.Value.Bias.W, []float32{-0.5})
	bt, _ := NewBatch(randomSequences(rand.New(rand.NewPCG(1, 1)), 3, 32), 0, false, 32)
	want := scores(t, m, bt)
	dir := t.TempDir()
	if err := m.SaveLoRA(dir, "tiny"); err != nil {
		t.Fatal(err)
	}
	adapter, err := safetensors.ReadFile(filepath.Join(dir, AdapterWeights))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range adapter.Names() {
		if strings.Contains(name, "v_head") {
			t.Errorf("%s in %s: PEFT would refuse it", name, AdapterWeights)
		}
	}
	m2 := tinyModel(t, tinyConfig(Qwen2), 7)
	if err := m2.LoadLoRA(dir); err != nil {
		t.Fatal(err)
	}
	if m2.Value == nil {
		t.Fatal("no value head after LoadLoRA")
	}
	got := scores(t, m2, bt)
	if d := maxDiff(got.Values, want.Values) + maxDiff(got.LogProbs, want.LogProbs); d != 0 {
		t.Errorf("reloaded adapter and head differ by %g", d)
	}
	if n := len(m2.TrainableParams()); n != 2*2*2+2 {
		t.Errorf("%d trainable params after LoadLoRA, want 8 adapters and the head", n)
	}
	// Merging folds the adapters into the base and keeps the head.
	m2.MergeLoRA()
	merged := scores(t, m2, bt)
	if d := maxDiff(merged.Values, want.Values); d > 1e-5 || m2.Value == nil {
		t.Errorf("merged model: head %v, values differ by %g", m2.Value != nil, d)
	}

	// A head of the wrong width is refused before anything changes.
	bad, err := safetensors.FromFloat32(ValueHeadWeight, safetensors.F32, []int{1, 8}, make([]float32, 8))
	if err != nil {
		t.Fatal(err)
	}
	bias, _ := safetensors.FromFloat32(ValueHeadBias, safetensors.F32, []int{1}, []float32{0})
	if err := safetensors.WriteFile(filepath.Join(dir, ValueHeadFile), []safetensors.Tensor{bad, bias}, nil); err != nil {
		t.Fatal(err)
	}
	m3 := tinyModel(t, tinyConfig(Qwen2), 7)
	err = m3.LoadLoRA(dir)
	if err == nil || !strings.Contains(err.Error(), ValueHeadFile) || !strings.Contains(err.Error(), `"v_head.summary.weight": shape [1 8], want [1 16]`) {
		t.Errorf("bad head file: %v", err)
	}
	if m3.Value != nil || len(m3.loraParams()) != 0 {
		t.Error("a refused LoadLoRA changed the model")
	}
}

// With DetachTrunk the value loss trains the head alone: its gradient is
// the attached head's, every other parameter's is the policy part's.
func TestValueHeadDetachTrunk(t *testing.T) {
	m := tinyModel(t, tinyConfig(Qwen2), 5)
	if err := m.AddValueHead(2); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 4))
	bt, _ := NewBatch(randomSequences(rng, 4, 32), 0, false, 32)
	dl, dv := randomWeights(rng, len(bt.Outputs)), randomWeights(rng, len(bt.Outputs))
	grads := func(detach bool, dLogp, dValues []float32) map[string][]float32 {
		m.Value.DetachTrunk = detach
		scores(t, m, bt)
		m.ZeroGrad()
		if err := m.BackwardWithValues(dLogp, nil, dValues); err != nil {
			t.Fatal(err)
		}
		return m.Grads()
	}
	attached := grads(false, dl, dv)
	detached := grads(true, dl, dv)
	policy := grads(false, dl, nil)
	for name, g := range detached {
		want := policy[name]
		if name == ValueHeadWeight || name == ValueHeadBias {
			want = attached[name]
			if maxAbs(want) == 0 {
				t.Fatalf("%s: no gradient to compare", name)
			}
		}
		if d := maxDiff(g, want); d > 1e-6+1e-5*maxAbs(want) {
			t.Errorf("%s: max diff %g", name, d)
		}
	}
	if d := maxDiff(attached["model.embed_tokens.weight"], policy["model.embed_tokens.weight"]); d == 0 {
		t.Error("attached head: the value loss left the trunk's gradient unchanged")
	}
}
