package train

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/safetensors"
)

// Weights that come out of a learner step NaN are not served: the run
// stops at that step with an error naming the step and the tensor, and
// writes no checkpoint of them (the last one, of a step before, stays the
// one to resume from).
func TestRunStopsOnDivergedWeights(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	const at = 3
	defer func() { testWeightsFetched = nil }()
	testWeightsFetched = func(policy string, step int, w map[string][]float32) {
		if step == at {
			w["model.norm.weight"][1] = float32(math.NaN())
		}
	}
	res, err := Run(ctx, tinyRun(out))
	t.Logf("Run: %v (steps %d)", err, res.Steps)
	if err == nil || !errors.Is(err, safetensors.ErrNotFinite) || !strings.Contains(err.Error(), "weights of step 3 are not finite") || !strings.Contains(err.Error(), `"model.norm.weight"`) {
		t.Fatalf("Run: %v, want it to stop naming step 3 and model.norm.weight", err)
	}
	if res.Steps > at {
		t.Errorf("the run went on to step %d", res.Steps)
	}
	if _, err := os.Stat(filepath.Join(out, "checkpoints", "step-3")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a checkpoint of the diverged step was written (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(out, "checkpoints", "step-2")); err != nil {
		t.Errorf("the checkpoint before it: %v", err)
	}
}
