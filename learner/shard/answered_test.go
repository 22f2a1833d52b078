package shard

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/learner"
)

// answer is err as a caller in another process gets it: its text in an
// *actor.ActorError.
func answer(err error) error {
	if err == nil {
		return nil
	}
	return &actor.ActorError{Actor: "learner-solver-r", Message: err.Error()}
}

// answeredAll tells the learner's own verdict on a call (a batch every rank
// refuses, one rank's NaN loss that the other echoes through the abort),
// which a restart would meet again, from a failure a restart cures (a rank
// lost, silent, stopping, or a collective that timed out). The ranks'
// errors are real ones, from ranks in this process.
func TestAnsweredAll(t *testing.T) {
	c := tinyConfig(learner.GRPO, 2, 1)

	bad := groupBatch(0)
	bad.Rewards[5] = math.NaN()
	_, refused := trainAll(memGroup(t, c, Options{Timeout: 10 * time.Minute}), bad)

	ranks := memGroup(t, c, Options{Timeout: 10 * time.Minute})
	p := ranks[1].Learner().TrainableParams()
	for i := range p[0].Data {
		p[0].Data[i] = float32(math.NaN())
	}
	_, nanLoss := trainAll(ranks, groupBatch(0)) // rank 1's own, rank 0's abort

	ranks = memGroup(t, c, Options{Timeout: 200 * time.Millisecond})
	_, timedOut := ranks[0].Learner().Train(groupBatch(0)) // rank 1 never trains

	for i, errs := range [][]error{refused, nanLoss} {
		for r, err := range errs {
			if err == nil {
				t.Fatalf("case %d: rank %d trained", i, r)
			}
		}
	}
	if timedOut == nil {
		t.Fatal("rank 0 trained alone")
	}
	// A learner whose actor is stopping: its context has ended.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	one := newLearner(t, tinyConfig(learner.GRPO, 0, 0))
	_, stopping := one.TrainContext(ended, groupBatch(0))
	savingStopped := one.SaveContext(ended, t.TempDir())
	if stopping == nil || savingStopped == nil {
		t.Fatalf("train %v, save %v with an ended context", stopping, savingStopped)
	}
	for _, tc := range []struct {
		name string
		errs map[int]error
		want bool
	}{
		{"every rank refuses the batch", map[int]error{0: answer(refused[0]), 1: answer(refused[1])}, true},
		{"one learner refuses the batch", map[int]error{0: answer(refused[0])}, true},
		{"one rank's NaN loss, echoed by the other", map[int]error{0: answer(nanLoss[0]), 1: answer(nanLoss[1])}, true},
		{"an echo alone", map[int]error{0: answer(nanLoss[0])}, false},
		{"a rank lost", map[int]error{0: answer(refused[0]), 1: fmt.Errorf("call r1: %w", actor.ErrNodeLost)}, false},
		{"a rank silent", map[int]error{0: answer(refused[0]), 1: fmt.Errorf("%w within 6s of the first failure (stuck?)", errNoReply)}, false},
		{"a collective timed out", map[int]error{0: answer(timedOut), 1: answer(refused[1])}, false},
		{"a rank stopping", map[int]error{0: answer(nanLoss[0]), 1: answer(stopping)}, false},
		{"one learner stopping", map[int]error{0: answer(stopping)}, false},
		{"a save cut short by a stop", map[int]error{0: answer(savingStopped)}, false},
		{"a body the rank could not fetch", map[int]error{0: answer(fmt.Errorf("fetch message body: bulk: connection refused"))}, false},
		{"a call the caller gave up", map[int]error{0: fmt.Errorf("call r0: %w", context.Canceled)}, false},
		{"a batch over the message limit", map[int]error{
			0: fmt.Errorf("call r0: TrainRequest body is 70000000 bytes, over the 67108864-byte message limit (send it with the Bulk API): %w", actor.ErrTooLarge),
			1: fmt.Errorf("call r1: TrainRequest body is 70000000 bytes, over the 67108864-byte message limit (send it with the Bulk API): %w", actor.ErrTooLarge)}, true},
	} {
		if got := answeredAll(tc.errs); got != tc.want {
			t.Errorf("%s: answeredAll %v, want %v (errors %v)", tc.name, got, tc.want, tc.errs)
		}
	}
}
