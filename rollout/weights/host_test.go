package weights_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/rollout/weights"
)

// swapping is an engine whose swap runs until its context ends (a large
// model's SetWeights takes seconds), saying when it has begun.
type swapping struct {
	*native.Engine
	begun chan struct{}
}

func (e swapping) SetWeights(ctx context.Context, version int64, w map[string][]float32) error {
	close(e.begun)
	<-ctx.Done()
	return ctx.Err()
}

// TestStopEndsAPushInProgress: stopping an engine host (as its rollout
// actor or its node does when they stop) ends the push it is applying,
// and the host stops at once. The push ran under a context of its own
// (up to its 2-minute timeout): the stop waited protoactor's 10 s bound
// and failed with its timeout, the swap going on.
func TestStopEndsAPushInProgress(t *testing.T) {
	s, err := actor.Start(actor.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	m := nativetest.Model(t, nativetest.Config(), 1)
	eng, err := native.New(m, tokenizer.Builtin(), native.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	e := swapping{Engine: eng, begun: make(chan struct{})}
	ref, err := weights.Serve(s, "host", e, nil)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := weights.Encode(1, weights.FullUpdate(nativetest.Model(t, nativetest.Config(), 2)))
	if err != nil {
		t.Fatal(err)
	}
	pushed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := s.Call(ctx, ref, weights.Push{Version: 1, Blob: s.Bulk().Offer(blob, 1, time.Minute)})
		pushed <- err
	}()
	select {
	case <-e.begun:
	case err := <-pushed:
		t.Fatalf("the push ended before its swap began: %v", err)
	}
	if err := s.StopLocal("host", "stopped by test"); err != nil {
		t.Fatalf("stop of an engine host during a push: %v", err)
	}
	if err := <-pushed; !errors.Is(err, context.Canceled) {
		t.Errorf("the push the stop ended: %v, want context.Canceled", err)
	}
}
