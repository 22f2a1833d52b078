package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
)

// Incremental decoding must score tokens as the training forward does:
// the learner and the inference engine have to agree on every log prob.
const inferTol = 2e-4

// incrementalScores runs seqs through Inference in lockstep: each prompt in
// chunks of random sizes (prefill), then one response token per step, all
// sequences of a step in one batch. It returns, per sequence, the logits
// that predict each response token.
func incrementalScores(t *testing.T, m *Model, seqs []Sequence, rng *rand.Rand) [][][]float32 {
	t.Helper()
	inf, err := m.NewInference()
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config.VocabSize
	type state struct {
		cache *KVCache
		fed   int // tokens of prompt+response fed
		all   []int32
	}
	st := make([]*state, len(seqs))
	out := make([][][]float32, len(seqs))
	for i, s := range seqs {
		st[i] = &state{cache: m.NewKVCache(), all: append(append([]int32(nil), s.Prompt...), s.Response...)}
	}
	for {
		var chunks []Chunk
		var who []int
		for i, s := range st {
			P := len(seqs[i].Prompt)
			// The last response token predicts nothing scored.
			if s.fed >= len(s.all)-1 && s.fed >= P {
				continue
			}
			n := 1
			if s.fed < P {
				n = 1 + rng.IntN(P-s.fed)
			}
			chunks = append(chunks, Chunk{Cache: s.cache, Tokens: s.all[s.fed : s.fed+n]})
			who = append(who, i)
		}
		if len(chunks) == 0 {
			return out
		}
		logits, err := inf.Forward(chunks)
		if err != nil {
			t.Fatal(err)
		}
		for r, i := range who {
			s := st[i]
			s.fed += len(chunks[r].Tokens)
			if s.cache.Len() != s.fed {
				t.Fatalf("sequence %d: cache holds %d tokens, fed %d", i, s.cache.Len(), s.fed)
			}
			if s.fed >= len(seqs[i].Prompt) {
				out[i] = append(out[i], append([]float32(nil), logits[r*V:(r+1)*V]...))
			}
		}
	}
}

func logSoftmaxAt(z []float32, target int32) float32 {
	m := math.Inf(-1)
	for _, v := range z {
		m = math.Max(m, float64(v))
	}
	var s float64
	for _, v := range z {
		s += math.Exp(float64(v) - m)
	}
	return float32(float64(z[target]) - m - math.Log(s))
}

func TestInferenceMatchesForward(t *testing.T) {
	for _, arch := range []string{Qwen2, Llama} {
		t.Run(arch, func(t *testing.T) {
			cfg := tinyConfig(arch)
			m := tinyModel(t, cfg, 7)
			rng := rand.New(rand.NewPCG(3, 4))
			seqs := randomSequences(rng, 6, cfg.VocabSize)
			// A long one so attention spans several blocks of the training kernel.
			long := Sequence{Prompt: make([]int32, 40), Response: make([]int32, 20)}
			for i := range long.Prompt {
				long.Prompt[i] = int32(rng.IntN(cfg.VocabSize))
			}
			for i := range long.Response {
				long.Response[i] = int32(rng.IntN(cfg.VocabSize))
			}
			seqs = append(seqs, long)
			checkAgainstForward(t, m, seqs, rng)
		})
	}
}

func checkAgainstForward(t *testing.T, m *Model, seqs []Sequence, rng *rand.Rand) {
	t.Helper()
	V := m.Config.VocabSize
	bt, err := NewBatch(seqs, 0, false, V)
	if err != nil {
		t.Fatal(err)
	}
	logp, _, err := m.Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	wantLogits := m.Logits()
	got := incrementalScores(t, m, seqs, rng)
	per := bt.Split(logp)
	for _, sp := range bt.Spans {
		s := seqs[sp.Seq]
		if len(got[sp.Seq]) != len(s.Response) {
			t.Fatalf("sequence %d: %d scored steps, want %d", sp.Seq, len(got[sp.Seq]), len(s.Response))
		}
		for k, target := range s.Response {
			z := got[sp.Seq][k]
			want := wantLogits[(sp.Off+k)*V : (sp.Off+k+1)*V]
			for j := range z {
				if d := math.Abs(float64(z[j] - want[j])); d > inferTol*(1+math.Abs(float64(want[j]))) {
					t.Fatalf("sequence %d token %d: logit %d = %v, training forward %v", sp.Seq, k, j, z[j], want[j])
				}
			}
			if lp := logSoftmaxAt(z, target); math.Abs(float64(lp-per[sp.Seq][k])) > inferTol {
				t.Errorf("sequence %d token %d: log prob %v, training forward %v", sp.Seq, k, lp, per[sp.Seq][k])
			}
		}
	}
}

