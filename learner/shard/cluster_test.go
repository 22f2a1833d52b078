package shard

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/learner"
)

// Ranks spawned the way the driver places actors (cluster.Node.Spawn) join
// a Group through their directory records; a plain learner actor refuses a
// sharded config instead of training unsharded. The cluster node runs in a
// child process (its remote would race the test process's on gRPC's
// global logger).
func TestGroupOnClusterSpawn(t *testing.T) {
	c := proctest.Start(t, 60*time.Second, "RLNODE_SHARD_NODE=cluster")
	if c.Line != "OK" {
		t.Fatal(c.Line)
	}
}

func clusterSpawnCheck() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node, err := cluster.Start(ctx, cluster.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		return err
	}
	defer node.Stop()
	c := tinyConfig(learner.GRPO, 2, 1)
	if _, err := node.Spawn(ctx, learner.ActorKind, cluster.SpawnOptions{Name: "plain", Args: learner.ActorConfig{Config: c}}); err == nil || !strings.Contains(err.Error(), "kind learner-shard") {
		return fmt.Errorf("a learner actor with shards 2: %v; want a refusal pointing to learner-shard", err)
	}
	var refs []actor.Ref
	for i := range 2 {
		h, err := node.Spawn(ctx, ActorKind, cluster.SpawnOptions{Name: fmt.Sprintf("learner-%d", i), Args: learner.ActorConfig{Config: c}})
		if err != nil {
			return err
		}
		rec, ok := h.Record()
		if !ok {
			return fmt.Errorf("no directory record for %s", h.Name())
		}
		refs = append(refs, rec.Ref)
	}
	g, err := NewGroup(ctx, node.System(), refs, Options{Timeout: 20 * time.Second})
	if err != nil {
		return err
	}
	ref, err := learner.New(tinyConfig(learner.GRPO, 0, 0))
	if err != nil {
		return err
	}
	want, err := ref.Train(groupBatch(0))
	if err != nil {
		return err
	}
	got, err := g.Train(ctx, groupBatch(0))
	if err != nil {
		return err
	}
	if got.Step != 1 || got.Tokens != want.Tokens {
		return fmt.Errorf("stats %+v, want %+v", got, want)
	}
	dir, err := os.MkdirTemp("", "shard-cluster")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_, err = g.Save(ctx, dir)
	return err
}
