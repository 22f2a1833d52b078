package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/episode/episodetest"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/rollout/verify"
	"github.com/rlnode/rlnode/rollout/weights"
	"github.com/rlnode/rlnode/weightsync"
)

// The pool's multi-process tests run this test binary again as rollout
// nodes (internal/nodetest); they find these engines registered too.
func init() {
	rollout.RegisterEngine("pool-tiny", func(_ context.Context, cfg rollout.ActorConfig, _ string) (engine.Engine, error) {
		m, err := tinyModel()
		if err != nil {
			return nil, err
		}
		e, err := native.New(m, tokenizer.Builtin(), native.Config{MaxBatch: 8, WeightVersion: cfg.WeightVersion})
		if err != nil {
			return nil, err
		}
		if os.Getenv("RLNODE_POOL_HOLD") == "1" {
			return holdEngine{e}, nil
		}
		return e, nil
	})
	// pool-gated-start is pool-tiny whose construction waits while
	// startGate is held (TestPoolWaitsForReplacement).
	rollout.RegisterEngine("pool-gated-start", func(_ context.Context, cfg rollout.ActorConfig, _ string) (engine.Engine, error) {
		startGate.RLock()
		defer startGate.RUnlock()
		m, err := tinyModel()
		if err != nil {
			return nil, err
		}
		return native.New(m, tokenizer.Builtin(), native.Config{MaxBatch: 8, WeightVersion: cfg.WeightVersion})
	})
}

// startGate holds back the construction of pool-gated-start engines while
// a test holds it for writing.
var startGate sync.RWMutex

// holdEngine is the engine of the node the test kills: it never answers a
// request whose id starts with "hold" (until its context ends), so the
// kill surely lands mid-generation.
type holdEngine struct{ *native.Engine }

func (h holdEngine) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	for _, r := range reqs {
		if strings.HasPrefix(r.ID, "hold") {
			<-ctx.Done()
			return nil, ctx.Err()
		}
	}
	return h.Engine.Generate(ctx, reqs)
}

// otherModel is tinyModel's architecture with other random weights.
func otherModel(t *testing.T, seed uint64) *model.Model {
	t.Helper()
	return nativetest.Model(t, tinyConfig(), 1000+seed) // never tinyModel's seed
}

func poolRequests(prefix string, n int) []engine.Request {
	var reqs []engine.Request
	for i := range n {
		seed := int64(100 + i)
		reqs = append(reqs, engine.Request{ID: fmt.Sprintf("%s-%d", prefix, i), Prompt: []int{5 + i, 17, 42, 9 + i},
			Params: engine.SamplingParams{MaxTokens: 6, Temperature: 1, Seed: &seed}})
	}
	return reqs
}

// reference generates reqs in this process with the native engine on m.
func reference(t *testing.T, m *model.Model, reqs []engine.Request) []engine.Result {
	t.Helper()
	e, err := native.New(m, tokenizer.Builtin(), native.Config{MaxBatch: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	res, err := e.Generate(testCtx(t), reqs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// sameSamples holds the pool's results to the reference: same request
// order, same tokens, the given weight version.
func sameSamples(t *testing.T, who string, got, want []engine.Result, version int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results for %d requests", who, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.RequestID != w.RequestID || g.WeightVersion != version || len(g.Samples) != len(w.Samples) {
			t.Fatalf("%s result %d: request %q version %d, %d samples; want %q version %d, %d samples",
				who, i, g.RequestID, g.WeightVersion, len(g.Samples), w.RequestID, version, len(w.Samples))
		}
		for k := range w.Samples {
			if !slices.Equal(g.Samples[k].TokenIDs, w.Samples[k].TokenIDs) {
				t.Errorf("%s request %s sample %d: tokens %v, reference %v", who, g.RequestID, k, g.Samples[k].TokenIDs, w.Samples[k].TokenIDs)
			}
		}
	}
}

func completed(t *testing.T, h *cluster.Handle) int64 { t.Helper(); return stats(t, h).Completed }

// TestPoolStaleness: with max staleness k, generation for step s runs on
// version s-k or newer and waits for it otherwise; k = 0 is the
// synchronous barrier.
func TestPoolStaleness(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	n := startNode(t)
	ctx := testCtx(t)
	for _, k := range []int{0, 1} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			syncer, err := weightsync.Start(ctx, n, 0, weightsync.Config{MaxStaleness: k, Name: fmt.Sprintf("ws-%d", k)})
			if err != nil {
				t.Fatal(err)
			}
			defer syncer.Close()
			pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"},
				Replicas: 2, Weights: syncer, Name: fmt.Sprintf("stale-%d", k)})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			reqs := poolRequests("s", 4)
			published := int64(0)
			for step := int64(0); step <= 3; step++ {
				// Whether step may run on the published version.
				if step-int64(k) > published {
					short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
					_, err := pool.GenerateStep(short, step, reqs)
					cancel()
					if want := fmt.Sprintf("wait for version %d", step-int64(k)); err == nil || !strings.Contains(err.Error(), want) {
						t.Fatalf("step %d on version %d: %v, want %q", step, published, err, want)
					}
					published++
					if _, err := syncer.Publish(ctx, published, weights.FullUpdate(otherModel(t, uint64(published)))); err != nil {
						t.Fatal(err)
					}
				}
				res, err := pool.GenerateStep(ctx, step, reqs)
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				for _, r := range res {
					if r.WeightVersion != published || r.WeightVersion < step-int64(k) {
						t.Errorf("step %d: request %s on version %d (published %d, bound %d)", step, r.RequestID, r.WeightVersion, published, step-int64(k))
					}
				}
			}
		})
	}
}

