package model

import (
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

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
	step := func() {
		m.ZeroGrad()
		if valueHead {
			if _, _, _, err := m.ForwardWithValues(bt); err != nil {
				b.Fatal(err)
			}
			if err := m.BackwardWithValues(ones, nil, ones); err != nil {
				b.Fatal(err)
			}
			return
		}
		if _, _, err := m.Forward(bt); err != nil {
			b.Fatal(err)
		}
		if err := m.Backward(ones, nil); err != nil {
			b.Fatal(err)
		}
	}
	step() // warm-up, as the PyTorch script: allocates the activations
	cpu0 := cpuTime()
	b.ResetTimer()
	best := time.Duration(math.MaxInt64)
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		step()
		best = min(best, time.Since(t0))
	}
	// CPU seconds per step (user + system, all threads): on a machine
	// shared with other work it moves less than wall time.
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(rows*seqLen*b.N)/b.Elapsed().Seconds(), "tokens/s")
	// The fastest step, comparable with the PyTorch script's "best" on a
	// machine shared with other work.
	b.ReportMetric(float64(rows*seqLen)/best.Seconds(), "best-tokens/s")
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		b.ReportMetric(float64(ru.Maxrss)/1024, "peakRSS-MiB")
	}
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
