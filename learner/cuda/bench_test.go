package cuda

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
)

// stepShapes are the models BenchmarkTrainingStep times
// (RLNODE_STEP_SHAPE): a tiny one for a run on the emulated device, and
// Qwen2.5-0.5B's shape with random weights.
var stepShapes = map[string]model.Config{
	"tiny": {Architecture: model.Qwen2, HiddenSize: 64, IntermediateSize: 160, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 16,
		VocabSize: 256, MaxPositions: 4096, RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"},
	"qwen2.5-0.5b": {Architecture: model.Qwen2, HiddenSize: 896, IntermediateSize: 4864, NumLayers: 24, NumHeads: 14, NumKVHeads: 2, HeadDim: 64,
		VocabSize: 151936, MaxPositions: 32768, RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"},
}

// bf16Peaks are dense bf16 tensor-core peaks, TFLOP/s, from NVIDIA's
// datasheets, by a fragment of the device name; the first match counts,
// so the more specific names come first.
var bf16Peaks = []struct {
	name string
	peak float64
}{
	{"H100 PCIe", 756}, {"H100 NVL", 835}, {"H100", 989}, {"H200", 989}, {"GH200", 989}, {"A100", 312}, {"L40S", 362},
}

// bf16Peak is the device's dense bf16 peak, or 0 where the name is not
// in bf16Peaks.
func bf16Peak(name string) float64 {
	for _, p := range bf16Peaks {
		if strings.Contains(name, p.name) {
			return p.peak
		}
	}
	return 0
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkTrainingStep times optimizer steps (forward, a mean-logprob
// loss, backward, clipping, AdamW) of a Qwen2 model on the CPU backend and
// on the device backend, fp32 and with bf16 matrix products: on the GPU
// where there is one, else on the emulated device (tiny shape only).
// RLNODE_STEP_SHAPE picks the model (tiny, qwen2.5-0.5b), RLNODE_STEP_SEQ
// and RLNODE_STEP_BATCH the rows (each half prompt, half scored response);
// RLNODE_STEP_CPU=0 leaves the CPU backend out; RLNODE_STEP_HOSTOPT=1 adds
// the device backend with AdamW on the host (-hostopt), as before the
// fused AdamW; RLNODE_STEP_ACTBF16=1 the device backend keeping the layer
// activations as bf16 between the passes (-bf16acts; the allocator's
// figures show the memory); RLNODE_STEP_TC=1 the bf16 device backend with
// the attention on the tensor cores (-tc); RLNODE_STEP_PROFILE=1 logs
// one more step with every device op timed alone (OpProfile). It reports
// tokens/s, MFU% on a GPU whose dense bf16 peak is known (bf16Peaks), and,
// counting 6·params·tokens (plus attention's 6·layers·heads·headDim·Σ
// seq²), TFLOP/s.
func BenchmarkTrainingStep(b *testing.B) {
	shape := os.Getenv("RLNODE_STEP_SHAPE")
	if shape == "" {
		shape = "tiny"
	}
	cfg, ok := stepShapes[shape]
	if !ok {
		b.Fatalf("RLNODE_STEP_SHAPE=%q: want tiny or qwen2.5-0.5b", shape)
	}
	seq, batch := envInt("RLNODE_STEP_SEQ", 64), envInt("RLNODE_STEP_BATCH", 2)
	if shape != "tiny" {
		seq, batch = envInt("RLNODE_STEP_SEQ", 1024), envInt("RLNODE_STEP_BATCH", 8)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	seqs := make([]model.Sequence, batch)
	for i := range seqs {
		s := model.Sequence{Prompt: make([]int32, seq/2), Response: make([]int32, seq-seq/2)}
		for j := range s.Prompt {
			s.Prompt[j] = int32(rng.IntN(cfg.VocabSize))
		}
		for j := range s.Response {
			s.Response[j] = int32(rng.IntN(cfg.VocabSize))
		}
		seqs[i] = s
	}
	bt, err := model.NewBatch(seqs, seq, false, cfg.VocabSize)
	if err != nil {
		b.Fatal(err)
	}
	obj := func(_ int, _ *model.Batch, logp, _ []float32) (float64, []float32, []float32, error) {
		n := float32(len(logp))
		var loss float64
		dl := make([]float32, len(logp))
		for i := range logp {
			loss -= float64(logp[i] / n)
			dl[i] = -1 / n
		}
		return loss, dl, nil, nil
	}
	var peak float64 // the GPU's dense bf16 TFLOP/s, where known: MFU
	run := func(b *testing.B, be backend.Backend, actBF16 bool) {
		m, err := model.New(cfg, be)
		if err != nil {
			b.Fatal(err)
		}
		m.InitRandom(1)
		m.ActivationsBF16 = actBF16
		tr := &model.Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0.01), MaxGradNorm: 1}
		step := func() {
			if _, err := tr.Step([]*model.Batch{bt}, 1e-5, obj); err != nil {
				b.Fatal(err)
			}
			if s, ok := be.(interface{ Sync() error }); ok {
				if err := s.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		}
		step() // warm-up: allocations, kernel loads, cuBLASLt heuristics
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			step()
		}
		sec := time.Since(start).Seconds() / float64(b.N)
		tokens := float64(seq * batch)
		attn := 6 * float64(cfg.NumLayers*cfg.NumHeads*cfg.HeadDim) * float64(batch) * float64(seq) * float64(seq) / 2
		flops := 6*float64(m.NumParams())*tokens + attn
		b.ReportMetric(tokens/sec, "tokens/s")
		b.ReportMetric(flops/sec/1e12, "TFLOP/s")
		b.ReportMetric(sec*1e3, "ms/step")
		if _, onCPU := be.(*cpu.Backend); !onCPU && peak > 0 {
			b.ReportMetric(100*flops/sec/1e12/peak, "MFU%")
		}
		if db, ok := be.(*DeviceBackend); ok && os.Getenv("RLNODE_STEP_PROFILE") == "1" {
			// One more step, untimed by the benchmark, with each device op
			// timed alone (OpProfile).
			b.StopTimer()
			prof := NewOpProfile()
			db.Prof = prof
			t0 := time.Now()
			step()
			wall := time.Since(t0)
			db.Prof = nil
			var rep strings.Builder
			prof.Report(&rep, 25)
			b.Logf("profiled step: %.1f ms wall, of which device ops:\n%s", float64(wall.Microseconds())/1e3, rep.String())
		}
	}
	if os.Getenv("RLNODE_STEP_CPU") != "0" {
		b.Run("cpu", func(b *testing.B) { run(b, cpu.New(), false) })
	}
	var dev Accel
	name := "gpu"
	if g := testGPU(b); g != nil {
		dev = g
		peak = bf16Peak(g.Name())
	} else if shape == "tiny" {
		if d := emuDevice(b); d != nil {
			dev, name = d, "emulated"
		}
	}
	if dev == nil {
		b.Logf("no device for shape %s: the device backend is not timed", shape)
		return
	}
	for _, gemm := range []DType{F32, BF16} {
		for _, variant := range []string{"", "-hostopt", "-bf16acts", "-tc"} {
			hostOpt, actBF16, tc := variant == "-hostopt", variant == "-bf16acts", variant == "-tc"
			if hostOpt && os.Getenv("RLNODE_STEP_HOSTOPT") != "1" || actBF16 && os.Getenv("RLNODE_STEP_ACTBF16") != "1" ||
				tc && (gemm != BF16 || os.Getenv("RLNODE_STEP_TC") != "1") {
				continue
			}
			sub := fmt.Sprintf("%s-%s%s", name, gemm, variant)
			b.Run(sub, func(b *testing.B) {
				db := NewDeviceBackend(dev, gemm)
				db.AttnTensorCores = tc
				if name == "emulated" {
					db.Block = 32 // one warp: fewest threads to schedule
				}
				defer db.A.Release()
				if hostOpt {
					// AdamW on the host: weights and gradients copied
					// out and back every step.
					run(b, hostOnly{db}, false)
				} else {
					run(b, db, actBF16)
				}
				plans := ""
				if g, ok := dev.(*GPU); ok {
					h, m := g.GemmPlans()
					plans = fmt.Sprintf("; cuBLASLt plans: %d reused, %d built", h, m)
				}
				b.Logf("allocator: %+v%s", db.A.Stats(), plans)
			})
		}
	}
}

// BenchmarkAttention times one causal attention's forward and backward
// passes (Attention, then AttentionBackward, fp32) on the device backend
// with the warp-per-query kernels, the tiled ones, and the tensor-core
// ones (tiled-tc: bf16 products), on the GPU
// where there is one, else on the emulated device at a small shape.
// RLNODE_ATTN_SEQ and RLNODE_ATTN_BATCH set the rows (one sequence each;
// default 1024 × 8 on a GPU), the heads are Qwen2.5-0.5B's (14 query, 2
// key/value, 64 dimensions). It reports ms per forward+backward, the
// forward's share (fwd-ms), and
// TFLOP/s counting the causal half of the products: 2·2·heads·headDim·seq²/2
// per row forward, 2.5 times that backward.
// learner/cuda/testdata/torch_attention.py is PyTorch's
// scaled_dot_product_attention on the same shape.
func BenchmarkAttention(b *testing.B) {
	const heads, kvHeads, headDim = 14, 2, 64
	var dev Accel
	name := "gpu"
	seq, batch := envInt("RLNODE_ATTN_SEQ", 1024), envInt("RLNODE_ATTN_BATCH", 8)
	if g := testGPU(b); g != nil {
		dev = g
	} else if d := emuDevice(b); d != nil {
		dev, name = d, "emulated"
		seq, batch = envInt("RLNODE_ATTN_SEQ", 64), envInt("RLNODE_ATTN_BATCH", 1)
	}
	if dev == nil {
		b.Skip("neither a GPU nor the emulated device")
	}
	nq, nk, nl := batch*seq*heads*headDim, batch*seq*kvHeads*headDim, batch*heads*seq
	rng := rand.New(rand.NewPCG(21, 22))
	starts := make([]int32, batch*seq) // one sequence a row: all start at 0
	host := map[string][]float32{"q": randn(rng, nq, 1), "k": randn(rng, nk, 1), "v": randn(rng, nk, 1), "dout": randn(rng, nq, 1)}
	variants := []struct {
		name string
		kind AttentionKernels
		tc   bool
	}{{"warp", WarpAttention, false}, {"tiled", TiledAttention, false}, {"tiled-tc", TiledAttention, true}}
	for _, vr := range variants {
		b.Run(name+"-"+vr.name, func(b *testing.B) {
			db := NewDeviceBackend(dev, F32)
			db.AttnKernels = vr.kind
			if vr.tc {
				db.GEMM, db.AttnTensorCores = BF16, true
			}
			defer db.A.Release()
			up := func(x []float32) backend.Tensor {
				t := db.Alloc(len(x))
				db.Upload(t, x)
				return t
			}
			q, k, v, dOut := up(host["q"]), up(host["k"]), up(host["v"]), up(host["dout"])
			out, lse := db.Alloc(nq), db.Alloc(nl)
			dq, dk, dv := db.Alloc(nq), db.Alloc(nk), db.Alloc(nk)
			var fwdSec float64
			pass := func() {
				t0 := time.Now()
				db.Attention(out, lse, q, k, v, starts, batch, seq, heads, kvHeads, headDim)
				if err := db.Sync(); err != nil {
					b.Fatal(err)
				}
				fwdSec += time.Since(t0).Seconds()
				db.AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse, starts, batch, seq, heads, kvHeads, headDim)
				if err := db.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			pass() // warm-up: kernel loads
			fwdSec = 0
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				pass()
			}
			sec := time.Since(start).Seconds() / float64(b.N)
			fwd := 4 * float64(heads*headDim) * float64(seq) * float64(seq) / 2 * float64(batch)
			b.ReportMetric(sec*1e3, "ms/pass")
			b.ReportMetric(fwdSec/float64(b.N)*1e3, "fwd-ms")
			b.ReportMetric(3.5*fwd/sec/1e12, "TFLOP/s")
		})
	}
}

func TestBF16Peak(t *testing.T) {
	for name, want := range map[string]float64{
		"GPU 0: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)": 989,
		"NVIDIA H100 PCIe":        756,
		"NVIDIA H200":             989,
		"NVIDIA A100-SXM4-80GB":   312,
		"NVIDIA GeForce RTX 4090": 0,
	} {
		if got := bf16Peak(name); got != want {
			t.Errorf("%s: peak %v, want %v", name, got, want)
		}
	}
}
