package ctxopt

import (
	"context"
	crand "crypto/rand"
	"errors"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/internal/slowfile"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

func TestMain(m *testing.M) { nodetest.Main(m) }

// Executions on executor actors in two other processes give exactly the
// outcomes of a local executor (jobs carry their seeds).
func TestExecutorsAcrossProcesses(t *testing.T) {
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	n, err := cluster.Start(ctx, cluster.Config{NodeID: "driver", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	nodetest.Start(t, n, nodetest.Options{ID: "e1", CPUs: 2, Key: key})
	nodetest.Start(t, n, nodetest.Options{ID: "e2", CPUs: 2, Key: key})

	src, err := builtin.ReadFile("recipes/ctxopt_bandit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// No python: the child nodes need no sandbox.
	r, err := ParseRecipe("ctxopt_bandit.yaml", []byte(strings.NewReplacer("python: true", "python: false", "tools: [calculator, python]", "tools: [calculator]").Replace(string(src))))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := StartExecutors(ctx, n, r, "exec", []string{"e1", "e2"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(ctx)
	for i, e := range pool.Executors() {
		if e.Node != []string{"e1", "e2"}[i] || e.Lost != "" {
			t.Fatalf("executor %d: %+v, want live on node e%d", i, e, i+1)
		}
	}

	local, err := r.NewExecutor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := Questions(1, task.HeldOut, []string{task.Word, task.Arithmetic}, []int{2, 5}, 10)
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Method(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs, _, err := m.Choose(qs, rand.New(rand.NewPCG(1, 1)), false)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Execute(ctx, local, qs, cs, 3)
	if err != nil {
		t.Fatal(err)
	}
	local.Remote = pool
	got, err := Execute(ctx, local, qs, cs, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d outcomes, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("job %d: remote %+v, local %+v", i, got[i], want[i])
		}
	}
}

// A killed executor process is replaced on another node and the chunk it
// held runs again elsewhere: the batch's outcomes are still exactly a
// local executor's. The jobs call the python tool, so each chunk keeps its
// executor busy with sandbox processes.
func TestExecutorPoolReplacesKilled(t *testing.T) {
	if _, err := verify.NewSandbox(verify.SandboxConfig{}); err != nil {
		t.Skipf("python sandbox: %v", err)
	}
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	n, err := cluster.Start(ctx, cluster.Config{NodeID: "driver", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	e1 := nodetest.Start(t, n, nodetest.Options{ID: "e1", CPUs: 2, Key: key})
	nodetest.Start(t, n, nodetest.Options{ID: "e2", CPUs: 2, Key: key})
	nodetest.Start(t, n, nodetest.Options{ID: "e3", CPUs: 2, Key: key})

	r, err := LoadRecipe("ctxopt_bandit")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := StartExecutorPool(ctx, n, r, "exec", []string{"e1", "e2"}, PoolOptions{RespawnEvery: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(ctx)

	local, err := r.NewExecutor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := Questions(3, task.HeldOut, []string{task.Word, task.Arithmetic}, []int{3, 4}, 10)
	if err != nil {
		t.Fatal(err)
	}
	// Direct answers with python and "Use a tool for every calculation".
	cs := make([]Config, len(qs))
	for i := range cs {
		cs[i] = direct(2, 1, 3)
	}
	want, err := Execute(ctx, local, qs, cs, 5)
	if err != nil {
		t.Fatal(err)
	}
	var tools int
	for _, o := range want {
		tools += o.Usage.ToolCalls
	}
	if tools == 0 {
		t.Fatal("no job called the python tool")
	}

	// e1 dies before the cluster can notice: the batch still gives it a
	// chunk, which runs again once e1 is known lost.
	e1.Kill()
	local.Remote = pool
	got, err := Execute(ctx, local, qs, cs, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("job %d: through the pool %+v, local %+v", i, got[i], want[i])
		}
	}
	if pool.Retried() < 1 {
		t.Errorf("%d chunks ran again, want e1's", pool.Retried())
	}
	// The replacement comes up on a live node and takes work.
	for pool.Replaced() < 1 {
		select {
		case <-ctx.Done():
			t.Fatalf("e1's executor never replaced: %+v", pool.Executors())
		case <-time.After(50 * time.Millisecond):
		}
	}
	var live []string
	for _, e := range pool.Executors() {
		switch {
		case e.Node == "e1" && e.Lost == "":
			t.Errorf("the executor on the killed node is still live: %+v", e)
		case e.Node == "e1":
			t.Logf("lost: %s", e.Lost)
		case e.Lost == "":
			live = append(live, e.Node)
		}
	}
	if len(live) != 2 {
		t.Fatalf("live executors on %v, want two (e2 and the replacement): %+v", live, pool.Executors())
	}
	again, err := Execute(ctx, local, qs, cs, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if again[i] != want[i] {
			t.Fatalf("after the replacement, job %d: %+v, local %+v", i, again[i], want[i])
		}
	}
}

// TestExecutorStopWhileTheModelLoads: a node that stops while an executor
// actor loads its executor model (here from a pipe that never ends, as
// from a very slow disk) ends the load: the spawn fails naming the model
// and context.Canceled. The factory built the executor under a context of
// its own (a minute): the load read on after the node's stop until that
// minute ended.
func TestExecutorStopWhileTheModelLoads(t *testing.T) {
	t.Setenv("RLNODE_CACHE", t.TempDir())
	r, err := LoadRecipe("ctxopt_bandit_lm")
	if err != nil {
		t.Fatal(err)
	}
	src := string(r.source)
	for _, kv := range [][2]string{{"hidden: 128", "hidden: 32"}, {"intermediate: 384", "intermediate: 64"}, {"layers: 2", "layers: 1"},
		{"heads: 4", "heads: 2"}, {"kv_heads: 2", "kv_heads: 1"}, {"vocab: 1024", "vocab: 512"}, {"episodes: 6000", "episodes: 40"},
		{"steps: 3000", "steps: 1"}, {"decay_steps: 1000", "decay_steps: 1"}, {"steps: 1500", "steps: 1"}, {"decay_steps: 1000", "decay_steps: 1"},
		{"answer_first: 200", "answer_first: 1"}, {"batch: 32", "batch: 2"}, {"python: true", "python: false"}, {"tools: [calculator, python]", "tools: [calculator]"}} {
		if !strings.Contains(src, kv[0]) {
			t.Fatalf("%q not in the recipe", kv[0])
		}
		src = strings.Replace(src, kv[0], kv[1], 1)
	}
	if r, err = ParseRecipe("small.yaml", []byte(src)); err != nil {
		t.Fatal(err)
	}
	dir, err := r.WarmUp(context.Background(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	half := slowfile.Replace(t, filepath.Join(dir, "model.safetensors"))
	s, err := actor.Start(actor.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	err = slowfile.StopMidway(t, half, func() error {
		_, err := s.SpawnLocal(actor.LocalSpawn{Name: "executor", Kind: ExecutorKind, Args: ExecutorArgs{File: "small.yaml", Recipe: []byte(src)}})
		return err
	}, s.Stop)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "executor model") {
		t.Errorf("spawn while the node stopped: %v; want context.Canceled naming the executor model", err)
	}
}

// TestExecutorStopEndsItsJobs: stopping an executor actor (its pool's
// Close, its node's stop) ends the jobs it runs, those of RunJobs and
// those submitted to run in the background, and it stops at once; here
// its model server holds every call. The jobs ran under a context of
// their own (up to 10 minutes): the stop waited protoactor's 10 s bound
// and failed with its timeout, the jobs going on.
func TestExecutorStopEndsItsJobs(t *testing.T) {
	srv := vllmtest.New(vllmtest.Options{})
	defer srv.Close()
	srv.HoldRequests()
	arrived := vllmtest.WatchArrivals(srv)
	r, recipe := openAIRecipe(t, srv, "")
	s, err := actor.Start(actor.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ref, err := s.SpawnLocal(actor.LocalSpawn{Name: "executor", Kind: ExecutorKind, Args: ExecutorArgs{File: "openai.yaml", Recipe: []byte(recipe)}})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := Questions(1, task.HeldOut, []string{task.Word}, []int{1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	cs := RandomConfigs(r.SpaceOf(), 1, rand.New(rand.NewPCG(1, 1)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A chunk submitted to run in the background, and one run in Receive.
	if v, err := s.Call(ctx, ref, SubmitJobs{ID: "bg", Jobs: []Job{{Q: qs[0], C: cs[0], Seed: 2}}}); err != nil || v != (JobsAccepted{ID: "bg"}) {
		t.Fatalf("submit: %v, %v", v, err)
	}
	vllmtest.WaitArrivals(ctx, t, arrived, 1)
	ran := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := s.Call(ctx, ref, RunJobs{Jobs: []Job{{Q: qs[0], C: cs[0], Seed: 1}}})
		ran <- err
	}()
	vllmtest.WaitArrivals(ctx, t, arrived, 1)
	if err := s.StopLocal("executor", "stopped by test"); err != nil {
		t.Fatalf("stop of an executor running jobs: %v", err)
	}
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Errorf("the jobs the stop ended: %v, want context.Canceled", err)
	}
}

// TestExecutorPoolDropsAnExecutorThatStopsAnswering: an executor whose node
// freezes (SIGSTOP: its sockets stay open, it answers nothing) while the
// cluster still lists it (every node's failure detection here takes
// minutes to suspect a silent member) is dropped LossTimeout after the
// first unanswered call was sent, and its chunk runs on another executor:
// the batch's outcomes are still exactly a local executor's; the pool's
// Close returns, and a new executor's start on the frozen node fails.
func TestExecutorPoolDropsAnExecutorThatStopsAnswering(t *testing.T) {
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	slow := cluster.Detection{ProbeInterval: time.Second, ProbeTimeout: 500 * time.Millisecond, SuspicionMult: 600,
		GossipInterval: 200 * time.Millisecond, PushPull: 5 * time.Second}
	n, err := cluster.Start(ctx, cluster.Config{NodeID: "driver", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Detection: slow, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	e1 := nodetest.Start(t, n, nodetest.Options{ID: "e1", CPUs: 2, Key: key, Detection: slow})
	nodetest.Start(t, n, nodetest.Options{ID: "e2", CPUs: 2, Key: key, Detection: slow})

	src, err := builtin.ReadFile("recipes/ctxopt_bandit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The bound from the recipe (executor.loss_timeout).
	r, err := ParseRecipe("ctxopt_bandit.yaml", []byte(strings.NewReplacer("python: true", "python: false\n  loss_timeout: 1s",
		"tools: [calculator, python]", "tools: [calculator]").Replace(string(src))))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := StartExecutorPool(ctx, n, r, "exec", []string{"e1", "e2"}, PoolOptions{RespawnEvery: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			pool.Close(ctx)
		}
	}()
	local, err := r.NewExecutor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := Questions(2, task.HeldOut, []string{task.Word, task.Arithmetic}, []int{2, 5}, 6)
	if err != nil {
		t.Fatal(err)
	}
	cs := RandomConfigs(r.SpaceOf(), len(qs), rand.New(rand.NewPCG(2, 2)))
	want, err := Execute(ctx, local, qs, cs, 7)
	if err != nil {
		t.Fatal(err)
	}

	e1.Freeze(t)
	local.Remote = pool
	bctx, bcancel := context.WithTimeout(ctx, time.Minute)
	defer bcancel()
	got, err := Execute(bctx, local, qs, cs, 7)
	if err != nil {
		t.Fatalf("batch with e1 frozen: %v (executors %+v)", err, pool.Executors())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("job %d: through the pool %+v, local %+v", i, got[i], want[i])
		}
	}
	if !slices.ContainsFunc(n.Views(), func(v cluster.NodeView) bool { return v.ID == "e1" }) {
		t.Fatalf("the cluster no longer lists e1: the test needs it listed while frozen")
	}
	ex := pool.Executors()
	if ex[0].Node != "e1" || !strings.Contains(ex[0].Lost, "unanswered for 1s") || ex[1].Lost != "" {
		t.Errorf("executors %+v: want e1's lost as unanswered, e2's live", ex)
	}
	if pool.Retried() < 1 {
		t.Errorf("%d chunks ran again, want e1's", pool.Retried())
	}
	// Close returns with e1 still frozen (rlnode ctxopt closes the pool
	// with no deadline of its own).
	done := make(chan struct{})
	go func() {
		pool.Close(context.Background())
		close(done)
	}()
	select {
	case <-done:
		closed = true
	case <-ctx.Done():
		t.Fatalf("Close did not return while e1 was frozen")
	}
	// An executor started on the frozen node: the start fails naming it
	// once the node leaves a liveness ping unanswered (cluster's
	// Detection.Unresponsive, 30 s), or at the latest once the build bound
	// and LossTimeout have passed (before, it waited for as long as ctx
	// lasted).
	_, err = StartExecutorPool(ctx, n, r, "again", []string{"e1"}, PoolOptions{})
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "start executor again-0 on e1: ") ||
		!errors.Is(err, cluster.ErrNodeUnresponsive) && !strings.Contains(err.Error(), "no answer within 1m1s") {
		t.Errorf("start on the frozen node: %v; want it refused naming the executor and e1, unresponsive or unanswered", err)
	}
}

// TestExecutorPoolWaitsForASlowExecution: an execution that takes longer
// than LossTimeout (its model server holds the call) on an executor that
// answers is not a loss: the executor answers the pool's calls while its
// jobs run, the batch waits for them, nothing runs twice.
func TestExecutorPoolWaitsForASlowExecution(t *testing.T) {
	srv := vllmtest.New(vllmtest.Options{})
	defer srv.Close()
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := cluster.Start(ctx, cluster.Config{NodeID: "driver", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	nodetest.Start(t, n, nodetest.Options{ID: "e1", CPUs: 2, Key: key})
	r, _ := openAIRecipe(t, srv, "\n  loss_timeout: 1s")
	pool, err := StartExecutorPool(ctx, n, r, "slow", []string{"e1"}, PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(ctx)
	ran, _ := runHeld(ctx, t, r, pool, srv)
	time.Sleep(3 * time.Second) // the execution outlasts LossTimeout (1 s) three times
	srv.Release()
	if err := <-ran; err != nil {
		t.Fatalf("a slow execution: %v", err)
	}
	if e := pool.Executors(); len(e) != 1 || e[0].Lost != "" || pool.Retried() != 0 {
		t.Errorf("executors %+v, %d chunks run again: want the slow one live, nothing run again", e, pool.Retried())
	}
}

// TestExecutorPoolCutsLargeBatches: a batch whose jobs would pass the
// actor message limit in one chunk (1 MiB here, on every node) is cut into
// chunks of at most chunkJobs, run one after another on the one
// executor: the outcomes are a local executor's. Before, the batch was cut
// into one chunk per executor whatever its size, and that chunk was
// refused for its size (the run worked in process, not on a cluster).
func TestExecutorPoolCutsLargeBatches(t *testing.T) {
	t.Setenv(actor.MaxMessageSizeEnv, "512KiB")
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := cluster.Start(ctx, cluster.Config{NodeID: "driver", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	if got := n.System().MaxMessageSize(); got != 512<<10 {
		t.Fatalf("message limit %d, want 512 KiB", got)
	}
	nodetest.Start(t, n, nodetest.Options{ID: "e1", CPUs: 2, Key: key}, actor.MaxMessageSizeEnv+"=512KiB")
	src, err := builtin.ReadFile("recipes/ctxopt_bandit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseRecipe("ctxopt_bandit.yaml", []byte(strings.NewReplacer("python: true", "python: false", "tools: [calculator, python]", "tools: [calculator]").Replace(string(src))))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := StartExecutors(ctx, n, r, "big", []string{"e1"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(ctx)
	local, err := r.NewExecutor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := Questions(3, task.HeldOut, []string{task.Word, task.Arithmetic}, []int{1, 2, 3, 4, 5}, 300)
	if err != nil {
		t.Fatal(err)
	}
	cs := RandomConfigs(r.SpaceOf(), len(qs), rand.New(rand.NewPCG(3, 3)))
	want, err := Execute(ctx, local, qs, cs, 3)
	if err != nil {
		t.Fatal(err)
	}
	local.Remote = pool
	got, err := Execute(ctx, local, qs, cs, 3)
	if err != nil {
		t.Fatalf("a batch of %d jobs on one executor: %v", len(qs), err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("job %d: through the pool %+v, local %+v", i, got[i], want[i])
		}
	}
}

// TestExecutorStopsAbandonedJobs: jobs submitted to an executor actor that
// nobody collects for their Idle (their caller gone) are stopped and
// forgotten, and the executor takes the next ones; here the model server
// holds every call, so the first chunk would otherwise hold the executor
// (before: for up to 10 minutes, the bound of any chunk however busy).
func TestExecutorStopsAbandonedJobs(t *testing.T) {
	srv := vllmtest.New(vllmtest.Options{})
	defer srv.Close()
	srv.HoldRequests()
	defer srv.Release()
	arrived := vllmtest.WatchArrivals(srv)
	r, recipe := openAIRecipe(t, srv, "")
	s, err := actor.Start(actor.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ref, err := s.SpawnLocal(actor.LocalSpawn{Name: "executor", Kind: ExecutorKind, Args: ExecutorArgs{File: "openai.yaml", Recipe: []byte(recipe)}})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := Questions(1, task.HeldOut, []string{task.Word}, []int{1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	cs := RandomConfigs(r.SpaceOf(), 1, rand.New(rand.NewPCG(1, 1)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Call(ctx, ref, SubmitJobs{ID: "left", Jobs: []Job{{Q: qs[0], C: cs[0], Seed: 1}}, Idle: time.Second}); err != nil {
		t.Fatal(err)
	}
	vllmtest.WaitArrivals(ctx, t, arrived, 1)
	// One chunk runs at a time: the next one's call reaches the server
	// only once the first is stopped.
	if _, err := s.Call(ctx, ref, SubmitJobs{ID: "next", Jobs: []Job{{Q: qs[0], C: cs[0], Seed: 2}}}); err != nil {
		t.Fatal(err)
	}
	vllmtest.WaitArrivals(ctx, t, arrived, 1)
	if _, err := s.Call(ctx, ref, CollectJobs{ID: "left"}); err == nil || !strings.Contains(err.Error(), msgNoJobs) {
		t.Errorf("collect of the abandoned jobs: %v, want %q", err, msgNoJobs)
	}
	if v, err := s.Call(ctx, ref, CollectJobs{ID: "next"}); err != nil || v.(JobsCollected).Done {
		t.Errorf("collect of the running jobs: %+v, %v; want them running", v, err)
	}
}

// TestExecutorPoolDropsAnExecutorThatForgetsAChunk: an executor that
// answers that it does not hold a chunk it accepted (here the test cancels
// the chunk on it behind the pool's back, as a restart in place would
// forget it) is dropped and the chunk runs on its replacement. Before, the
// chunk ran again on the same executor, which kept it live: one that
// forgot every chunk held the batch in that loop for ever.
func TestExecutorPoolDropsAnExecutorThatForgetsAChunk(t *testing.T) {
	srv := vllmtest.New(vllmtest.Options{})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := cluster.Start(ctx, cluster.Config{NodeID: "driver", Bind: "127.0.0.1:0", CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	r, _ := openAIRecipe(t, srv, "")
	pool, err := StartExecutorPool(ctx, n, r, "forget", []string{"driver"}, PoolOptions{RespawnEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(ctx)
	ran, arrived := runHeld(ctx, t, r, pool, srv)
	pool.mu.Lock()
	first := pool.reps[0]
	pool.mu.Unlock()
	if err := first.h.Tell(CancelJobs{ID: "forget/1"}); err != nil {
		t.Fatal(err)
	}
	vllmtest.WaitArrivals(ctx, t, arrived, 1) // the chunk again, on the replacement
	srv.Release()
	if err := <-ran; err != nil {
		t.Fatalf("the batch: %v", err)
	}
	if e := pool.Executors(); !strings.Contains(e[0].Lost, msgNoJobs) || pool.Retried() != 1 {
		t.Errorf("executors %+v, %d chunks run again: want forget-0 dropped for forgetting its chunk, the chunk run again once", e, pool.Retried())
	}
}

// TestExecutorPoolAllLostNamesThem: when every executor is lost and none
// can be replaced within ReplaceWait (here the model server they need is
// gone), the batch fails naming each lost executor, its node and why, and
// the last replacement's failure. Before, it said only that every executor
// was lost.
func TestExecutorPoolAllLostNamesThem(t *testing.T) {
	srv := vllmtest.New(vllmtest.Options{})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := cluster.Start(ctx, cluster.Config{NodeID: "driver", Bind: "127.0.0.1:0", CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	r, _ := openAIRecipe(t, srv, "")
	pool, err := StartExecutorPool(ctx, n, r, "gone", []string{"driver"}, PoolOptions{RespawnEvery: 100 * time.Millisecond, ReplaceWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close(ctx)
	x, err := r.NewExecutor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Engine.Close()
	x.Remote = pool
	srv.Close() // no replacement can start: its engine's server is gone
	if err := n.StopActor(ctx, "gone-0"); err != nil {
		t.Fatal(err)
	}
	for pool.Executors()[0].Lost == "" {
		select {
		case <-ctx.Done():
			t.Fatal("the stopped executor was never dropped")
		case <-time.After(10 * time.Millisecond):
		}
	}
	qs, err := Questions(1, task.HeldOut, []string{task.Word}, []int{1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Execute(ctx, x, qs, RandomConfigs(r.SpaceOf(), 1, rand.New(rand.NewPCG(1, 1))), 1)
	if err == nil || !strings.Contains(err.Error(), "every executor lost (gone-0 on node driver: DEAD on node driver: stopped) and none replaced within 1s (last try: ") ||
		strings.Contains(err.Error(), "last try: )") {
		t.Errorf("a batch with every executor lost: %v; want the lost executor, its node, why, and the last try named", err)
	}
}

// openAIRecipe is the bandit recipe on srv's model (the openai engine, the
// calculator alone), extra added to its executor section, and its text
// (an executor's arguments).
func openAIRecipe(t *testing.T, srv *vllmtest.Server, extra string) (*Recipe, string) {
	t.Helper()
	src, err := builtin.ReadFile("recipes/ctxopt_bandit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	recipe := strings.NewReplacer("  engine: sim", "  engine: openai\n  url: "+srv.URL()+"\n  model: "+srv.Model()+"\n  context: 4096"+extra,
		"python: true", "python: false", "tools: [calculator, python]", "tools: [calculator]").Replace(string(src))
	r, err := ParseRecipe("openai.yaml", []byte(recipe))
	if err != nil {
		t.Fatal(err)
	}
	return r, recipe
}

// runHeld runs one question of r through pool while srv holds every model
// call, and returns once the first call has reached srv: the execution's
// error comes on ran, later calls' arrivals on arrived.
func runHeld(ctx context.Context, t *testing.T, r *Recipe, pool *ExecutorPool, srv *vllmtest.Server) (ran <-chan error, arrived chan struct{}) {
	t.Helper()
	x, err := r.NewExecutor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Engine.Close() })
	x.Remote = pool
	qs, err := Questions(1, task.HeldOut, []string{task.Word}, []int{1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	cs := RandomConfigs(r.SpaceOf(), 1, rand.New(rand.NewPCG(1, 1)))
	srv.HoldRequests()
	arrived = vllmtest.WatchArrivals(srv)
	done := make(chan error, 1)
	go func() {
		_, err := Execute(ctx, x, qs, cs, 1)
		done <- err
	}()
	vllmtest.WaitArrivals(ctx, t, arrived, 1)
	return done, arrived
}
