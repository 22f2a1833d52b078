package learner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rlnode/rlnode/learner/rl"
)

// doneAfter is a context whose Err is context.Canceled from its n-th call
// on: a stop that arrives at a chosen point of a step, with no timing.
type doneAfter struct {
	context.Context
	n, calls atomic.Int64
}

func newDoneAfter(n int64) *doneAfter {
	c := &doneAfter{Context: context.Background()}
	c.n.Store(n)
	return c
}

func (c *doneAfter) Err() error {
	if c.calls.Add(1) >= c.n.Load() {
		return context.Canceled
	}
	return nil
}

// A stop reaches a step of any length: TrainContext gives up between
// micro-batches and optimizer steps with an error wrapping
// context.Canceled (algorithm.epochs 1000000000 made one Train endless,
// and a learner actor's stop waited for it). A learner stopped after its
// first optimizer step holds weights that are no step's: Save and
// SaveModel refuse them until a Load; one stopped before any optimizer
// step keeps its weights and step, and saves.
func TestTrainContextStopsAStep(t *testing.T) {
	for _, alg := range []string{GRPO, PPO} {
		t.Run(alg, func(t *testing.T) {
			c := tinyConfig(alg)
			c.Epochs, c.MiniBatches = 1_000_000_000, 2
			l := newLearner(t, c)
			good := filepath.Join(t.TempDir(), "good")
			if err := l.Save(good); err != nil {
				t.Fatal(err)
			}
			w0 := l.PolicyWeights()

			// Stopped before the step: nothing changes.
			_, err := l.TrainContext(newDoneAfter(1), groupBatch())
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("TrainContext with a done context: %v, want context.Canceled", err)
			}
			if l.Step() != 0 || maxDiff(l.PolicyWeights(), w0) != 0 {
				t.Fatalf("a step stopped before it began moved the learner: step %d", l.Step())
			}
			// Stopped in its first micro-batch (the pre-pass's and the
			// first pass's checks come first): the weights are untouched.
			for n := int64(2); n < 6; n++ {
				if _, err := l.TrainContext(newDoneAfter(n), groupBatch()); !errors.Is(err, context.Canceled) {
					t.Fatalf("stop at check %d: %v, want context.Canceled", n, err)
				}
				if l.Step() != 0 || maxDiff(l.PolicyWeights(), w0) != 0 {
					t.Fatalf("stop at check %d, before any optimizer step, moved the learner to step %d", n, l.Step())
				}
			}
			if err := l.Save(filepath.Join(t.TempDir(), "unmoved")); err != nil {
				t.Fatalf("save after a step stopped before any update: %v", err)
			}

			// Stopped later, mid-way through the endless step.
			_, err = l.TrainContext(newDoneAfter(200), groupBatch())
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("TrainContext stopped mid-step: %v, want context.Canceled", err)
			}
			if l.Step() == 0 {
				t.Fatal("no optimizer step before the stop at check 200; move the stop later")
			}
			bad := filepath.Join(t.TempDir(), "partial")
			for name, save := range map[string]func(string) error{"Save": l.Save, "SaveModel": l.SaveModel} {
				err := save(bad)
				if err == nil || !strings.Contains(err.Error(), "cancelled after") {
					t.Errorf("%s of a learner stopped mid-step: %v, want a refusal", name, err)
				}
			}
			if _, err := os.Stat(filepath.Join(bad, StateFile)); err == nil {
				t.Errorf("a refused save wrote %s", StateFile)
			}
			if err := l.Load(good); err != nil {
				t.Fatal(err)
			}
			if err := l.Save(bad); err != nil {
				t.Errorf("save after Load: %v", err)
			}
		})
	}
}

// A stop reaches a save: SaveContext gives up between tensors with an
// error wrapping context.Canceled and writes no learner_state.json.
func TestSaveContextStops(t *testing.T) {
	c := tinyConfig(PPO)
	c.Loss.KLCoef, c.Loss.KL = 0.1, rl.K3 // a reference to write too
	l := newLearner(t, c)
	for n := int64(1); n < 40; n += 3 {
		dir := filepath.Join(t.TempDir(), "ck")
		err := l.SaveContext(newDoneAfter(n), dir)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("SaveContext stopped at check %d: %v, want context.Canceled", n, err)
		}
		if _, err := os.Stat(filepath.Join(dir, StateFile)); err == nil {
			t.Errorf("SaveContext stopped at check %d wrote %s", n, StateFile)
		}
	}
}
