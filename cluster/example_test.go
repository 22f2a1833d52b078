package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
)

// Greet and Greeting are the messages; every node registers them.
type Greet struct{ Name string }
type Greeting struct{ Text string }

type greeter struct{ greeted int }

func (g *greeter) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case Greet:
		g.greeted++
		return Greeting{Text: fmt.Sprintf("hello %s (#%d)", m.Name, g.greeted)}, nil
	}
	return nil, fmt.Errorf("greeter: unexpected %T", msg)
}

func init() {
	actor.RegisterMessage(Greet{}, Greeting{})
	actor.RegisterKind("example.greeter", func(ctx *actor.Context, args any) (actor.Actor, error) {
		return &greeter{}, nil
	})
}

// A program with no cluster configuration is a single-node cluster in one
// process; with Config.Join set it joins an existing cluster instead and
// the same code places actors on other hosts.
func Example() {
	ctx := context.Background()
	node, err := cluster.Start(ctx, cluster.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		panic(err)
	}
	defer node.Stop()

	h, err := node.Spawn(ctx, "example.greeter", cluster.SpawnOptions{
		Name:        "greeter",
		Resources:   cluster.Resources{cluster.CPU: 1},
		MaxRestarts: 3,
	})
	if err != nil {
		panic(err)
	}
	for _, who := range []string{"ada", "alan"} {
		g, err := cluster.Call[Greeting](ctx, h, Greet{Name: who})
		if err != nil {
			panic(err)
		}
		fmt.Println(g.Text)
	}
	// Output:
	// hello ada (#1)
	// hello alan (#2)
}

func init() {
	cluster.RegisterTask("example.square", func(ctx context.Context, x int) (int, error) { return x * x, nil })
}

// Tasks run a registered function once on a node with room for it; their
// futures are collected in order.
func ExampleSubmit() {
	ctx := context.Background()
	node, err := cluster.Start(ctx, cluster.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		panic(err)
	}
	defer node.Stop()

	var fs []*cluster.Future[int]
	for x := range 4 {
		fs = append(fs, cluster.Submit[int](ctx, node, "example.square", x, cluster.TaskOptions{}))
	}
	squares, err := cluster.Gather(ctx, fs)
	fmt.Println(squares, err)
	// Output:
	// [0 1 4 9] <nil>
}

// Put keeps a value on this node once; tasks anywhere read it by its
// reference instead of receiving a copy in every call's arguments.
func ExamplePut() {
	ctx := context.Background()
	node, err := cluster.Start(ctx, cluster.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		panic(err)
	}
	defer node.Stop()

	table, err := cluster.Put(ctx, node, Primes{P: []int{2, 3, 5, 7, 11}})
	if err != nil {
		panic(err)
	}
	var fs []*cluster.Future[int]
	for i := range 3 {
		fs = append(fs, cluster.Submit[int](ctx, node, "example.nth", nth{Table: table, I: i}, cluster.TaskOptions{}))
	}
	primes, err := cluster.Gather(ctx, fs)
	fmt.Println(primes, err)
	node.Free(table)
	_, err = cluster.Get[Primes](ctx, node, table)
	fmt.Println(errors.Is(err, cluster.ErrObjectLost))
	// Output:
	// [2 3 5] <nil>
	// true
}

// Primes is the object (a registered message); nth asks for element I
// of it.
type Primes struct{ P []int }

type nth struct {
	Table cluster.ObjectRef
	I     int
}

func init() {
	actor.RegisterMessage(Primes{})
	cluster.RegisterTask("example.nth", func(ctx context.Context, a nth) (int, error) {
		t, err := cluster.Get[Primes](ctx, cluster.TaskNode(ctx), a.Table)
		if err != nil {
			return 0, err
		}
		return t.P[a.I], nil
	})
}

// WhichGPU asks a worker which GPUs it was given.
type WhichGPU struct{}

type gpuWorker struct{ gpus []int }

func (w *gpuWorker) Receive(ctx *actor.Context, msg any) (any, error) {
	if _, ok := msg.(WhichGPU); ok {
		return w.gpus, nil
	}
	return nil, fmt.Errorf("gpu worker: unexpected %T", msg)
}

func init() {
	actor.RegisterMessage(WhichGPU{})
	actor.RegisterKind("example.gpuworker", func(ctx *actor.Context, args any) (actor.Actor, error) {
		// The devices this actor holds, from its bundle: open these.
		return &gpuWorker{gpus: cluster.ActorGPUs(ctx)}, nil
	})
}