// A request the engine refuses keeps its kind across the actor boundary:
// over the context is engine.ErrContextFull, another invalid request
// engine.ErrBadRequest alone.
func TestPoolRefusalsKeepTheirKind(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	n := startNode(t)
	ctx := testCtx(t)
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"}, Replicas: 1, Name: "refusals"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	long := poolRequests("long", 1)
	long[0].Params.MaxTokens = 1 << 20
	_, err = pool.Generate(ctx, long)
	if !errors.Is(err, engine.ErrContextFull) || !errors.Is(err, engine.ErrBadRequest) || !strings.Contains(err.Error(), "exceeds the model's context") {
		t.Errorf("over the context: %v; want ErrContextFull (an ErrBadRequest) with the engine's words", err)
	}
	bad := poolRequests("bad", 1)
	bad[0].Prompt = []int{1 << 30}
	_, err = pool.Generate(ctx, bad)
	if !errors.Is(err, engine.ErrBadRequest) || errors.Is(err, engine.ErrContextFull) || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("token id out of range: %v; want ErrBadRequest alone with the engine's words", err)
	}
	if _, err := pool.Generate(ctx, poolRequests("fine", 2)); err != nil {
		t.Errorf("after two refusals: %v", err)
	}
}

// TestPoolPlacementGroup puts one replica in each bundle of a group.
func TestPoolPlacementGroup(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	n := startNode(t)
	ctx := testCtx(t)
	pg, err := n.CreatePlacementGroup(ctx, []cluster.Bundle{{Resources: cluster.Resources{"CPU": 0.5}}, {Resources: cluster.Resources{"CPU": 0.5}}}, cluster.StrictPack)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"}, Group: pg, Name: "grouped"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reps := pool.Replicas()
	if len(reps) != 2 || reps[0].Node != n.ID() || reps[1].Node != n.ID() {
		t.Fatalf("replicas %+v, want two on %s", reps, n.ID())
	}
	for _, r := range reps {
		if rec, _ := n.Directory().Actor(r.Name); rec.Group != pg.ID || rec.Resources["CPU"] != 0.5 {
			t.Errorf("%s: group %q resources %v, want %s and its bundle's CPU 0.5", r.Name, rec.Group, rec.Resources, pg.ID)
		}
	}
	reqs := poolRequests("g", 6)
	base, err := tinyModel()
	if err != nil {
		t.Fatal(err)
	}
	got, err := pool.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sameSamples(t, "placement group", got, reference(t, base, reqs), 0)
}

// TestPoolBusyReplica: a replica whose queue is full is waited for, not
// dropped (one job running, one waiting, seven one-request chunks).
func TestPoolBusyReplica(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	n := startNode(t)
	ctx := testCtx(t)
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny", Concurrency: 1, MaxQueue: 1},
		Replicas: 1, ChunkSize: 1, Name: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reqs := poolRequests("q", 7)
	base, err := tinyModel()
	if err != nil {
		t.Fatal(err)
	}
	got, err := pool.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sameSamples(t, "busy replica", got, reference(t, base, reqs), 0)
	if r := pool.Replicas()[0]; r.Lost != "" || pool.Redispatched() != 0 {
		t.Errorf("replica %+v, %d chunks moved: a full queue is not a loss", r, pool.Redispatched())
	}
	if st := stats(t, pool.Handles()[0]); st.Completed != 7 {
		t.Errorf("%d jobs completed, want 7", st.Completed)
	}
}

// TestPoolTakesTiesInTurn: replicas equally busy are taken in turn, as
// cluster.Pool takes them. Ties all went to the first replica: with
// fewer requests than replicas (one-request calls here, idle replicas
// each time) it served them all while the others idled.
func TestPoolTakesTiesInTurn(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	n := startNode(t)
	ctx := testCtx(t)
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"}, Replicas: 3, Name: "ties"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	base, err := tinyModel()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		reqs int
		want []int64 // jobs each replica has completed after the call
	}{
		{"one request", 1, []int64{1, 0, 0}},
		{"another", 1, []int64{1, 1, 0}},
		{"a third", 1, []int64{1, 1, 1}},
		{"two requests", 2, []int64{2, 2, 1}},
		{"one more", 1, []int64{2, 2, 2}},
	} {
		reqs := poolRequests("tie", c.reqs)
		got, err := pool.Generate(ctx, reqs)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		sameSamples(t, c.name, got, reference(t, base, reqs), 0)
		var served []int64
		for _, h := range pool.Handles() {
			served = append(served, completed(t, h))
		}
		if !slices.Equal(served, c.want) {
			t.Errorf("after %s: the replicas completed %v jobs, want %v", c.name, served, c.want)
		}
	}
}

