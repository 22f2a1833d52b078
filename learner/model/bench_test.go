package model

import (
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
)

// benchConfig is the ~10M-parameter model of the training-step benchmark
// (9.7M parameters; testdata/bench_train_step.py builds the same in torch).
func benchConfig() Config {
	return Config{Architecture: Qwen2, HiddenSize: 384, IntermediateSize: 1024, NumLayers: 6,
		NumHeads: 6, NumKVHeads: 2, HeadDim: 64, VocabSize: 768, MaxPositions: 512,
		RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
}

// BenchmarkTrainStep is forward + backward over 8 rows of 256 tokens, every
// token after the first scored (the gradient of the sum of log probs), as
// one RL micro-batch.
func BenchmarkTrainStep(b *testing.B) { benchTrainStep(b, false) }

// BenchmarkTrainStepValueHead is BenchmarkTrainStep on a model with a value
// head, backward taking dLoss/dValue (all ones) with dLoss/dLogProb: the
// shared critic's cost over the policy alone.
func BenchmarkTrainStepValueHead(b *testing.B) { benchTrainStep(b, true) }

func benchTrainStep(b *testing.B, valueHead bool) {
	m, err := New(benchConfig(), cpu.New())
	if err != nil {
		b.Fatal(err)
	}
	m.InitRandom(1)
	if valueHead {
		if err := m.AddValueHead(1); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, seqLen = 8, 256
	seqs := make([]Sequence, rows)
	for i := range seqs {
		s := Sequence{Prompt: []int32{int32(rng.IntN(768))}, Response: make([]int32, seqLen-1)}
		for j := range s.Response {
			s.Response[j] = int32(rng.IntN(768))
		}
		seqs[i] = s
	}
	bt, err := NewBatch(seqs, seqLen, false, 768)
	if err != nil {
		b.Fatal(err)
	}
	ones := make([]float32, len(bt.Outputs))
	for i := range ones {
		ones[i] = 1
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.ZeroGrad()
		if valueHead {
			if _, _, _, err := m.ForwardWithValues(bt); err != nil {
				b.Fatal(err)
			}
			if err := m.BackwardWithValues(ones, nil, ones); err != nil {
				b.Fatal(err)
			}
			continue
		}
		if _, _, err := m.Forward(bt); err != nil {
			b.Fatal(err)
		}
		if err := m.Backward(ones, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rows*seqLen*b.N)/b.Elapsed().Seconds(), "tokens/s")
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		b.ReportMetric(float64(ru.Maxrss)/1024, "peakRSS-MiB")
	}
}
