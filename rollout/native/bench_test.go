package native

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
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
			m.InitRandom(1)
			tok := tokenizer.Builtin()
			// Zero the end-of-turn rows of the tied embedding: their logit is
			// then 0, below the greedy maximum, so every sequence runs its
			// full length and the batch stays full.
			emb := m.Weights()["model.embed_tokens.weight"]
			for _, id := range tok.StopIDs() {
				clear(emb[id*384 : (id+1)*384])
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
		})
	}
}