func TestInferenceWithLoRAMatchesForward(t *testing.T) {
	cfg := tinyConfig(Qwen2)
	m := tinyModel(t, cfg, 8)
	if err := m.AddLoRA(LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj", "down_proj"}, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, p := range m.loraParams() {
		m.B.Upload(p.W, randomWeights(rng, p.Len()))
	}
	checkAgainstForward(t, m, randomSequences(rng, 4, cfg.VocabSize), rng)
}

func TestKVCacheClone(t *testing.T) {
	cfg := tinyConfig(Qwen2)
	m := tinyModel(t, cfg, 9)
	inf, err := m.NewInference()
	if err != nil {
		t.Fatal(err)
	}
	a := m.NewKVCache()
	if _, err := inf.Forward([]Chunk{{Cache: a, Tokens: []int32{1, 2, 3, 4}}}); err != nil {
		t.Fatal(err)
	}
	b := a.Clone()
	if b.Len() != 4 || b.Bytes() != a.Bytes() {
		t.Fatalf("clone: len %d bytes %d, want 4 and %d", b.Len(), b.Bytes(), a.Bytes())
	}
	// Both continue with the same token in one batch: same logits.
	logits, err := inf.Forward([]Chunk{{Cache: a, Tokens: []int32{5}}, {Cache: b, Tokens: []int32{5}}})
	if err != nil {
		t.Fatal(err)
	}
	V := cfg.VocabSize
	for j := 0; j < V; j++ {
		if logits[j] != logits[V+j] {
			t.Fatalf("logit %d: %v from the original, %v from the clone", j, logits[j], logits[V+j])
		}
	}
	// Diverging afterwards leaves the other unchanged.
	if _, err := inf.Forward([]Chunk{{Cache: b, Tokens: []int32{6, 7}}}); err != nil {
		t.Fatal(err)
	}
	if a.Len() != 5 || b.Len() != 7 {
		t.Errorf("lengths %d and %d, want 5 and 7", a.Len(), b.Len())
	}
}

