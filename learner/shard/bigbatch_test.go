package shard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/internal/proctest"
	"github.com/rlnode/rlnode/learner"
)

// bigBatch is groupBatch(0)'s eight samples repeated as groups of four
// up to seqs samples, each group with an id of its own.
func bigBatch(seqs int) learner.Batch {
	one := groupBatch(0)
	b := learner.Batch{PolicyID: one.PolicyID}
	for i := 0; i < seqs; i++ {
		k := i % len(one.Prompts)
		b.Prompts = append(b.Prompts, one.Prompts[k])
		b.Responses = append(b.Responses, one.Responses[k])
		b.Rewards = append(b.Rewards, one.Rewards[k])
		b.GroupIDs = append(b.GroupIDs, int64(i/4))
	}
	return b
}

// A learner on another node trains on a batch whose message body is over
// the actor message limit (lowered here to 64 KiB, so that the batch
// stands for one over the default 64 MiB without building one): the
// driver offers the batch on its bulk path and the learner fetches it,
// for one learner actor and for ranks of which one is on the driver's
// node; each trains on the batch whole (the same statistics as a learner
// trained here).
func TestTrainBatchOverMessageLimit(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	t.Setenv(actor.MaxMessageSizeEnv, "64KiB") // the child node inherits it
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, err := cluster.Start(ctx, cluster.Config{CPUs: 1, Resources: cluster.Resources{"rank": 1}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	child := nodetest.Start(t, node, nodetest.Options{CPUs: 1, Resources: cluster.Resources{"rank": 1, "learner": 1}})

	b := bigBatch(2400)
	_, body, err := actor.EncodeMessage(learner.TrainRequest{Batch: b})
	if err != nil {
		t.Fatal(err)
	}
	if len(body) <= 64<<10 {
		t.Fatalf("the batch's body is %d bytes, want over the 64 KiB limit", len(body))
	}
	want := func(c learner.Config) learner.Stats {
		ref, err := learner.New(c)
		if err != nil {
			t.Fatal(err)
		}
		st, err := ref.Train(b)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	t.Run("one_actor", func(t *testing.T) {
		c := tinyConfig(learner.GRPO, 0, 0)
		p, err := StartGroup(ctx, node, GroupConfig{Policy: "solver", Actor: learner.ActorConfig{Config: c},
			Resources: cluster.Resources{"learner": 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop()
		if m := p.Members(); m[0].Node != child.ID {
			t.Fatalf("learner on node %q, want the child %s", m[0].Node, child.ID)
		}
		got, err := p.Train(ctx, b)
		if w := want(c); err != nil || got.Step != 1 || got.Tokens != w.Tokens || got.Loss != w.Loss {
			t.Fatalf("train a %d-byte batch on node %s: stats %+v (%v), want %+v", len(body), child.ID, got, err, w)
		}
	})

	t.Run("ranks", func(t *testing.T) {
		c := tinyConfig(learner.GRPO, 2, 1)
		p, err := StartGroup(ctx, node, GroupConfig{Policy: "solver", Actor: learner.ActorConfig{Config: c},
			Resources: cluster.Resources{"rank": 1}, Options: Options{Timeout: 30 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop()
		nodes := map[string]bool{}
		for _, m := range p.Members() {
			nodes[m.Node] = true
		}
		if !nodes[child.ID] || !nodes[node.ID()] {
			t.Fatalf("members %+v: want one rank here and one on the child %s", p.Members(), child.ID)
		}
		got, err := p.Train(ctx, b)
		if w := want(tinyConfig(learner.GRPO, 0, 0)); err != nil || got.Step != 1 || got.Tokens != w.Tokens {
			t.Fatalf("train a %d-byte batch on ranks: stats %+v (%v), want %+v", len(body), got, err, w)
		}

		// The rank on the child is offered a batch over its bound (as a
		// hostile member could): it refuses before fetching anything,
		// and tells the rank here, which has its batch and would
		// otherwise wait out the collective timeout; the group's answer
		// is its own (a restart would meet it again).
		g := p.g
		huge := actor.BulkRef{Addr: node.System().Bulk().Addr(), ID: strings.Repeat("0", 32), Size: 1 << 60}
		_, err = g.fanOut(ctx, g.ranks, "train", func(i int) any {
			if g.ranks[i].Address == node.System().Address() {
				return learner.TrainRequest{Batch: b}
			}
			return learner.TrainRequest{At: &huge}
		}, nil)
		if err == nil || !strings.Contains(err.Error(), "over this node's") || g.answered == nil {
			t.Fatalf("a batch over the child rank's bound: %v (answered %v); want its refusal, answered by the group", err, g.answered)
		}
	})
}
