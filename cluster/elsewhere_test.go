package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// refusedHere counts the builds test.picky refused in this process.
var refusedHere atomic.Int64

func init() {
	// test.picky is built on child nodes only; this process's node says
	// another may build it. test.refusing is built on no node.
	actor.RegisterKind("test.picky", func(*actor.Context, any) (actor.Actor, error) {
		if os.Getenv("RLNODE_TEST_NODE_ID") == "" {
			refusedHere.Add(1)
			return nil, fmt.Errorf("picky: not on the test's own node: %w", ErrTryElsewhere)
		}
		return &counterActor{node: os.Getenv("RLNODE_TEST_NODE_ID")}, nil
	})
	actor.RegisterKind("test.refusing", func(*actor.Context, any) (actor.Actor, error) {
		return nil, fmt.Errorf("refusing: no folder of mine here: %w", ErrTryElsewhere)
	})
}

// TestSpawnTriesElsewhere: an actor whose factory refuses with
// ErrTryElsewhere on the node placement chose is built on another node
// that fits; one that every node refuses fails with the refusal, naming
// it, and is not left ALIVE anywhere.
func TestSpawnTriesElsewhere(t *testing.T) {
	a, _ := twoNodes(t, "where-a", "where-b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// where-b is the busier: placement picks where-a first.
	if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "ballast", Node: "where-b", Resources: Resources{CPU: 1.5}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "where-b's record to count the ballast", 10*time.Second, func() bool {
		rec, ok := a.dir.Node("where-b")
		return ok && rec.Used[CPU] >= 1.5
	})
	before := refusedHere.Load()
	h, err := a.Spawn(ctx, "test.picky", SpawnOptions{Name: "picky", Resources: Resources{CPU: 0.1}})
	if err != nil {
		t.Fatalf("spawn of an actor where-a refuses to build: %v", err)
	}
	if s, err := Call[Sum](ctx, h, WhereAreYou{}); err != nil || s.Node != "where-b" {
		t.Errorf("picky answers from %q (%v), want where-b", s.Node, err)
	}
	if refusedHere.Load() == before {
		t.Error("where-a was never asked: the test did not show a refusal taken elsewhere")
	}

	_, err = a.Spawn(ctx, "test.refusing", SpawnOptions{Name: "refusing", Resources: Resources{CPU: 0.1}})
	t.Logf("spawn refused everywhere: %v", err)
	if err == nil || !strings.Contains(err.Error(), "no folder of mine here") || !strings.Contains(err.Error(), "where-a") || !strings.Contains(err.Error(), "where-b") {
		t.Errorf("spawn that every node refuses: %v; want each node's refusal", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Error("the spawn waited for its context")
	}
	if rec, ok := a.dir.Actor("refusing"); ok && rec.State == Alive {
		t.Errorf("an actor no node built is recorded ALIVE on %s", rec.Node)
	}

	// Refused on where-a, no room now on where-b (its ballast): the error
	// keeps ErrNoRoom, which callers wait on.
	_, err = a.Spawn(ctx, "test.refusing", SpawnOptions{Name: "refusing-big", Resources: Resources{CPU: 1}})
	if err == nil || !strings.Contains(err.Error(), "no folder of mine here") || !errors.Is(err, ErrNoRoom) {
		t.Errorf("spawn refused by the node with room, the other full: %v; want the refusal, wrapping ErrNoRoom", err)
	}
}
