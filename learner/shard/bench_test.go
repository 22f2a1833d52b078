package shard

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
)

// Benchmarks between processes on loopback (each rank a re-executed test
// binary, as in the multi-process tests; RLNODE_BENCH_BUCKET sets the
// buckets' size in elements):
//
//	go test ./learner/shard -run '^$' -bench 'AllReduce|Memcpy|TrainStepQuickstart' -benchtime 5x
//	RLNODE_BENCH_BUCKET=65536 go test ./learner/shard -run '^$' -bench 'TrainStep(Quickstart|9M)/shards=2' -benchtime 3x
//
// The quickstart's gradient (0.5 M floats) fits one default bucket, so
// only smaller buckets let its reduction overlap backward; the 9.7M
// model's fills about ten.
// AllReduce (with Options' default buckets) reports bus bandwidth as NCCL's
// tests define it: bytes/time × 2(n−1)/n, the traffic each rank's link
// carries in a ring all-reduce.

const benchKind = "shard-bench"

// BenchJoin makes a bench actor rank Rank of Peers (mailboxes), reducing
// buffers of Floats elements: shared with the other ranks when they are on
// this host, unless Slots (then every chunk goes through the Transport,
// over the bulk path's slots or TCP).
type BenchJoin struct {
	Rank   int
	Peers  []actor.Ref
	Floats int
	Slots  bool
}

// BenchRun asks a bench actor for Iters all-reduces of Floats elements,
// read through views when View and the buffers are shared (benchReduce).
type BenchRun struct {
	Floats, Iters int
	FirstOp       uint64
	View          bool
}

func init() {
	actor.RegisterMessage(BenchJoin{}, BenchRun{})
	actor.RegisterKind(benchKind, func(ctx *actor.Context, _ any) (actor.Actor, error) {
		mb, err := OpenMailbox(ctx.System(), ctx.Self().Name+".mailbox")
		if err != nil {
			return nil, err
		}
		return &benchActor{mb: mb}, nil
	})
}

type benchActor struct {
	mb *Mailbox
	g  *ring
	x  []float32
}

// benchRing joins rank of peers for buffers of floats elements and returns
// the buffer to reduce (shared unless slots).
func benchRing(ctx context.Context, mb *Mailbox, rank int, peers []actor.Ref, floats int, slots bool) (*ring, []float32, error) {
	t, err := mb.Transport(1, rank, peers, Options{})
	if err != nil {
		return nil, nil, err
	}
	o, err := benchEnvOptions() // the child ranks inherit the variable
	if err != nil {
		return nil, nil, err
	}
	o = o.withDefaults()
	g := &ring{t: t, bucket: o.BucketElems, inFlight: o.InFlight}
	var x []float32
	if !slots {
		if x, err = g.setupShared(ctx, 1, floats); err != nil {
			return nil, nil, err
		}
	}
	if x == nil {
		x = make([]float32, floats)
	}
	return g, x, nil
}

func (a *benchActor) Receive(_ *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case MailboxRequest:
		return MailboxRef{Ref: a.mb.Ref()}, nil
	case BenchJoin:
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		if a.g, a.x, err = benchRing(ctx, a.mb, m.Rank, m.Peers, m.Floats, m.Slots); err != nil {
			return nil, err
		}
		return Joined{Rank: m.Rank}, nil
	case BenchRun:
		x := a.x
		if len(x) != m.Floats {
			return nil, fmt.Errorf("bench: run of %d floats, joined for %d", m.Floats, len(x))
		}
		for i := range m.Iters {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := benchReduce(ctx, a.g, m.FirstOp+2*uint64(i), x, m.View)
			cancel()
			if err != nil {
				return nil, err
			}
		}
		return Joined{}, nil
	}
	return nil, fmt.Errorf("bench: unexpected %T", msg)
}

var benchRuns int // names this process's mailbox uniquely per run

var benchSizes = []int{1 << 20, 16 << 20, 64 << 20} // bytes

// BenchmarkAllReduceLoopback is the ranks' all-reduce as they run it:
// on buffers shared between the processes of one host (shared.go), each
// rank reading the sums through its view (view.go), over TCP with
// RLNODE_BULK_TCP=1. It reports shared=1 when the buffers were shared.
func BenchmarkAllReduceLoopback(b *testing.B) { benchAllReduce(b, false, true) }

// BenchmarkAllReduceInPlace is the all-reduce on shared buffers that
// writes every sum into every rank's buffer (no views).
func BenchmarkAllReduceInPlace(b *testing.B) { benchAllReduce(b, false, false) }

// BenchmarkAllReduceSlots is the same all-reduce with every chunk pushed
// through the Transport: on one host through the bulk path's slots of
// shared memory (two copies per chunk), the design before shared buffers.
func BenchmarkAllReduceSlots(b *testing.B) { benchAllReduce(b, true, false) }

