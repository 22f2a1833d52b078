package shard

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/learner/cuda/cudatest"
	"github.com/rlnode/rlnode/learner/model"
)

// BenchmarkDeviceStep times GRPO steps of learners on a GPU (on the
// emulated device, tiny shape only, where there is none): one learner
// (shards=1: the fused AdamW over every tensor) and two in-process ranks on
// the same device under ZeRO stage 0 and stage 1 (each rank half the rows;
// gradients over the ring through page-locked host buffers, the update on
// the device). The two ranks share one GPU, so their figure is the one
// learner's plus what sharding costs (copies, the ring, the all-gather),
// not a speed-up. RLNODE_STEP_SHAPE=qwen2.5-0.5b takes Qwen2.5-0.5B's
// shape with random weights; RLNODE_STEP_SEQ and RLNODE_STEP_BATCH the
// rows (default 1024 x 8 there, 16 x 8 for tiny). It reports ms/step and
// the bytes a rank copies to the host per step.
func BenchmarkDeviceStep(b *testing.B) {
	shape := os.Getenv("RLNODE_STEP_SHAPE")
	cfg := tinyModel()
	seq, rows := stepEnv("RLNODE_STEP_SEQ", 16), stepEnv("RLNODE_STEP_BATCH", 8)
	switch shape {
	case "", "tiny":
		shape = "tiny"
	case "qwen2.5-0.5b":
		cfg = &model.Config{Architecture: model.Qwen2, HiddenSize: 896, IntermediateSize: 4864, NumLayers: 24, NumHeads: 14, NumKVHeads: 2, HeadDim: 64,
			VocabSize: 151936, MaxPositions: 32768, RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
		seq, rows = stepEnv("RLNODE_STEP_SEQ", 1024), stepEnv("RLNODE_STEP_BATCH", 8)
	default:
		b.Fatalf("RLNODE_STEP_SHAPE=%q: want tiny or qwen2.5-0.5b", shape)
	}
	if seq < 2 || seq > cfg.MaxPositions {
		b.Fatalf("RLNODE_STEP_SEQ=%d: want 2 to %d", seq, cfg.MaxPositions)
	}
	batch := deviceStepBatch(seq, rows, cfg.VocabSize)
	device := "gpu"
	if cudatest.GPUBackend(b) == nil {
		if shape != "tiny" {
			b.Skipf("no GPU for shape %s", shape)
		}
		device = "emulated"
	}
	newBackend := func(b *testing.B) func() (backend.Backend, error) {
		if device == "gpu" {
			return cudatest.GPUBackend(b)
		}
		return cudatest.EmuBackend(b)
	}
	for _, tc := range []struct{ shards, stage int }{{1, 0}, {2, 0}, {2, 1}} {
		b.Run(fmt.Sprintf("%s/shards=%d/stage=%d", device, tc.shards, tc.stage), func(b *testing.B) {
			c := learner.DefaultConfig()
			c.Model, c.Seed, c.LR = cfg, 1, 1e-5
			c.MaxResponseLen, c.MicroBatchSeqs = seq, rows
			c.Backend = newBackend(b)
			var ls []*learner.Learner
			var ranks []*Rank
			if tc.shards == 1 {
				ls = []*learner.Learner{newLearner(b, c)}
			} else {
				c.Shards, c.ZeROStage = tc.shards, tc.stage
				ranks = memGroup(b, c, Options{Timeout: 5 * time.Minute})
				for _, r := range ranks {
					ls = append(ls, r.Learner())
				}
			}
			step := func() {
				errs := make([]error, len(ls))
				if ranks != nil {
					_, errs = trainAll(ranks, batch)
				} else {
					_, errs[0] = ls[0].Train(batch)
				}
				for i, l := range ls {
					if errs[i] == nil {
						errs[i] = l.Model().B.(*cuda.DeviceBackend).Sync()
					}
					if errs[i] != nil {
						b.Fatalf("learner %d: %v", i, errs[i])
					}
				}
			}
			step() // warm-up: allocations, kernel loads, cuBLASLt heuristics
			db := ls[0].Model().B.(*cuda.DeviceBackend)
			down := db.Downloaded
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				step()
			}
			sec := time.Since(start).Seconds() / float64(b.N)
			b.ReportMetric(sec*1e3, "ms/step")
			b.ReportMetric(float64(db.Downloaded-down)/float64(b.N)/(1<<20), "MiB-to-host/step")
			b.ReportMetric(float64(seq*rows)/sec, "tokens/s")
		})
	}
}

// deviceStepBatch is rows GRPO samples of seq random tokens (half prompt,
// half response) in groups of four with mixed rewards.
func deviceStepBatch(seq, rows, vocab int) learner.Batch {
	rng := rand.New(rand.NewPCG(7, 8))
	tokens := func(n int) []int32 {
		x := make([]int32, n)
		for i := range x {
			x[i] = int32(rng.IntN(vocab))
		}
		return x
	}
	bt := learner.Batch{PolicyID: "bench"}
	for i := range rows {
		bt.Prompts = append(bt.Prompts, tokens(seq/2))
		bt.Responses = append(bt.Responses, tokens(seq-seq/2))
		bt.Rewards = append(bt.Rewards, float64(i%2))
		bt.GroupIDs = append(bt.GroupIDs, int64(i/4))
	}
	return bt
}

func stepEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
