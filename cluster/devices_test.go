package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

func TestAssignGPUs(t *testing.T) {
	for _, c := range []struct {
		free   []float64
		amount float64
		want   []gpuShare // nil with ok false: none fits
		ok     bool
	}{
		{[]float64{1, 1}, 0, nil, true},
		{[]float64{1, 1}, 1, []gpuShare{{0, 1}}, true},
		{[]float64{0, 1}, 1, []gpuShare{{1, 1}}, true},
		{[]float64{1, 1}, 2, []gpuShare{{0, 1}, {1, 1}}, true},
		{[]float64{1, 0.5}, 0.5, []gpuShare{{1, 0.5}}, true},          // packs onto the fuller device
		{[]float64{1, 1, 1}, 1.5, []gpuShare{{0, 1}, {1, 0.5}}, true}, // the fraction on another device
		{[]float64{0.5, 0.5}, 1, nil, false},                          // two halves are not one device
		{[]float64{1}, 2, nil, false},
		{nil, 1, nil, false},
	} {
		got, ok := assignGPUs(c.free, c.amount)
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("assignGPUs(%v, %v) = %v, %v; want %v, %v", c.free, c.amount, got, ok, c.want, c.ok)
		}
	}
}

// Every holder of a GPU gets devices of its own, from the node's, from
// its bundle's in a placement group, and gives them back.
func TestLedgerGivesEachHolderItsOwnDevices(t *testing.T) {
	var l ledger
	l.init(Resources{CPU: 8, GPU: 3}, []GPUInfo{{Index: 0}, {Index: 1}, {Index: 2}})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.acquire("actor", Resources{GPU: 1}, "", 0))
	must(l.acquire("task/1", Resources{GPU: 1}, "", 0))
	if a, b := l.gpusOf("actor"), l.gpusOf("task/1"); !slices.Equal(a, []int{0}) || !slices.Equal(b, []int{1}) {
		t.Fatalf("two holders of a GPU got devices %v and %v; want [0] and [1]", a, b)
	}
	must(l.acquire("half1", Resources{GPU: 0.5}, "", 0))
	must(l.acquire("half2", Resources{GPU: 0.5}, "", 0))
	if a, b := l.gpusOf("half1"), l.gpusOf("half2"); !slices.Equal(a, []int{2}) || !slices.Equal(b, []int{2}) {
		t.Fatalf("two halves got %v and %v; want both on device 2", a, b)
	}
	l.release("half1")
	l.release("task/1")
	// GPU 1 free on device 1, 0.5 on device 2: a whole one goes to 1.
	must(l.acquire("task/2", Resources{GPU: 1}, "", 0))
	if got := l.gpusOf("task/2"); !slices.Equal(got, []int{1}) {
		t.Fatalf("task/2 got %v; want [1]", got)
	}
	l.release("task/2")
	l.release("half2")
	l.release("actor")
	// A group's bundles take devices in index order; its actors take theirs.
	must(l.reserve("pg", []int{0, 1}, []Resources{{GPU: 1}, {GPU: 2}}, 1))
	if err := l.acquire("task/3", Resources{GPU: 1}, "", 0); !errors.Is(err, ErrInfeasible) {
		t.Fatalf("a GPU with every device reserved: %v", err)
	}
	must(l.acquire("rank0", Resources{GPU: 1}, "pg", 0))
	must(l.acquire("rank1", Resources{GPU: 2}, "pg", 1))
	if a, b := l.gpusOf("rank0"), l.gpusOf("rank1"); !slices.Equal(a, []int{0}) || !slices.Equal(b, []int{1, 2}) {
		t.Fatalf("bundle holders got %v and %v; want [0] and [1 2]", a, b)
	}
	l.release("rank0")
	must(l.acquire("rank0b", Resources{GPU: 1}, "pg", 0))
	if got := l.gpusOf("rank0b"); !slices.Equal(got, []int{0}) {
		t.Fatalf("a bundle's next holder got %v; want its device [0]", got)
	}
	l.unreserve("pg")
	must(l.acquire("task/4", Resources{GPU: 3}, "", 0))
	if got := l.gpusOf("task/4"); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("after the group went, a 3-GPU task got %v", got)
	}
}