// benchReduce is all-reduce number op (numbers go by 2) of x: through the
// view when view and g has one (waiting for the other ranks to have read
// the previous result before x changes, and releasing this one at once:
// reading it is the caller's cost either way), else in place.
func benchReduce(ctx context.Context, g *ring, op uint64, x []float32, view bool) error {
	if !view || !g.viewing() {
		return g.allReduce(ctx, 1, op, x)
	}
	if op >= 2 {
		if err := g.shm.awaitReleased(ctx, Tag{Epoch: 1, Op: op - 2}); err != nil {
			return err
		}
	}
	err := g.forBuckets(len(x), func(b uint32, lo, hi int) error {
		return g.allReduceBucketToView(ctx, 1, op, b, x[lo:hi])
	})
	g.shm.release(op)
	return err
}

func benchAllReduce(b *testing.B, slots, view bool) {
	for _, n := range []int{2, 4} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("ranks=%d/MiB=%d", n, size>>20), func(b *testing.B) {
				sys := driverSystem(b)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				// Rank 0 is this process; the others are child processes.
				benchRuns++
				mb, err := OpenMailbox(sys, fmt.Sprintf("bench%d.mailbox", benchRuns))
				if err != nil {
					b.Fatal(err)
				}
				defer mb.Close()
				peers := []actor.Ref{mb.Ref()}
				var kids []actor.Ref
				for range n - 1 {
					refs, _ := startRanksTB(b, 1, "RLNODE_SHARD_MODEL=bench")
					r, err := actor.CallAs[MailboxRef](ctx, sys, refs[0], MailboxRequest{})
					if err != nil {
						b.Fatal(err)
					}
					kids = append(kids, refs[0])
					peers = append(peers, r.Ref)
				}
				joined := make(chan error, len(kids))
				for i, k := range kids {
					go func() {
						_, err := sys.Call(ctx, k, BenchJoin{Rank: i + 1, Peers: peers, Floats: size / 4, Slots: slots})
						joined <- err
					}()
				}
				g, x, err := benchRing(ctx, mb, 0, peers, size/4, slots)
				if err != nil {
					b.Fatal(err)
				}
				defer g.shm.close()
				for range kids {
					if err := <-joined; err != nil {
						b.Fatal(err)
					}
				}
				run := func(iters int, first uint64) {
					done := make(chan error, len(kids))
					for _, k := range kids {
						go func() {
							_, err := sys.Call(ctx, k, BenchRun{Floats: len(x), Iters: iters, FirstOp: first, View: view})
							done <- err
						}()
					}
					for i := range iters {
						if err := benchReduce(ctx, g, first+2*uint64(i), x, view); err != nil {
							b.Fatal(err)
						}
					}
					for range kids {
						if err := <-done; err != nil {
							b.Fatal(err)
						}
					}
				}
				run(1, 0) // warm: connections, buffers
				b.SetBytes(int64(size))
				b.ResetTimer()
				run(b.N, 2)
				b.StopTimer()
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(size)/sec/1e9*2*float64(n-1)/float64(n), "busGB/s")
				shared := 0.0
				if g.shm != nil {
					shared = 1
				}
				b.ReportMetric(shared, "shared")
			})
		}
	}
}

