package weights_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/slowfile"
	"github.com/rlnode/rlnode/learner/model"
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
	err = slowfile.StopMidway(t, e.begun, push(s, ref, blob), func() {
		if err := s.StopLocal("host", "stopped by test"); err != nil {
			t.Fatalf("stop of an engine host during a push: %v", err)
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("the push the stop ended: %v, want context.Canceled", err)
	}
}

// TestStopEndsALoRAPushReadingItsBase: the first LoRA push to an engine
// host reads the base it merges onto from the checkpoint; stopping the
// host meanwhile (here the base comes from a pipe that never ends, as
// from a very slow disk) ends that read too. CheckpointBase read without
// a context: the stop waited protoactor's 10 s bound and failed with its
// timeout, the read going on to the file's end.
func TestStopEndsALoRAPushReadingItsBase(t *testing.T) {
	s, err := actor.Start(actor.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	m := nativetest.Model(t, nativetest.Config(), 1)
	dir := nativetest.Save(t, m)
	eng, err := native.New(m, tokenizer.Builtin(), native.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	trained := nativetest.Model(t, nativetest.Config(), 1) // the learner's copy
	if err := trained.AddLoRA(model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj"}, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	u, err := weights.LoRAUpdate(trained)
	if err != nil {
		t.Fatal(err)
	}
	blob, err := weights.Encode(1, u)
	if err != nil {
		t.Fatal(err)
	}
	half := slowfile.Replace(t, filepath.Join(dir, "model.safetensors"))
	ref, err := weights.Serve(s, "host", eng, weights.CheckpointBase(dir))
	if err != nil {
		t.Fatal(err)
	}
	err = slowfile.StopMidway(t, half, push(s, ref, blob), func() {
		if err := s.StopLocal("host", "stopped by test"); err != nil {
			t.Fatalf("stop of an engine host reading a push's base: %v", err)
		}
	})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "base weights") {
		t.Errorf("the push the stop ended: %v, want context.Canceled naming the base weights", err)
	}
}

// push is a push of blob as version 1 to the engine host ref, within a
// minute.
func push(s *actor.System, ref actor.Ref, blob []byte) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := s.Call(ctx, ref, weights.Push{Version: 1, Blob: s.Bulk().Offer(blob, 1, time.Minute)})
		return err
	}
}