func TestInferenceBadChunks(t *testing.T) {
	cfg := tinyConfig(Qwen2)
	m := tinyModel(t, cfg, 10)
	other := tinyConfig(Llama)
	other.NumLayers = 3
	o := tinyModel(t, other, 1)
	inf, err := m.NewInference()
	if err != nil {
		t.Fatal(err)
	}
	c := m.NewKVCache()
	long := make([]int32, cfg.MaxPositions+1)
	freed := m.NewKVCache()
	if _, err := inf.Forward([]Chunk{{Cache: freed, Tokens: []int32{1, 2}}}); err != nil {
		t.Fatal(err)
	}
	freed.Free()
	elsewhere := tinyModel(t, cfg, 10) // the same shape on its own backend
	tests := []struct {
		name   string
		chunks []Chunk
		want   string
	}{
		{"none", nil, "no chunks"},
		{"no cache", []Chunk{{Tokens: []int32{1}}}, "chunk 0: no KV cache"},
		{"empty", []Chunk{{Cache: c}}, "chunk 0: no tokens"},
		{"bad id", []Chunk{{Cache: c, Tokens: []int32{1, int32(cfg.VocabSize)}}}, "chunk 0: token 1: id 32 out of range"},
		{"negative id", []Chunk{{Cache: c, Tokens: []int32{-1}}}, "id -1 out of range"},
		{"shared cache", []Chunk{{Cache: c, Tokens: []int32{1}}, {Cache: c, Tokens: []int32{2}}}, "chunk 1: its KV cache is already used"},
		{"too long", []Chunk{{Cache: c, Tokens: long}}, "exceed max_position_embeddings 64"},
		{"foreign cache", []Chunk{{Cache: o.NewKVCache(), Tokens: []int32{1}}}, "another model shape"},
		{"freed cache", []Chunk{{Cache: freed, Tokens: []int32{1}}}, "chunk 0: its KV cache was freed"},
		{"other backend", []Chunk{{Cache: c, Tokens: []int32{1}}, {Cache: elsewhere.NewKVCache(), Tokens: []int32{1}}}, "chunk 1: KV cache on another backend"},
	}
	for _, tc := range tests {
		_, err := inf.Forward(tc.chunks)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if c.Len() != 0 {
		t.Errorf("failed calls changed the cache: length %d", c.Len())
	}
}

// deviceBackend is the cpu backend seen only through backend.Backend (no
// HostMemory, as with a device backend), counting the copies to the host.
type deviceBackend struct {
	backend.Backend
	downloads, allocs int
}

func (d *deviceBackend) Alloc(n int) backend.Tensor {
	d.allocs++
	return d.Backend.Alloc(n)
}

func (d *deviceBackend) Download(dst []float32, src backend.Tensor) {
	d.downloads++
	d.Backend.Download(dst, src)
}

// TestInferenceOnDeviceBackend runs the incremental forward on a backend
// whose tensors the model cannot read in place: it still matches the
// training forward, and each call copies one thing to the host, the
// logits.
func TestInferenceOnDeviceBackend(t *testing.T) {
	cfg := tinyConfig(Llama)
	host := tinyModel(t, cfg, 11)
	dev := &deviceBackend{Backend: cpu.New()}
	m, err := New(cfg, dev)
	if err != nil {
		t.Fatal(err)
	}
	w := host.Weights()
	for _, p := range m.Params() {
		m.B.Upload(p.W, w[p.Name])
	}
	rng := rand.New(rand.NewPCG(7, 8))
	checkAgainstForward(t, m, randomSequences(rng, 5, cfg.VocabSize), rng)

	inf, err := m.NewInference()
	if err != nil {
		t.Fatal(err)
	}
	a, b := m.NewKVCache(), m.NewKVCache()
	dev.downloads = 0
	for step, chunks := range [][]Chunk{
		{{Cache: a, Tokens: []int32{1, 2, 3}}, {Cache: b, Tokens: []int32{4}}},
		{{Cache: a, Tokens: []int32{5}}, {Cache: b, Tokens: []int32{6}}},
	} {
		if _, err := inf.Forward(chunks); err != nil {
			t.Fatal(err)
		}
		if dev.downloads != step+1 {
			t.Fatalf("after %d forward calls: %d downloads, want one per call", step+1, dev.downloads)
		}
	}
	// Steps of many tokens in few chunks (prefill) alternating with steps
	// of many chunks of one token (decoding) settle on scratch tensors
	// that hold both, and caches with room stop reallocating.
	caches := make([]*KVCache, 12)
	for i := range caches {
		caches[i] = m.NewKVCache()
	}
	var allocs []int
	for round := 0; round < 3; round++ {
		prefill := []Chunk{{Cache: a, Tokens: make([]int32, 30)}}
		decode := make([]Chunk, len(caches))
		for i, c := range caches {
			decode[i] = Chunk{Cache: c, Tokens: []int32{int32(i)}}
		}
		for _, chunks := range [][]Chunk{prefill, decode} {
			if _, err := inf.Forward(chunks); err != nil {
				t.Fatal(err)
			}
		}
		a.Free()
		a = m.NewKVCache()
		allocs = append(allocs, dev.allocs)
	}
	if allocs[2] != allocs[1]+2*cfg.NumLayers {
		t.Errorf("allocations after each round %v: the third round allocated %d tensors, want only its new prefill cache's %d", allocs, allocs[2]-allocs[1], 2*cfg.NumLayers)
	}
	inf.Free()
	a.Free()
	b.Free()
}

// TestKVCacheGrowsAndFrees feeds one sequence token by token past several
// capacity doublings, a clone taken midway continuing beside it: both keep
// matching a fresh cache fed the same tokens at once.
func TestKVCacheGrowsAndFrees(t *testing.T) {
	cfg := tinyConfig(Qwen2)
	m := tinyModel(t, cfg, 12)
	inf, err := m.NewInference()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	toks := make([]int32, 50)
	for i := range toks {
		toks[i] = int32(rng.IntN(cfg.VocabSize))
	}
	a := m.NewKVCache()
	var clone *KVCache
	V := cfg.VocabSize
	for i, tok := range toks {
		chunks := []Chunk{{Cache: a, Tokens: []int32{tok}}}
		if clone != nil {
			chunks = append(chunks, Chunk{Cache: clone, Tokens: []int32{tok}})
		}
		got, err := inf.Forward(chunks)
		if err != nil {
			t.Fatal(err)
		}
		got = append([]float32(nil), got...)
		if i == 20 {
			clone = a.Clone()
		}
		if i%7 != 6 {
			continue
		}
		fresh := m.NewKVCache()
		want, err := inf.Forward([]Chunk{{Cache: fresh, Tokens: toks[:i+1]}})
		if err != nil {
			t.Fatal(err)
		}
		for r := 0; r < len(chunks); r++ {
			for j := 0; j < V; j++ {
				if d := math.Abs(float64(got[r*V+j] - want[j])); d > inferTol*(1+math.Abs(float64(want[j]))) {
					t.Fatalf("token %d, cache %d: logit %d = %v, one-chunk forward %v", i, r, j, got[r*V+j], want[j])
				}
			}
		}
		fresh.Free()
		if fresh.Len() != 0 || fresh.Bytes() != 0 {
			t.Fatalf("freed cache: length %d, %d bytes", fresh.Len(), fresh.Bytes())
		}
	}
	if a.Len() != len(toks) || clone.Len() != len(toks) {
		t.Errorf("lengths %d and %d, want %d", a.Len(), clone.Len(), len(toks))
	}
}
