package native

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
)

// benchConfig is the ~10M-parameter model of learner/model's training
// benchmark; testdata/bench_decode.py builds the same in PyTorch.
func benchConfig() model.Config {
	return model.Config{Architecture: model.Qwen2, HiddenSize: 384, IntermediateSize: 1024, NumLayers: 6,
		NumHeads: 6, NumKVHeads: 2, HeadDim: 64, VocabSize: 768, MaxPositions: 512,
		RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
}

const (
	benchPrompt = 16  // prompt tokens per sequence
	benchNew    = 128 // generated tokens per sequence
)

// BenchmarkDecode is greedy generation of 128 tokens after a 16-token
// prompt for batch sequences at once, through the whole engine (scheduler,
// prefill, KV-cache decode, sampling). tokens/s counts generated tokens
// over the whole time, prefill included, as bench_decode.py does.
func BenchmarkDecode(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			m, err := model.New(benchConfig(), cpu.New())
			if err != nil {
				b.Fatal(err)
			}
			benchDecode(b, m, batch)
		})
	}
}

// qwen05B is Qwen2.5-0.5B's shape (random weights);
// testdata/hf_generate.py builds the same in transformers.
func qwen05B() model.Config {
	return model.Config{Architecture: model.Qwen2, HiddenSize: 896, IntermediateSize: 4864, NumLayers: 24, NumHeads: 14, NumKVHeads: 2, HeadDim: 64,
		VocabSize: 151936, MaxPositions: 32768, RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
}

// decodeShapes are BenchmarkDecodeGPU's models (RLNODE_DECODE_SHAPE):
// Qwen2.5-0.5B's shape, the default, and a tiny one for a rehearsal on
// the emulated GPU.
var decodeShapes = map[string]func() model.Config{
	"qwen2.5-0.5b": qwen05B,
	"tiny": func() model.Config {
		return model.Config{Architecture: model.Qwen2, HiddenSize: 64, IntermediateSize: 160, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 16,
			VocabSize: 768, MaxPositions: 512, RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
	},
}

// BenchmarkDecodeGPU is BenchmarkDecode on GPU 0 with Qwen2.5-0.5B's
// shape (RLNODE_DECODE_SHAPE=tiny takes a small model): the engine's
// model, KV caches and activations on the device, fp32 and with bf16
// matrix products (cuda-bf16). Skipped where the CUDA backend cannot run
// (failed under RLNODE_REQUIRE_GPU=1). Its peer is transformers' generate
// on the same shape (testdata/hf_generate.py).
func BenchmarkDecodeGPU(b *testing.B) {
	shape := os.Getenv("RLNODE_DECODE_SHAPE")
	if shape == "" {
		shape = "qwen2.5-0.5b"
	}
	config, ok := decodeShapes[shape]
	if !ok {
		b.Fatalf("RLNODE_DECODE_SHAPE=%q: want qwen2.5-0.5b or tiny", shape)
	}
	if err := cuda.Available().Err(); err != nil {
		if os.Getenv("RLNODE_REQUIRE_GPU") == "1" {
			b.Fatalf("RLNODE_REQUIRE_GPU=1: %v", err)
		}
		b.Skipf("no GPU: %v", err)
	}
	for _, device := range []string{"cuda", "cuda-bf16"} {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/batch=%d", device, batch), func(b *testing.B) {
				be, err := OpenBackend(device)
				if err != nil {
					b.Fatal(err)
				}
				defer be.(io.Closer).Close()
				m, err := model.New(config(), be)
				if err != nil {
					b.Fatal(err)
				}
				benchDecode(b, m, batch)
			})
		}
	}
}

// benchDecode times batch greedy generations of benchNew tokens after
// benchPrompt random tokens on m (its weights made random here).
func benchDecode(b *testing.B, m *model.Model, batch int) {
	m.InitRandom(1)
	tok := tokenizer.Builtin()
	// Zero the end-of-turn rows of the tied embedding: their logit is
	// then 0, below the greedy maximum, so every sequence runs its
	// full length and the batch stays full.
	h := m.Config.HiddenSize
	emb := m.Weights()["model.embed_tokens.weight"]
	for _, id := range tok.StopIDs() {
		clear(emb[id*h : (id+1)*h])
	}
	m.B.Upload(m.Embed.W, emb)
	e, err := New(m, tok, Config{MaxBatch: batch, MaxStepTokens: batch * benchPrompt})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := make([]engine.Request, batch)
	for i := range reqs {
		p := make([]int, benchPrompt)
		for j := range p {
			p[j] = rng.IntN(700)
		}
		reqs[i] = engine.Request{Prompt: p, Params: engine.SamplingParams{MaxTokens: benchNew}}
	}
	// One generation first: the device compiles or loads its kernels then.
	if _, err := e.Generate(context.Background(), reqs[:1]); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := e.Generate(context.Background(), reqs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if n := len(r.Samples[0].TokenIDs); n != benchNew {
				b.Fatalf("a sequence stopped after %d tokens", n)
			}
		}
	}
	b.ReportMetric(float64(batch*benchNew*b.N)/b.Elapsed().Seconds(), "tokens/s")
}