// BenchmarkMemcpy copies the same sizes within one process: the ceiling a
// collective between processes on one host could approach.
func BenchmarkMemcpy(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("MiB=%d", size>>20), func(b *testing.B) {
			src, dst := make([]byte, size), make([]byte, size)
			for i := range src {
				src[i] = byte(i)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				copy(dst, src)
			}
			b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

func quickstartConfig(shards int) learner.Config {
	l := learner.DefaultConfig()
	l.Model = &model.Config{Architecture: model.Qwen2, HiddenSize: 128, IntermediateSize: 384, NumLayers: 2,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 32, VocabSize: 768, MaxPositions: 64, RMSNormEps: 1e-6,
		RopeTheta: 10000, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
	l.Seed, l.LR, l.MicroBatchSeqs, l.MaxResponseLen = 1, 1e-4, 64, 8
	l.Shards, l.ZeROStage = shards, 1
	return l
}

// quickstartBatch is one quickstart GRPO step's shape: 32 prompts × 8
// samples, 16 prompt and 8 response tokens each.
func quickstartBatch() learner.Batch { return randomBatch(256, 16, 8) }

// randomBatch is n samples in groups of 8 with random tokens (vocab 768),
// prompts of promptLen and responses of respLen tokens, rewards 0 or 1.
func randomBatch(n, promptLen, respLen int) learner.Batch {
	rng := rand.New(rand.NewPCG(1, 2))
	var b learner.Batch
	for i := range n {
		p, r := make([]int32, promptLen), make([]int32, respLen)
		for k := range p {
			p[k] = int32(rng.IntN(768))
		}
		for k := range r {
			r[k] = int32(rng.IntN(768))
		}
		b.Prompts, b.Responses = append(b.Prompts, p), append(b.Responses, r)
		b.Rewards = append(b.Rewards, float64(rng.IntN(2)))
		b.GroupIDs = append(b.GroupIDs, int64(i/8))
	}
	return b
}

// bench9MConfig is learner/model's 9.7M-parameter training-step benchmark
// model (hidden 384, 6 layers, vocab 768, tied) as a ZeRO-1 learner.
func bench9MConfig(shards int) learner.Config {
	l := learner.DefaultConfig()
	l.Model = &model.Config{Architecture: model.Qwen2, HiddenSize: 384, IntermediateSize: 1024, NumLayers: 6,
		NumHeads: 6, NumKVHeads: 2, HeadDim: 64, VocabSize: 768, MaxPositions: 512, RMSNormEps: 1e-6,
		RopeTheta: 1e6, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
	l.Seed, l.LR, l.MicroBatchSeqs, l.MaxResponseLen = 1, 1e-4, 8, 240
	l.Shards, l.ZeROStage = shards, 1
	return l
}

// bench9MBatch is 2 groups × 8 samples of 16 prompt and 240 response
// tokens: 4,096 tokens a step.
func bench9MBatch() learner.Batch { return randomBatch(16, 16, 240) }

// benchOptions are the benchmarks' collective options: RLNODE_BENCH_BUCKET
// sets BucketElems (else the default, 1 Mi floats).
func benchOptions(b *testing.B) Options {
	o, err := benchEnvOptions()
	if err != nil {
		b.Fatal(err)
	}
	return o
}

func benchEnvOptions() (Options, error) {
	var o Options
	if s := os.Getenv("RLNODE_BENCH_BUCKET"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("RLNODE_BENCH_BUCKET=%q: want a positive element count", s)
		}
		o.BucketElems = n
	}
	return o, nil
}

// BenchmarkTrainStep9M is BenchmarkTrainStepQuickstart's step on the 9.7M
// model (bench9MConfig), 4,096 tokens a step: enough gradient (39 MB, 10
// default buckets) for the reduction to overlap backward.
func BenchmarkTrainStep9M(b *testing.B) {
	benchTrainStep(b, "bench9m", bench9MBatch(), 16*256)
}

// BenchmarkTrainStepQuickstart is one GRPO step of the quickstart model
// (hidden 128, 2 layers, vocab 768) on its batch shape, with the ranks in
// separate processes driven by a Group, each rank with GOMAXPROCS procs
// (its share of the cores; 1 shard on 1 core gives the per-core figure
// that 2 shards on a core each are measured against); tokens/s counts
// prompt and response tokens.
func BenchmarkTrainStepQuickstart(b *testing.B) {
	benchTrainStep(b, "quickstart", quickstartBatch(), 256*24)
}

// quickstartPPOConfig is quickstartConfig under PPO with a value head and
// two mini-batches: every rank needs the old log probs and values of the
// whole batch (its advantages are whitened over it).
func quickstartPPOConfig(shards int) learner.Config {
	l := quickstartConfig(shards)
	l.Algorithm, l.MiniBatches = learner.PPO, 2
	return l
}

// BenchmarkTrainStepQuickstartPPO is BenchmarkTrainStepQuickstart's step
// under PPO (quickstartPPOConfig): the pre-pass of old log probs and
// values weighs on it, which each rank runs on its own sequences and
// shares.
func BenchmarkTrainStepQuickstartPPO(b *testing.B) {
	benchTrainStep(b, "quickstart-ppo", quickstartBatch(), 256*24)
}

func benchTrainStep(b *testing.B, modelName string, batch learner.Batch, tokens int) {
	for _, tc := range []struct{ n, procs int }{{1, runtime.NumCPU()}, {1, 1}, {2, max(1, runtime.NumCPU()/2)}} {
		n := tc.n
		b.Run(fmt.Sprintf("shards=%d/procs=%d", n, tc.procs), func(b *testing.B) {
			sys := driverSystem(b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			// Each rank gets its share of the cores, as ranks on one host
			// would be pinned.
			refs, _ := startRanksTB(b, n, "RLNODE_SHARD_MODEL="+modelName, "GOMAXPROCS="+strconv.Itoa(tc.procs))
			g, err := NewGroup(ctx, sys, refs, benchOptions(b))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := g.Train(ctx, batch); err != nil { // warm
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := g.Train(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkTCPLoopback streams the same sizes over one loopback TCP
// connection inside one process: the socket ceiling under the bulk path.
func BenchmarkTCPLoopback(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("MiB=%d", size>>20), func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer lis.Close()
			go func() {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			}()
			c, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
