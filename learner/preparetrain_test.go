package learner_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/learner"
)

// PrepareTrain gives a learner on the sender's node the batch itself, and
// those on other nodes the batch encoded once: inside the message when it
// is small, else one offer on the bulk path for all of them, which release
// withdraws. LoadBatch gives the same batch back from each; it refuses an
// offer over the node's bound before fetching anything.
func TestPrepareTrain(t *testing.T) {
	sys, err := actor.Start(actor.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	batch := func(seqs int) learner.Batch {
		b := learner.Batch{PolicyID: "solver"}
		for i := 0; i < seqs; i++ {
			b.Prompts = append(b.Prompts, []int32{1, 2, int32(i % 7)})
			b.Responses = append(b.Responses, []int32{int32(i % 5), 6, 70000})
			b.Rewards = append(b.Rewards, float64(i%2))
			b.GroupIDs = append(b.GroupIDs, int64(i/4))
		}
		return b
	}
	here := actor.Ref{Name: "here", Address: sys.Address(), ID: "a/here"}
	away := []actor.Ref{{Name: "r1", Address: "127.0.0.1:1", ID: "a/r1"}, {Name: "r2", Address: "127.0.0.1:2", ID: "a/r2"}}
	targets := append([]actor.Ref{here}, away...)

	small := batch(8)
	reqs, release, err := learner.PrepareTrain(sys, small, targets)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if reqs[0].Packed != nil || reqs[0].At != nil || !reflect.DeepEqual(reqs[0].Batch, small) {
		t.Errorf("the learner here: %+v, want the batch itself", reqs[0])
	}
	for i := 1; i < 3; i++ {
		if reqs[i].Packed == nil || reqs[i].At != nil {
			t.Errorf("learner %d away, small batch: want it packed inline, got %+v", i, reqs[i])
		}
		got, err := reqs[i].LoadBatch(ctx, sys)
		if err != nil || !reflect.DeepEqual(got, small) {
			t.Errorf("learner %d away: loaded %v, want the batch back", i, err)
		}
	}

	big := batch(20000) // over the 256 KiB inline limit
	reqs, release, err = learner.PrepareTrain(sys, big, targets)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[1].At == nil || reqs[2].At == nil || *reqs[1].At != *reqs[2].At || reqs[1].Packed != nil {
		t.Fatalf("a large batch: %+v, %+v; want one offer for both learners away", reqs[1].At, reqs[2].At)
	}
	got, err := reqs[1].LoadBatch(ctx, sys)
	if err != nil || !reflect.DeepEqual(got, big) {
		t.Fatalf("loaded from the offer: %v", err)
	}
	release()
	if _, err := reqs[2].LoadBatch(ctx, sys); !errors.Is(err, actor.ErrBulkAbsent) {
		t.Errorf("after release: %v, want the offer withdrawn", err)
	}

	over := *reqs[1].At
	over.Size = learner.MaxTrainBatchBytes() + 1
	if _, err := (learner.TrainRequest{At: &over}).LoadBatch(ctx, sys); !errors.Is(err, actor.ErrTooLarge) {
		t.Errorf("an offer over the bound: %v, want ErrTooLarge", err)
	}
}

// The wire cost of a small train batch to a learner on another node, as
// the message was (the batch encoded inside TrainRequest) and as
// PrepareTrain sends it (encoded once, carried packed): encode at the
// sender, decode at the learner. 64 sequences of 32 + 64 tokens.
func BenchmarkTrainRequestWire(b *testing.B) {
	batch := learner.Batch{PolicyID: "solver"}
	for i := 0; i < 64; i++ {
		p, r := make([]int32, 32), make([]int32, 64)
		for k := range p {
			p[k] = int32(1000 + 37*k + i)
		}
		for k := range r {
			r[k] = int32(20000 + 101*k + i)
		}
		batch.Prompts, batch.Responses = append(batch.Prompts, p), append(batch.Responses, r)
		batch.Rewards, batch.GroupIDs = append(batch.Rewards, float64(i%2)), append(batch.GroupIDs, int64(i/8))
	}
	sys, err := actor.Start(actor.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer sys.Stop()
	away := []actor.Ref{{Name: "r", Address: "127.0.0.1:1", ID: "a/r"}}
	ctx := context.Background()
	roundTrip := func(b *testing.B, msg learner.TrainRequest) learner.Batch {
		name, body, err := actor.EncodeMessage(msg)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(body)))
		v, err := actor.DecodeMessage(name, body)
		if err != nil {
			b.Fatal(err)
		}
		got, err := v.(learner.TrainRequest).LoadBatch(ctx, sys)
		if err != nil {
			b.Fatal(err)
		}
		return got
	}
	b.Run("batch", func(b *testing.B) {
		for range b.N {
			roundTrip(b, learner.TrainRequest{Batch: batch})
		}
	})
	b.Run("packed", func(b *testing.B) {
		for range b.N {
			reqs, release, err := learner.PrepareTrain(sys, batch, away)
			if err != nil || reqs[0].Packed == nil {
				b.Fatalf("%v: not packed", err)
			}
			roundTrip(b, reqs[0])
			release()
		}
	})
}
