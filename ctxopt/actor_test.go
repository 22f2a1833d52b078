package ctxopt

import (
	"context"
	crand "crypto/rand"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
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
	m, err := r.Method()
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
