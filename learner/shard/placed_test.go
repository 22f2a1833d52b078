package shard

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/learner"
)

// startNode starts a cluster node in this (isolated) test process.
func startNode(t *testing.T, cpus float64) *cluster.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := cluster.Start(ctx, cluster.Config{CPUs: cpus, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// trainStep trains groupBatch(0) and wants the learner at step want
// afterwards.
func trainStep(ctx context.Context, t *testing.T, p *PlacedGroup, want int) {
	t.Helper()
	st, err := p.Train(ctx, groupBatch(0))
	if err != nil {
		t.Fatalf("train to step %d: %v", want, err)
	}
	if st.Step != want {
		t.Fatalf("trained to step %d, want %d", st.Step, want)
	}
}

// failedTrain wants Train to fail as a *Failure of policy naming what.
func failedTrain(ctx context.Context, t *testing.T, p *PlacedGroup, what string) {
	t.Helper()
	_, err := p.Train(ctx, groupBatch(0))
	var f *Failure
	if !errors.As(err, &f) || f.Policy != "solver" || f.Op != "train" || !strings.Contains(err.Error(), what) {
		t.Fatalf("train after a member was lost: %v; want a solver train *Failure naming %q", err, what)
	}
}

// liveActors counts the live actors of kind in node's directory.
func liveActors(node *cluster.Node, kind string) int {
	n := 0
	for _, rec := range node.Directory().Actors() {
		if rec.Kind == kind && rec.State == cluster.Alive {
			n++
		}
	}
	return n
}

// stopped wants no live member actor and all of node's CPUs free again
// after Stop (within 10 s: the node frees a bundle when it sees its
// actor end).
func stopped(t *testing.T, node *cluster.Node, p *PlacedGroup, cpus float64) {
	t.Helper()
	p.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		free := node.Views()[0].Free[cluster.CPU]
		live := liveActors(node, ActorKind) + liveActors(node, learner.ActorKind)
		if live == 0 && free == cpus {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Stop: %d live members, %g of %g CPUs free", live, free, cpus)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartGroup places ranks in a placement group and joins them, or one
// learner actor; a lost rank fails the step as a *Failure; Restart
// respawns it and resumes from a checkpoint (or, with none, starts every
// rank afresh); a group the cluster cannot hold fails at placement, naming
// what is missing. A learner actor refuses a sharded config, pointing to
// the rank kind.
func TestStartGroup(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := startNode(t, 2)
	sharded := tinyConfig(learner.GRPO, 2, 1)
	if _, err := node.Spawn(ctx, learner.ActorKind, cluster.SpawnOptions{Name: "plain", Args: learner.ActorConfig{Config: sharded}}); err == nil || !strings.Contains(err.Error(), "kind learner-shard") {
		t.Fatalf("a learner actor with shards 2: %v; want a refusal pointing to learner-shard", err)
	}
	half := cluster.Resources{cluster.CPU: 0.5}

	t.Run("ranks", func(t *testing.T) {
		p, err := StartGroup(ctx, node, GroupConfig{Policy: "solver", Actor: learner.ActorConfig{Config: sharded},
			Resources: half, Options: Options{Timeout: 4 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		if n := liveActors(node, ActorKind); n != 2 {
			t.Fatalf("%d live rank actors, want 2", n)
		}
		ref, err := learner.New(tinyConfig(learner.GRPO, 0, 0))
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.Train(groupBatch(0))
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Train(ctx, groupBatch(0))
		if err != nil || got.Step != 1 || got.Tokens != want.Tokens {
			t.Fatalf("stats %+v (%v), want %+v", got, err, want)
		}
		dir := t.TempDir()
		if _, err := p.Save(ctx, dir); err != nil {
			t.Fatal(err)
		}
		trainStep(ctx, t, p, 2)

		kept, lost := p.Members()[0].Name, p.Members()[1].Name
		if err := node.StopActor(ctx, lost); err != nil {
			t.Fatal(err)
		}
		failedTrain(ctx, t, p, "rank 1")
		if err := p.Restart(ctx, dir); err != nil {
			t.Fatal(err)
		}
		if m := p.Members(); m[1].Name == lost || m[0].Name != kept {
			t.Errorf("members after the restart %+v: want rank 1 replaced (was %s), rank 0 kept", m, lost)
		}
		trainStep(ctx, t, p, 2) // from the checkpoint's step 1

		if err := p.Restart(ctx, ""); err != nil {
			t.Fatal(err)
		}
		trainStep(ctx, t, p, 1) // every rank afresh
		stopped(t, node, p, 2)
	})

	t.Run("one_actor", func(t *testing.T) {
		p, err := StartGroup(ctx, node, GroupConfig{Policy: "solver", Actor: learner.ActorConfig{Config: tinyConfig(learner.GRPO, 0, 0)}})
		if err != nil {
			t.Fatal(err)
		}
		if n := liveActors(node, learner.ActorKind); n != 1 || len(p.Members()) != 1 {
			t.Fatalf("%d live learner actors, %d members; want 1 and 1", n, len(p.Members()))
		}
		trainStep(ctx, t, p, 1)
		dir := t.TempDir()
		if _, err := p.Save(ctx, dir); err != nil {
			t.Fatal(err)
		}
		if err := node.StopActor(ctx, p.Members()[0].Name); err != nil {
			t.Fatal(err)
		}
		failedTrain(ctx, t, p, "")
		if err := p.Restart(ctx, dir); err != nil {
			t.Fatal(err)
		}
		trainStep(ctx, t, p, 2)
		stopped(t, node, p, 2)
	})

	t.Run("does_not_fit", func(t *testing.T) {
		_, err := StartGroup(ctx, node, GroupConfig{Policy: "solver", Actor: learner.ActorConfig{Config: tinyConfig(learner.GRPO, 3, 1)}})
		if err == nil || !strings.Contains(err.Error(), "3 solver learner shards") || !strings.Contains(err.Error(), "the group needs CPU") {
			t.Fatalf("err %v, want 3 solver shards refused for want of CPU", err)
		}
		if n := liveActors(node, ActorKind); n != 0 {
			t.Errorf("%d rank actors left live", n)
		}
	})
}

// A rank's node dies (its process is killed): the next step fails at
// once, Restart places the rank anew on the surviving node (its bundle's
// node is gone, so in a new placement group) and the group goes on from
// the checkpoint.
func TestStartGroupNodeDies(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := startNode(t, 2)
	child := nodetest.Start(t, node, nodetest.Options{CPUs: 1})
	one := cluster.Resources{cluster.CPU: 1}
	p, err := StartGroup(ctx, node, GroupConfig{Policy: "solver", Actor: learner.ActorConfig{Config: tinyConfig(learner.GRPO, 2, 1)},
		Resources: one, Options: Options{Timeout: 4 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	onChild := -1
	for i, m := range p.Members() {
		if m.Node == child.ID {
			onChild = i
		}
	}
	if onChild < 0 {
		t.Fatalf("members %+v: none on node %s (SPREAD over two nodes)", p.Members(), child.ID)
	}
	trainStep(ctx, t, p, 1)
	dir := t.TempDir()
	if _, err := p.Save(ctx, dir); err != nil {
		t.Fatal(err)
	}
	child.Kill()
	start := time.Now()
	failedTrain(ctx, t, p, "")
	t.Logf("the step failed %v after the kill", time.Since(start))
	if err := p.Restart(ctx, dir); err != nil {
		t.Fatal(err)
	}
	for _, m := range p.Members() {
		if m.Node != node.ID() {
			t.Errorf("member %s on node %q after the restart, want the surviving %s", m.Name, m.Node, node.ID())
		}
	}
	trainStep(ctx, t, p, 2)
}
