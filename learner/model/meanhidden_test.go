package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMeanHidden checks MeanHidden through the logits: for every prefix
// of a sequence, n·mean(n) − (n−1)·mean(n−1) is the prefix's last final
// hidden state, and the LM head applied to it must give Forward's
// next-token logits for that prefix. Batched and one-by-one runs agree.
func TestMeanHidden(t *testing.T) {
	for _, arch := range []string{Qwen2, Llama} {
		t.Run(arch, func(t *testing.T) {
			cfg := tinyConfig(arch)
			m := tinyModel(t, cfg, 5)
			in, err := m.NewInference()
			if err != nil {
				t.Fatal(err)
			}
			defer in.Free()
			h, V := cfg.HiddenSize, cfg.VocabSize
			head := make([]float32, V*h)
			m.B.Download(head, m.LMHead.W)
			rng := rand.New(rand.NewPCG(1, 2))
			seq := make([]int32, 12)
			for i := range seq {
				seq[i] = int32(rng.IntN(V))
			}
			prefixes := make([][]int32, len(seq))
			for n := 1; n <= len(seq); n++ {
				prefixes[n-1] = seq[:n]
			}
			means, err := in.MeanHidden(prefixes)
			if err != nil {
				t.Fatal(err)
			}
			for n := 1; n <= len(seq); n++ {
				last := make([]float64, h)
				for j := range last {
					last[j] = float64(n) * float64(means[(n-1)*h+j])
					if n > 1 {
						last[j] -= float64(n-1) * float64(means[(n-2)*h+j])
					}
				}
				logits, err := in.Forward([]Chunk{{Tokens: seq[:n], Cache: m.NewKVCache()}})
				if err != nil {
					t.Fatal(err)
				}
				for v := range V {
					var z float64
					for j := range h {
						z += float64(head[v*h+j]) * last[j]
					}
					if math.Abs(z-float64(logits[v])) > 2e-3*(1+math.Abs(z)) {
						t.Fatalf("prefix %d, token %d: head·hidden %v, Forward logit %v", n, v, z, logits[v])
					}
				}
			}
			one, err := in.MeanHidden([][]int32{seq})
			if err != nil {
				t.Fatal(err)
			}
			for j := range h {
				if d := one[j] - means[(len(seq)-1)*h+j]; d > 1e-5 || d < -1e-5 {
					t.Fatalf("hidden %d: alone %v, in a batch %v", j, one[j], means[(len(seq)-1)*h+j])
				}
			}
			if _, err := in.MeanHidden([][]int32{{int32(V)}}); err == nil {
				t.Error("a token id out of the vocabulary was accepted")
			}
		})
	}
}