// gpuTasksIn counts the test.gpus tasks running in this process, and
// gpuTasksPeak the most that ran at once.
var gpuTasksIn, gpuTasksPeak atomic.Int64

type GPUsOf struct{}

func init() {
	actor.RegisterMessage(GPUsOf{})
	// test.gpus waits until want tasks of its kind have run in its
	// process at once (or its context ends), then answers the devices it
	// was given.
	RegisterTask("test.gpus", func(ctx context.Context, want int) ([]int, error) {
		k := gpuTasksIn.Add(1)
		defer gpuTasksIn.Add(-1)
		for p := gpuTasksPeak.Load(); k > p && !gpuTasksPeak.CompareAndSwap(p, k); p = gpuTasksPeak.Load() {
		}
		for gpuTasksPeak.Load() < int64(want) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		return TaskGPUs(ctx), nil
	})
	actor.RegisterKind("test.gpuactor", func(ctx *actor.Context, args any) (actor.Actor, error) {
		return gpuActor{}, nil
	})
}

type gpuActor struct{}

func (gpuActor) Receive(ctx *actor.Context, msg any) (any, error) {
	if _, ok := msg.(GPUsOf); ok {
		return ActorGPUs(ctx), nil
	}
	return nil, fmt.Errorf("unexpected %T", msg)
}

// Two tasks of one GPU each, running at once on a node of two GPUs, are
// told different devices; an actor holding a GPU there keeps its device
// from the tasks. (Before, both tasks were only counted and each could
// only guess device 0.)
func TestTasksAndActorsAreToldTheirOwnGPUs(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "gpus-a", key)
	startNodeProcess(t, "gpus-b", key, a.GossipAddress(), 2, "")
	waitFor(t, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	one := TaskOptions{Resources: Resources{GPU: 1}}
	got, err := Gather(ctx, []*Future[[]int]{Submit[[]int](ctx, a, "test.gpus", 2, one), Submit[[]int](ctx, a, "test.gpus", 2, one)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 1 || len(got[1]) != 1 || got[0][0] == got[1][0] {
		t.Fatalf("two 1-GPU tasks running at once on a 2-GPU node were given devices %v and %v; want one each, different", got[0], got[1])
	}
	if g, err := Submit[[]int](ctx, a, "test.gpus", 1, TaskOptions{}).Get(ctx); err != nil || g != nil {
		t.Fatalf("a task without GPUs was given %v (%v)", g, err)
	}
	h, err := a.Spawn(ctx, "test.gpuactor", SpawnOptions{Name: "gpu-holder", Resources: Resources{GPU: 1}})
	if err != nil {
		t.Fatal(err)
	}
	mine, err := Call[[]int](ctx, h, GPUsOf{})
	if err != nil || len(mine) != 1 {
		t.Fatalf("the actor was given %v (%v); want one device", mine, err)
	}
	theirs, err := Submit[[]int](ctx, a, "test.gpus", 1, one).Get(ctx)
	if err != nil || len(theirs) != 1 || theirs[0] == mine[0] {
		t.Fatalf("a task beside an actor on device %v was given %v (%v)", mine, theirs, err)
	}
}

func TestDeviceFor(t *testing.T) {
	for _, c := range []struct {
		device string
		gpus   []int
		want   string
	}{
		{"cuda", []int{1}, "cuda:1"},
		{"cuda-bf16", []int{3, 4}, "cuda-bf16:3"},
		{"cuda", nil, "cuda"},          // no GPU held: device 0, or Slurm's
		{"cuda:0", []int{1}, "cuda:0"}, // the recipe's index stands
		{"cpu", []int{1}, "cpu"},
		{"", []int{1}, ""},
	} {
		if got := DeviceFor(c.device, c.gpus); got != c.want {
			t.Errorf("DeviceFor(%q, %v) = %q, want %q", c.device, c.gpus, got, c.want)
		}
	}
}