func TestPoolErrors(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	n := startNode(t)
	ctx := testCtx(t)
	syncer, err := weightsync.Start(ctx, n, 0, weightsync.Config{Name: "ws-errors"})
	if err != nil {
		t.Fatal(err)
	}
	defer syncer.Close()
	cases := []struct {
		name string
		cfg  rollout.PoolConfig
		want string
	}{
		{"no placement", rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"}}, "exactly one of PoolConfig.Nodes, Group and Replicas"},
		{"two placements", rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"}, Replicas: 1, Nodes: []string{n.ID()}}, "exactly one"},
		{"unknown node", rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"}, Nodes: []string{"nowhere"}, Name: "e1"}, "rollout actors: start one on nowhere: spawn e1-0"},
		{"no node fits", rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"}, Replicas: 1, Resources: cluster.Resources{cluster.CPU: 1000}, Name: "e4"},
			"rollout actors: start one on any node: spawn e4-0: no node can host {CPU:1000}"},
		{"unknown engine", rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "nope"}, Replicas: 1, Name: "e2"}, `unknown engine "nope"`},
		{"engine without weights", rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "scripted", Verifier: "exact"}, Replicas: 1, Weights: syncer, Name: "e3"}, "does not take weight pushes"},
		{"negative chunk", rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"}, Replicas: 1, ChunkSize: -1}, "ChunkSize -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := rollout.StartPool(ctx, n, c.cfg)
			if err == nil {
				p.Close()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
			// A run prints these to its user, who knows rollout actors
			// (rlnode run logs "rollout actors placed"), not the pool.
			if err != nil && strings.Contains(err.Error(), "rollout pool") {
				t.Errorf("error %v says \"rollout pool\"", err)
			}
		})
	}
	// A failed start leaves no actor behind.
	for _, rec := range n.Directory().Actors() {
		if strings.HasPrefix(rec.Name, "e") && rec.State == cluster.Alive && rec.Kind == rollout.ActorKind {
			t.Errorf("actor %s left alive after a failed start", rec.Name)
		}
	}

	// Without weightsync: a scripted engine, small chunks, a bad request
	// fails the call naming the replica and the request's problem.
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "scripted", Verifier: "exact"}, Replicas: 2, ChunkSize: 3, Name: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := pool.Generate(ctx, poolRequests("p", 7))
	if err != nil || len(res) != 7 || res[6].RequestID != "p-6" || res[0].WeightVersion != 3 || pool.WeightVersion() != 3 {
		t.Fatalf("plain pool: %d results, %v", len(res), err)
	}
	bad := poolRequests("b", 2)
	bad[1].Params.MaxTokens = 0
	if _, err := pool.Generate(ctx, bad); err == nil || !strings.Contains(err.Error(), "rollout actors: plain-") || !strings.Contains(err.Error(), "request b-1: bad generation request") {
		t.Errorf("bad request: %v", err)
	}
	if _, err := cluster.Call[rollout.EngineHost](ctx, pool.Handles()[0], rollout.EngineHostRequest{}); err == nil || !strings.Contains(err.Error(), "WeightSync") {
		t.Errorf("engine host of an actor without WeightSync: %v", err)
	}
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Generate(ctx, poolRequests("q", 1)); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("generate after close: %v", err)
	}
	if rec, _ := n.Directory().Actor("plain-0"); rec.State != cluster.Dead {
		t.Errorf("plain-0 is %s after Close", rec.State)
	}
}

