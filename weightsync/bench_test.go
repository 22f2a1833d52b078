package weightsync

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/rollout/weights"
)

// benchConfig is a Qwen2 model of about 9.8 M parameters: ~39 MB of
// float32 weights per version.
func benchConfig() model.Config {
	return model.Config{Architecture: model.Qwen2, HiddenSize: 512, IntermediateSize: 1536, NumLayers: 3,
		NumHeads: 8, NumKVHeads: 4, HeadDim: 64, VocabSize: tokenizer.BuiltinVocabSize, MaxPositions: 256,
		RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
}

// quickstartConfig is the quickstart recipe's model (models.policy.init):
// about 0.5 M parameters.
func quickstartConfig() model.Config {
	return model.Config{Architecture: model.Qwen2, HiddenSize: 128, IntermediateSize: 384, NumLayers: 2,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 32, VocabSize: 768, MaxPositions: 64,
		RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
}

func benchUpdate(b *testing.B) (string, weights.Update) { return benchUpdateOf(b, benchConfig()) }

func benchUpdateOf(b *testing.B, cfg model.Config) (string, weights.Update) {
	m, err := model.New(cfg, cpu.New())
	if err != nil {
		b.Fatal(err)
	}
	m.InitRandom(1)
	dir := nativetest.Save(b, m)
	m.InitRandom(2)
	return dir, weights.FullUpdate(m)
}

// BenchmarkPublish pushes one version of the ~39 MB model to 1 and to 3
// native engines in an embedded cluster: each engine pulls the same bulk
// offer, decodes it and swaps it in. BenchmarkBulkFetch is one plain pull
// of the same payload, the floor a push to one engine can reach.
func BenchmarkPublish(b *testing.B) {
	for _, tc := range []struct {
		name    string
		cfg     model.Config
		engines []int
	}{{"", benchConfig(), []int{1, 3}}, {"quickstart/", quickstartConfig(), []int{1}}} {
		dir, u := benchUpdateOf(b, tc.cfg)
		for _, engines := range tc.engines {
			benchPublish(b, fmt.Sprintf("%sengines=%d", tc.name, engines), dir, u, engines)
		}
	}
}

// BenchmarkCheckFinite is the publisher's check that a version holds no
// NaN or infinity (Syncer.Publish runs it once a version; each native
// engine once more on what it swaps in): the quickstart model's weights
// and the ~39 MB model's.
func BenchmarkCheckFinite(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  model.Config
	}{{"quickstart", quickstartConfig()}, {"39MB", benchConfig()}} {
		_, u := benchUpdateOf(b, tc.cfg)
		var n int64
		for _, v := range u.Tensors {
			n += 4 * int64(len(v))
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(n)
			for b.Loop() {
				if err := weights.CheckFinite(u.Tensors); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchPublish publishes u, saved in dir as the engines' starting model,
// to that many native engines, once per iteration.
func benchPublish(b *testing.B, name, dir string, u weights.Update, engines int) {
	b.Run(name, func(b *testing.B) {
		n := embedded(b)
		refs := spawnEngines(b, n, "bench-", dir, "", engines)
		s, err := Start(context.Background(), n, 0, Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for _, r := range refs {
			if err := s.Register(context.Background(), r); err != nil {
				b.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var bytes int
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rep, err := s.Publish(ctx, int64(i+1), u)
			if err != nil {
				b.Fatal(err)
			}
			bytes = rep.Bytes
		}
		b.SetBytes(int64(bytes))
	})
}

func BenchmarkBulkFetch(b *testing.B) {
	_, u := benchUpdate(b)
	blob, err := weights.Encode(1, u)
	if err != nil {
		b.Fatal(err)
	}
	n := embedded(b)
	bulk := n.System().Bulk()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// readers=3 pulls one offer three times at once, as three engines do.
	for _, readers := range []int{1, 3} {
		b.Run(fmt.Sprintf("readers=%d", readers), func(b *testing.B) {
			b.SetBytes(int64(len(blob)))
			for i := 0; i < b.N; i++ {
				ref := bulk.Offer(blob, readers, time.Minute)
				errs := make(chan error, readers)
				for range readers {
					go func() {
						_, err := bulk.Fetch(ctx, ref)
						errs <- err
					}()
				}
				for range readers {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkEncode is the publisher's one-time cost per version: the
// safetensors payload all engines pull.
func BenchmarkEncode(b *testing.B) {
	_, u := benchUpdate(b)
	for i := 0; i < b.N; i++ {
		blob, err := weights.Encode(1, u)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(blob)))
	}
}

// BenchmarkPublishProcesses is BenchmarkPublish with every engine in a
// node process of its own on this host, as engines on one GPU host run:
// the engines pull the version over the same-host path (shared memory;
// RLNODE_BULK_TCP=1 for loopback TCP), an offer of several readers from
// one shared copy.
func BenchmarkPublishProcesses(b *testing.B) {
	dir, u := benchUpdate(b)
	for _, engines := range []int{1, 3} {
		b.Run(fmt.Sprintf("engines=%d", engines), func(b *testing.B) {
			key := make([]byte, 32)
			if _, err := rand.Read(key); err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			n, err := cluster.Start(ctx, cluster.Config{NodeID: "driver", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Logger: actor.DiscardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer n.Stop()
			var refs []actor.Ref
			for i := range engines {
				id := fmt.Sprintf("engine%d", i)
				nodetest.Start(b, n, nodetest.Options{ID: id, CPUs: 2, Key: key})
				refs = append(refs, spawnEngines(b, n, id+"-", dir, id, 1)...)
			}
			s, err := Start(ctx, n, 0, Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for _, r := range refs {
				if err := s.Register(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := s.Publish(ctx, 1, u); err != nil { // warm: connections
				b.Fatal(err)
			}
			var bytes int
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rep, err := s.Publish(ctx, int64(i+2), u)
				if err != nil {
					b.Fatal(err)
				}
				if len(rep.Applied) != engines {
					b.Fatalf("applied on %d of %d engines", len(rep.Applied), engines)
				}
				bytes = rep.Bytes
			}
			b.SetBytes(int64(bytes))
		})
	}
}

// BenchmarkReceive is one engine host's share of a publish, in one
// process: the ~39 MB version offered on this node and applied to a
// native engine by a weights.Receiver, as an engine host does. "same-host"
// maps the offer's shared copy (FetchView) and decodes it in place; "tcp"
// (RLNODE_BULK_TCP=1) pulls it into a new buffer first. cpu-ms/op is the
// process's CPU time per version (publisher's copy included), which a
// loaded machine changes less than the wall time.
func BenchmarkReceive(b *testing.B) {
	dir, u := benchUpdate(b)
	for _, mode := range []string{"same-host", "tcp"} {
		b.Run(mode, func(b *testing.B) {
			if mode == "tcp" {
				b.Setenv("RLNODE_BULK_TCP", "1")
			}
			n := embedded(b)
			sys := n.System()
			e, err := native.Load(dir, native.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			r := &weights.Receiver{Engine: e, Base: weights.CheckpointBase(dir)}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var blob []byte
			var spent time.Duration
			for i := -1; i < b.N; i++ { // i = -1 warms the connection and the kept buffers
				b.StopTimer()
				if blob, err = weights.Encode(int64(i+2), u); err != nil { // the publisher's, once per version
					b.Fatal(err)
				}
				if i == 0 {
					b.ResetTimer()
				}
				b.StartTimer()
				c := cpuTime()
				ref := sys.Bulk().Offer(blob, 1, time.Minute)
				if err := r.Apply(ctx, sys, weights.Push{Version: int64(i + 2), Blob: ref}); err != nil {
					b.Fatal(err)
				}
				sys.Bulk().Release(ref)
				if i >= 0 {
					spent += cpuTime() - c
				}
			}
			b.SetBytes(int64(len(blob)))
			b.ReportMetric(float64(spent.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
		})
	}
}
