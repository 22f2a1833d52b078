package cluster_test

import (
	"context"
	"fmt"

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