// A placement group reserves one GPU per worker, all or none; each worker
// is spawned into its bundle and opens the device it was given, as Ray's
// workers read CUDA_VISIBLE_DEVICES. (Here the node declares two GPUs; on
// a cluster, STRICT_SPREAD would put each bundle on a node of its own.)
func ExampleNode_CreatePlacementGroup() {
	ctx := context.Background()
	node, err := cluster.Start(ctx, cluster.Config{GPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		panic(err)
	}
	defer node.Stop()

	one := cluster.Bundle{Resources: cluster.Resources{cluster.GPU: 1}}
	pg, err := node.CreatePlacementGroup(ctx, []cluster.Bundle{one, one}, cluster.StrictPack)
	if err != nil {
		panic(err)
	}
	defer node.RemovePlacementGroup(ctx, pg.ID)
	var calls []*cluster.Future[[]int]
	for i := range pg.Bundles {
		h, err := node.Spawn(ctx, "example.gpuworker", cluster.SpawnOptions{
			Name: fmt.Sprintf("worker-%d", i), Group: pg, Bundle: i, Resources: one.Resources})
		if err != nil {
			panic(err)
		}
		calls = append(calls, cluster.CallAsync[[]int](ctx, h, WhichGPU{}))
	}
	gpus, err := cluster.Gather(ctx, calls)
	fmt.Println(gpus, err)

	// A third GPU is more than the node has: refused at once.
	_, err = node.CreatePlacementGroup(ctx, []cluster.Bundle{one}, cluster.Pack)
	fmt.Println(err != nil)
	// Output:
	// [[0] [1]] <nil>
	// true
}

// A group that waits for room, as Ray's stay PENDING until pg.ready():
// here a task holds the node's two GPUs, the group waits (PENDING in
// status, with what holds its room) and is created once the task ends.
func ExampleNode_CreatePlacementGroupWith() {
	ctx := context.Background()
	node, err := cluster.Start(ctx, cluster.Config{NodeID: "example", GPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		panic(err)
	}
	defer node.Stop()

	started, release := make(chan struct{}), make(chan struct{})
	cluster.RegisterTask("example.holdgpus", func(ctx context.Context, _ int) (int, error) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 0, nil
	})
	task := cluster.Submit[int](ctx, node, "example.holdgpus", 0, cluster.TaskOptions{Resources: cluster.Resources{cluster.GPU: 2}})
	<-started

	wctx, cancel := context.WithTimeout(ctx, time.Minute) // how long it may wait
	defer cancel()
	one := cluster.Bundle{Resources: cluster.Resources{cluster.GPU: 1}}
	pg, err := node.CreatePlacementGroupWith(wctx, []cluster.Bundle{one, one}, cluster.StrictPack, cluster.GroupOptions{
		Wait: true,
		Pending: func(why string) {
			fmt.Println("pending:", why)
			close(release) // here: let the task end
		},
	})
	if err != nil {
		panic(err)
	}
	defer node.RemovePlacementGroup(ctx, pg.ID)
	_, err = task.Get(ctx)
	fmt.Println(len(pg.Nodes), err)
	// Output:
	// pending: {GPU:2} in 2 bundles: missing GPU 2 (has 0) free; held by 1 task ({GPU:2} on example)
	// 2 <nil>
}

// Map sends messages over a pool of replicas (rollout workers, say), at
// most perReplica calls out on each: a message goes to a replica once it
// has room, so slow replicas take fewer, and replies come as they finish,
// each with its message's index.
func ExampleMap() {
	ctx := context.Background()
	node, err := cluster.Start(ctx, cluster.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		panic(err)
	}
	defer node.Stop()

	var replicas []*cluster.Handle
	for range 2 {
		h, err := node.Spawn(ctx, "example.greeter", cluster.SpawnOptions{})
		if err != nil {
			panic(err)
		}
		replicas = append(replicas, h)
	}
	pool, err := cluster.NewPool(replicas...)
	if err != nil {
		panic(err)
	}
	names := []string{"ada", "alan", "grace", "edsger", "barbara"}
	msgs := make([]Greet, len(names))
	for i, name := range names {
		msgs[i] = Greet{Name: name}
	}
	replies := make([]string, len(msgs))
	for m := range cluster.Map[Greeting](ctx, pool, msgs, 1) {
		if m.Err != nil {
			panic(m.Err) // or count it and go on: the other messages still come
		}
		replies[m.Index], _, _ = strings.Cut(m.Reply.Text, " (#")
	}
	fmt.Println(strings.Join(replies, ", "))
	// Output:
	// hello ada, hello alan, hello grace, hello edsger, hello barbara
}