// TestPoolAcrossProcesses: three nodes (this process, r1 and r2 as child
// processes), a pool of rollout actors on r1 and r2 whose engines take
// weight pushes from a synchronous weightsync.Syncer; r2 is SIGKILLed
// while it holds a chunk, then r1.
func TestPoolAcrossProcesses(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n, key := keyedNode(ctx, t, "driver")
	r1 := nodetest.Start(t, n, nodetest.Options{ID: "r1", CPUs: 2, Key: key})
	r2 := nodetest.Start(t, n, nodetest.Options{ID: "r2", CPUs: 2, Key: key}, "RLNODE_POOL_HOLD=1")

	syncer, err := weightsync.Start(ctx, n, 0, weightsync.Config{PushTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer syncer.Close()
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"},
		Nodes: []string{"r1", "r2"}, Weights: syncer, Name: "gen", ReplaceWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if st := syncer.Versions(); len(st.Engines) != 2 || st.Engines[0].Node != "r1" || st.Engines[1].Node != "r2" {
		t.Fatalf("weightsync engines %+v, want gen-0 on r1 and gen-1 on r2", st.Engines)
	}
	h1, h2 := pool.Handles()[0], pool.Handles()[1]

	// Version 0, both replicas work, samples equal the reference's.
	base, err := tinyModel()
	if err != nil {
		t.Fatal(err)
	}
	reqs := poolRequests("a", 8)
	got, err := pool.GenerateStep(ctx, 0, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sameSamples(t, "version 0", got, reference(t, base, reqs), 0)
	if c1, c2 := completed(t, h1), completed(t, h2); c1 != 1 || c2 != 1 {
		t.Fatalf("jobs completed: r1 %d, r2 %d; want one chunk each", c1, c2)
	}

	// Version 1 pushed to both engines: the samples are the new weights'.
	next := otherModel(t, 9)
	rep, err := syncer.Publish(ctx, 1, weights.FullUpdate(next))
	if err != nil || len(rep.Applied) != 2 {
		t.Fatalf("publish 1: %+v %v", rep, err)
	}
	for _, h := range []*cluster.Handle{h1, h2} {
		if v := stats(t, h).WeightVersion; v != 1 {
			t.Errorf("%s serves version %d after the push of 1", h.Name(), v)
		}
	}
	pool.SetStep(1)
	got, err = pool.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	want1 := reference(t, next, reqs)
	sameSamples(t, "version 1", got, want1, 1)
	if pool.WeightVersion() != 1 {
		t.Errorf("pool serves version %d, want 1", pool.WeightVersion())
	}

	// Synchronous: step 2 needs version 2, which nobody publishes.
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = pool.GenerateStep(short, 2, reqs)
	cancelShort()
	if err == nil || !strings.Contains(err.Error(), "wait for version 2") || !strings.Contains(err.Error(), "gen-1.weights on r2 serves 1") {
		t.Fatalf("step 2 before version 2: %v", err)
	}

	// r2 holds its chunk; it is killed mid-generation and the chunk runs
	// again on r1, with the same seeds and so the same samples.
	held := poolRequests("hold", 8)
	type answer struct {
		res []engine.Result
		err error
	}
	answered := make(chan answer, 1)
	before := completed(t, h1)
	go func() {
		res, err := pool.GenerateStep(ctx, 1, held)
		answered <- answer{res, err}
	}()
	for st := stats(t, h2); st.Running != 1; st = stats(t, h2) {
		select {
		case <-ctx.Done():
			t.Fatalf("r2 never ran the held chunk: %+v", st)
		case <-time.After(5 * time.Millisecond):
		}
	}
	killed := time.Now()
	r2.Kill()
	a := <-answered
	t.Logf("answered %s after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	if a.err != nil {
		t.Fatalf("generate across the kill: %v", a.err)
	}
	sameSamples(t, "after the kill", a.res, reference(t, next, held), 1)
	if after := completed(t, h1); after != before+2 || pool.Redispatched() != 1 {
		t.Errorf("r1 completed %d jobs during the kill (want 2: its own chunk and r2's), %d chunks moved (want 1)", after-before, pool.Redispatched())
	}
	reps := pool.Replicas()
	if reps[0].Lost != "" || !strings.Contains(reps[1].Lost, "r2") {
		t.Errorf("replicas after the kill: %+v", reps)
	}
	t.Logf("r2 lost: %s", reps[1].Lost)
	// The lost engine left weightsync: the next publish reaches r1 only
	// and does not fail.
	rep, err = syncer.Publish(ctx, 2, weights.FullUpdate(otherModel(t, 11)))
	if err != nil || len(rep.Applied) != 1 || rep.Applied[0].Name != "gen-0.weights" {
		t.Fatalf("publish 2 after the kill: %+v %v", rep, err)
	}

	// Every replica lost: a clear error naming them and their nodes.
	r1.Kill()
	_, err = pool.GenerateStep(ctx, 2, poolRequests("c", 4))
	if !errors.Is(err, rollout.ErrAllLost) || !strings.Contains(err.Error(), "gen-0 on node r1") || !strings.Contains(err.Error(), "gen-1 on node r2") {
		t.Fatalf("generate with every node killed: %v", err)
	}
	t.Logf("all lost: %v", err)
}

// BenchmarkPoolGenerate is the pool's overhead: 8 sampled requests of 6
// and of 48 new tokens on the tiny model, straight on a native engine in
// this process ("direct") and through a pool of one embedded rollout
// actor hosting the same engine (submit, polled collect, msgpack both
// ways).
func BenchmarkPoolGenerate(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n, err := cluster.Start(ctx, cluster.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Stop()
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"}, Replicas: 1, Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	m, err := tinyModel()
	if err != nil {
		b.Fatal(err)
	}
	direct, err := native.New(m, tokenizer.Builtin(), native.Config{MaxBatch: 8})
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	for _, tokens := range []int{6, 48} {
		reqs := poolRequests("b", 8)
		for i := range reqs {
			reqs[i].Params.MaxTokens = tokens
		}
		for _, e := range []struct {
			name string
			eng  engine.Engine
		}{{"direct", direct}, {"pool-1", pool}} {
			b.Run(fmt.Sprintf("tokens=%d/%s", tokens, e.name), func(b *testing.B) {
				for b.Loop() {
					if _, err := e.eng.Generate(ctx, reqs); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestPoolUnderEpisodes is the swap the driver makes: episode runners in
// this process generate through the pool, whose actors load the policy
// checkpoint with the built-in "native" engine and take the published
// weights; every turn carries the version it was sampled with.
func TestPoolUnderEpisodes(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	n := startNode(t)
	ctx := testCtx(t)
	m, err := tinyModel()
	if err != nil {
		t.Fatal(err)
	}
	dir := nativetest.Save(t, m)
	syncer, err := weightsync.Start(ctx, n, 5, weightsync.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer syncer.Close()
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "native", Model: dir, WeightVersion: 5},
		Replicas: 2, Weights: syncer, Name: "episodes"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := syncer.Publish(ctx, 6, weights.FullUpdate(otherModel(t, 3))); err != nil {
		t.Fatal(err)
	}
	pool.SetStep(6)
	seed := int64(1)
	run, err := episode.NewSingleTurn(episode.Policy{ID: "solver", Engine: pool, Params: engine.SamplingParams{MaxTokens: 8, Temperature: 1, Seed: &seed}},
		verify.Math{}, episode.Templates{}, episode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	turns, err := run.Run(ctx, episode.Batch{Examples: problems, N: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 8 {
		t.Fatalf("%d turns, want 8", len(turns))
	}
	for i, tr := range turns {
		if tr.WeightVersion != 6 || len(tr.ResponseIDs) == 0 || len(tr.LogProbs) != len(tr.ResponseIDs) {
			t.Errorf("turn %d: version %d, %d tokens, %d logprobs", i, tr.WeightVersion, len(tr.ResponseIDs), len(tr.LogProbs))
		}
	}
}

// modelFiles are tinyModel's config and tokenizer as ActorConfig.ModelFiles.
func modelFiles(t *testing.T) map[string][]byte {
	t.Helper()
	m, err := tinyModel()
	if err != nil {
		t.Fatal(err)
	}
	cj, err := m.Config.JSON()
	if err != nil {
		t.Fatal(err)
	}
	tj, err := tokenizer.Builtin().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"config.json": cj, "tokenizer.json": tj}
}

// waitPool polls the pool (every 10 ms, within ctx) until cond holds.
func waitPool(ctx context.Context, t *testing.T, pool *rollout.Pool, what string, cond func([]rollout.ReplicaStatus) bool) {
	t.Helper()
	for !cond(pool.Replicas()) {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within the test's time; replicas %+v", what, pool.Replicas())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A replica whose node is SIGKILLed is replaced. Replicas start from
// ModelFiles alone: their weights come from weightsync when they register.
// With no node left with room (each child offers one "rollout"), the pool
// goes on with one replica and keeps trying; once a node with room joins,
// the replacement starts there, registers at the version published
// meanwhile, and generates that version's samples.
func TestPoolReplacesLostReplica(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n, key := keyedNode(ctx, t, "driver")
	children := map[string]*nodetest.Node{}
	join := func(id string) { // room for one replica each
		children[id] = nodetest.Start(t, n, nodetest.Options{ID: id, CPUs: 2, Resources: cluster.Resources{"rollout": 1}, Key: key})
	}
	join("r1")
	join("r2")

	base, err := tinyModel()
	if err != nil {
		t.Fatal(err)
	}
	syncer, err := weightsync.Start(ctx, n, 0, weightsync.Config{PushTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer syncer.Close()
	if err := syncer.Keep(ctx, 0, weights.FullUpdate(base)); err != nil {
		t.Fatal(err)
	}
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "native", ModelFiles: modelFiles(t)},
		Replicas: 2, Resources: cluster.Resources{"rollout": 1}, Weights: syncer, Name: "rep", RespawnEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reps := pool.Replicas()
	if nodes := []string{reps[0].Node, reps[1].Node}; !slices.Contains(nodes, "r1") || !slices.Contains(nodes, "r2") {
		t.Fatalf("replicas %+v, want one on r1 and one on r2", reps)
	}
	reqs := poolRequests("a", 8)
	got, err := pool.GenerateStep(ctx, 0, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sameSamples(t, "version 0 (pushed at registration)", got, reference(t, base, reqs), 0)

	next := otherModel(t, 9)
	if _, err := syncer.Publish(ctx, 1, weights.FullUpdate(next)); err != nil {
		t.Fatal(err)
	}
	victim := reps[1]
	children[victim.Node].Kill()
	waitPool(ctx, t, pool, "the killed replica dropped", func(rs []rollout.ReplicaStatus) bool { return rs[1].Lost != "" })
	// No node has room: one replica generates, the replacement waits.
	want1 := reference(t, next, reqs)
	got, err = pool.GenerateStep(ctx, 1, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sameSamples(t, "version 1 on the survivor", got, want1, 1)
	if live, replaced := len(pool.Handles()), pool.Replaced(); live != 1 || replaced != 0 {
		t.Fatalf("before a node with room joins: %d live, %d replaced; want 1 and 0 (%+v)", live, replaced, pool.Replicas())
	}

	join("r3")
	waitPool(ctx, t, pool, "a replacement on r3", func(rs []rollout.ReplicaStatus) bool {
		return len(rs) == 3 && rs[2].Lost == ""
	})
	fresh := pool.Replicas()[2]
	if fresh.Node != "r3" || fresh.Replaces != victim.Name || pool.Replaced() != 1 || len(pool.Handles()) != 2 {
		t.Fatalf("replacement %+v (replaced %d, live %d), want one on r3 replacing %s", fresh, pool.Replaced(), len(pool.Handles()), victim.Name)
	}
	for _, e := range syncer.Versions().Engines {
		if e.Version != 1 {
			t.Errorf("engine %s on %s serves %d, want the published 1", e.Name, e.Node, e.Version)
		}
	}
	h := pool.Handles()[1]
	got, err = pool.GenerateStep(ctx, 1, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sameSamples(t, "version 1 with the replacement", got, want1, 1)
	if c := completed(t, h); c != 1 {
		t.Errorf("the replacement %s completed %d chunks, want 1 of 2", h.Name(), c)
	}

	// Both live replicas' nodes killed at once, a node with room for one
	// up: generation started right away waits for the replacement that
	// starts there instead of failing, and gives the same samples.
	join("r4")
	killed := time.Now()
	for _, id := range []string{"r1", "r3"} {
		children[id].Kill()
	}
	got, err = pool.GenerateStep(ctx, 1, reqs)
	if err != nil {
		t.Fatalf("generate with every replica's node killed and room on r4: %v", err)
	}
	t.Logf("answered %s after both SIGKILLs, on a replacement", time.Since(killed).Round(time.Millisecond))
	sameSamples(t, "version 1 after both kills", got, want1, 1)
	var on4 []string
	for _, rs := range pool.Replicas() {
		if rs.Lost == "" {
			on4 = append(on4, rs.Name+"@"+rs.Node)
		}
	}
	if len(on4) != 1 || !strings.HasSuffix(on4[0], "@r4") {
		t.Errorf("live replicas %v, want one on r4", on4)
	}
}

// A replica of a placement group lost with its node is replaced in its
// bundle, moved to a node the group does not use yet (SPREAD kept): not
// outside the group, where it would take a share of its own beside the
// bundle's and land wherever the cluster has room. Where the bundle
// cannot move (STRICT_SPREAD with no other node), the replacement goes
// outside the group, where there is room.
func TestPoolReplacesLostReplicaInItsBundle(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	for _, tc := range []struct {
		name     string
		nodes    []string
		strategy cluster.Strategy
		inBundle bool
	}{
		{"moved", []string{"g1", "g2", "g3"}, cluster.Spread, true},
		{"outside", []string{"s1", "s2"}, cluster.StrictSpread, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			n, key := keyedNode(ctx, t, "driver")
			children := map[string]*nodetest.Node{}
			for _, id := range tc.nodes { // room for two replicas each
				children[id] = nodetest.Start(t, n, nodetest.Options{ID: id, CPUs: 2, Resources: cluster.Resources{"rollout": 2}, Key: key})
			}
			one := cluster.Bundle{Resources: cluster.Resources{"rollout": 1}}
			pg, err := n.CreatePlacementGroup(ctx, []cluster.Bundle{one, one}, tc.strategy)
			if err != nil {
				t.Fatal(err)
			}
			if pg.Nodes[0] == pg.Nodes[1] {
				t.Fatalf("%s group on %v, want two nodes", tc.strategy, pg.Nodes)
			}
			pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"},
				Group: pg, Name: "inbundle", RespawnEvery: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			lostNode := pool.Replicas()[1].Node
			children[lostNode].Kill()
			waitPool(ctx, t, pool, "a replacement", func(rs []rollout.ReplicaStatus) bool { return len(rs) == 3 && rs[2].Lost == "" })
			fresh := pool.Replicas()[2]
			rec, _ := n.Directory().Actor(fresh.Name)
			g, _ := n.Directory().Group(pg.ID)
			// The node's record, with what it uses, follows by gossip.
			used := func(want float64) float64 {
				for {
					node, _ := n.Directory().Node(fresh.Node)
					if u := node.Used["rollout"]; u == want || ctx.Err() != nil {
						return u
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			if !tc.inBundle {
				if u := used(2); rec.Group != "" || fresh.Node != g.Nodes[0] || u != 2 {
					t.Errorf("replacement %s in group %q on %s (using rollout %v): want it outside the group on %s, beside bundle 0",
						fresh.Name, rec.Group, fresh.Node, u, g.Nodes[0])
				}
				return
			}
			if rec.Group != pg.ID || rec.Bundle != 1 {
				t.Fatalf("replacement %s in group %q bundle %d, want bundle 1 of %s", fresh.Name, rec.Group, rec.Bundle, pg.ID)
			}
			if g.Nodes[1] == lostNode || g.Nodes[1] == g.Nodes[0] || fresh.Node != g.Nodes[1] {
				t.Errorf("bundle 1 moved to %s (bundle 0 on %s, lost %s), replacement on %s: want the third node, and the replacement there",
					g.Nodes[1], g.Nodes[0], lostNode, fresh.Node)
			}
			if u := used(1); u != 1 {
				t.Errorf("%s uses rollout %v, want 1: the moved bundle, the replacement inside it", fresh.Node, u)
			}
			if _, err := pool.GenerateStep(ctx, 0, poolRequests("a", 4)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// With its only replica lost, generation waits for the replacement being
// started instead of failing: while the replacement's engine cannot be
// built, a bounded call ends waiting for it (not with ErrAllLost); once
// it is built, generation runs on it.
func TestPoolWaitsForReplacement(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	n := startNode(t)
	ctx := testCtx(t)
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-gated-start"},
		Nodes: []string{n.ID()}, Name: "waiting", RespawnEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	startGate.Lock()
	locked := true
	defer func() {
		if locked {
			startGate.Unlock()
		}
	}()
	if err := n.StopActor(ctx, "waiting-0"); err != nil {
		t.Fatal(err)
	}
	waitPool(ctx, t, pool, "the stopped replica dropped", func(rs []rollout.ReplicaStatus) bool { return rs[0].Lost != "" })
	reqs := poolRequests("w", 4)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = pool.GenerateStep(short, 0, reqs)
	cancel()
	if err == nil || errors.Is(err, rollout.ErrAllLost) || !strings.Contains(err.Error(), "waiting for a replacement") {
		t.Fatalf("generate while the replacement starts: %v, want a wait for it", err)
	}
	startGate.Unlock()
	locked = false
	base, err := tinyModel()
	if err != nil {
		t.Fatal(err)
	}
	got, err := pool.GenerateStep(ctx, 0, reqs)
	if err != nil {
		t.Fatal(err)
	}
	sameSamples(t, "on the replacement", got, reference(t, base, reqs), 0)
	if rs := pool.Replicas(); len(rs) != 2 || rs[1].Replaces != "waiting-0" || rs[1].Lost != "" {
		t.Errorf("replicas %+v, want waiting-1 replacing waiting-0", rs)
	}
}

// TestPoolDropsReplicaWhoseEngineLeftTheSyncer: a weight push that fails
// (the replica's actor port unreachable for longer than the push timeout,
// then back) removes its engine from the syncer; the replica keeps the old
// weights. Generation must not give it a chunk, whose stale version would
// fail the whole step: it is dropped and replaced, and every result is of
// the published version. Seen failing before: "request s-... on
// engine-left-1 (node ...): weight version 1, older than step 2 allows".
func TestPoolDropsReplicaWhoseEngineLeftTheSyncer(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	n := startNode(t)
	ctx := testCtx(t)
	syncer, err := weightsync.Start(ctx, n, 0, weightsync.Config{Name: "ws-left"})
	if err != nil {
		t.Fatal(err)
	}
	defer syncer.Close()
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"},
		Replicas: 2, Weights: syncer, Name: "engine-left", RespawnEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reqs := poolRequests("s", 4)
	if _, err := syncer.Publish(ctx, 1, weights.FullUpdate(otherModel(t, 1))); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.GenerateStep(ctx, 1, reqs); err != nil {
		t.Fatal(err)
	}
	// What the syncer does when a push to the engine fails.
	if !syncer.Remove("engine-left-1.weights", "push version 2: call engine-left-1.weights: context deadline exceeded") {
		t.Fatalf("engine-left-1.weights was not registered: %+v", syncer.Versions().Engines)
	}
	if rep, err := syncer.Publish(ctx, 2, weights.FullUpdate(otherModel(t, 2))); err != nil || len(rep.Applied) != 1 {
		t.Fatalf("publish 2: %+v %v", rep, err)
	}
	for try := range 3 { // the replacement, once started, takes chunks too
		res, err := pool.GenerateStep(ctx, 2, reqs)
		if err != nil {
			t.Fatalf("generate %d after the engine left: %v", try, err)
		}
		for _, r := range res {
			if r.WeightVersion != 2 {
				t.Errorf("generate %d: request %s on version %d, want 2", try, r.RequestID, r.WeightVersion)
			}
		}
	}
	reps := pool.Replicas()
	if len(reps) < 2 || !strings.Contains(reps[1].Lost, "weight syncer") {
		t.Errorf("replicas after the engine left: %+v", reps)
	}
}

// freezeNext makes the next WeightVersion call of a pool-freezable engine
// block until release is closed, after closing entered: the rollout actor
// that makes it (answering a StatsRequest) stops answering every call
// while its node, and gossip, stay up.
var freezeNext = struct {
	armed            atomic.Bool
	entered, release chan struct{}
}{entered: make(chan struct{}), release: make(chan struct{})}

type freezableEngine struct{ *episodetest.ScriptedEngine }

func (f freezableEngine) WeightVersion() int64 {
	if freezeNext.armed.CompareAndSwap(true, false) {
		close(freezeNext.entered)
		<-freezeNext.release
	}
	return f.ScriptedEngine.WeightVersion()
}

func init() {
	rollout.RegisterEngine("pool-freezable", func(context.Context, rollout.ActorConfig, string) (engine.Engine, error) {
		return freezableEngine{episodetest.NewScriptedEngine(script)}, nil
	})
}

// TestPoolDropsAReplicaThatStopsAnswering: a replica whose actor stops
// answering while the cluster still lists it is dropped LossTimeout after
// the first unanswered call was sent, and its chunk runs on the other,
// however long CallTimeout is. Before, the loss clock started only once a
// call had failed, so the unanswered call held the chunk for a whole
// CallTimeout first (seen failing: the generation ran out of the test's
// minute with CallTimeout 10 min and LossTimeout 1 s; with the defaults, a
// node that stopped answering cost about 60 s, not the documented 15 s).
func TestPoolDropsAReplicaThatStopsAnswering(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	n := startNode(t)
	ctx := testCtx(t)
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-freezable", Verifier: "exact"},
		Replicas: 2, Name: "silent", CallTimeout: 10 * time.Minute, LossTimeout: time.Second, RespawnEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	freezeNext.armed.Store(true)
	defer close(freezeNext.release) // before Close, which stops the actors
	if err := pool.Handles()[0].Tell(rollout.StatsRequest{}); err != nil {
		t.Fatal(err)
	}
	<-freezeNext.entered
	res, err := pool.Generate(ctx, poolRequests("q", 4))
	if err != nil || len(res) != 4 {
		t.Fatalf("generate with silent-0 not answering: %d results, %v", len(res), err)
	}
	reps := pool.Replicas()
	if !strings.Contains(reps[0].Lost, "unanswered for 1s") || reps[1].Lost != "" || pool.Redispatched() != 1 {
		t.Errorf("replicas %+v, %d chunks run again; want silent-0 lost as unanswered, silent-1 live, 1 chunk moved", reps, pool.Redispatched())
	}
}

// A step whose results would not fit in one message is cut into chunks
// whose answers do, so it generates under any actor message limit (16 KiB
// here); before, the one chunk's answer was refused for its size, the
// refusal was taken for a failing replica, and the replica was dropped.
func TestPoolChunksFitTheMessageLimit(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	t.Setenv("RLNODE_MAX_MESSAGE_SIZE", "16KiB")
	ctx := testCtx(t)
	n, key := keyedNode(ctx, t, "fit")
	if got := n.System().MaxMessageSize(); got != 16<<10 {
		t.Fatalf("message limit %d, want 16 KiB", got)
	}
	// The replica on a node of its own: in one process a call's answer
	// is passed by reference, never encoded, so no limit applies.
	far := nodetest.Start(t, n, nodetest.Options{ID: "fit-far", CPUs: 2, Resources: cluster.Resources{"far": 1}, Key: key})
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "pool-tiny"}, Replicas: 1, Name: "fit",
		Resources: cluster.Resources{cluster.CPU: 1, "far": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reqs := poolRequests("f", 8)
	for i := range reqs {
		reqs[i].Params.N, reqs[i].Params.MaxTokens = 4, 64
	}
	got, err := pool.Generate(ctx, reqs)
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	tokens := 0
	for _, r := range got {
		for _, s := range r.Samples {
			tokens += len(s.TokenIDs)
		}
	}
	if tokens*12 < 16<<10 {
		t.Fatalf("%d tokens generated: too few for the answers to pass the 16 KiB limit in one message", tokens)
	}
	base, err := tinyModel()
	if err != nil {
		t.Fatal(err)
	}
	sameSamples(t, "chunks under a 16 KiB limit", got, reference(t, base, reqs), 0)
	if r := pool.Replicas()[0]; r.Lost != "" || r.Node != far.ID {
		t.Errorf("replica %+v: lost, or not on %s", r, far.ID)
	}

	// One request whose results alone pass the limit: the replica offers
	// them on its bulk path and the pool fetches them.
	one := poolRequests("g", 1)
	one[0].Params.N, one[0].Params.MaxTokens = 8, 256
	got, err = pool.Generate(ctx, one)
	if err != nil {
		t.Fatalf("generate one large request: %v", err)
	}
	tokens = 0
	for _, s := range got[0].Samples {
		tokens += len(s.TokenIDs)
	}
	if tokens*12 < 16<<10 {
		t.Fatalf("%d tokens generated: too few to pass the 16 KiB limit", tokens)
	}
	sameSamples(t, "one request over the limit", got, reference(t, base, one), 0)
}

// chunks keeps each chunk within the count and the byte budget, a request
// over the budget alone.
func TestPoolChunkBounds(t *testing.T) {
	reqs := poolRequests("b", 6)
	one := rollout.ResultBytes(reqs[0])
	for _, c := range []struct {
		size, budget int
		want         string
	}{
		{6, 100 * one, "[{0 6}]"},
		{4, 100 * one, "[{0 4} {4 6}]"},
		{6, 2 * one, "[{0 2} {2 4} {4 6}]"},
		{6, one / 2, "[{0 1} {1 2} {2 3} {3 4} {4 5} {5 6}]"},
	} {
		if got := fmt.Sprint(rollout.Chunks(reqs, c.size, c.budget)); got != c.want {
			t.Errorf("size %d, budget %d: %s, want %s", c.size, c.budget, got, c.want)
		}
	}
}

// TestPoolEarlyStopCancelsJobs: a Generate given up (its ctx ends) while
// one chunk runs on the replica and five wait in its queue leaves no work
// there: the replica drops the five unrun and stops the running one (its
// engine's context ends), and forgets all six. Before, the five ran one
// after another once the first was done, for nobody, holding the
// replica's slot against the next step's chunks.
func TestPoolEarlyStopCancelsJobs(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	gate.Lock()
	gate.ch = make(chan struct{}) // held shut: a job runs until cancelled
	gate.Unlock()
	n := startNode(t)
	ctx := testCtx(t)
	pool, err := rollout.StartPool(ctx, n, rollout.PoolConfig{Actor: rollout.ActorConfig{Engine: "gated", Verifier: "exact", Concurrency: 1, MaxQueue: 8},
		Replicas: 1, ChunkSize: 1, Name: "early"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	h := pool.Handles()[0]
	gctx, giveUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := pool.Generate(gctx, poolRequests("early", 6))
		done <- err
	}()
	waitStats := func(what string, ok func(rollout.ActorStats) bool) rollout.ActorStats {
		t.Helper()
		for {
			st := stats(t, h)
			if ok(st) {
				return st
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the replica never showed %s: %+v", what, st)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	waitStats("1 job running, 5 waiting", func(st rollout.ActorStats) bool { return st.Running == 1 && st.QueueDepth == 5 })
	giveUp()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Generate given up: %v, want context.Canceled", err)
	}
	st := waitStats("every job cancelled", func(st rollout.ActorStats) bool { return st.Cancelled == 6 })
	if st.Started != 1 || st.Running != 0 || st.QueueDepth != 0 || st.Completed != 0 || st.Failed != 0 {
		t.Errorf("replica after the early stop: %+v; want 1 job begun, none running, waiting, completed or failed", st)
	}
}
