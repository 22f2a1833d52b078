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
	for i, h := range pool.handles {
		if rec, ok := h.Record(); !ok || rec.Node != []string{"e1", "e2"}[i] {
			t.Fatalf("%s runs on %+v, want node e%d", h.Name(), rec, i+1)
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
