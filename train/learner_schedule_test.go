package train

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
)

// The RL phase's warm-up and cosine schedule start after the SFT warm-up
// (which trains at WarmupLR): metrics.jsonl's lr shows it, and runs resumed
// from checkpoints in the warm-up and the cosine phase of the schedule log
// the same rates and reach the same step-6 bytes as the uninterrupted run.
func TestScheduleAfterWarmupResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const peak, floor = 2e-3, 1e-4
	run := func(out string) Config {
		c := tinyRun(out)
		c.Learner.Algorithm = learner.RWSFT // every sample counts (TestResumeReachesSameWeights)
		c.Learner.LR, c.Learner.MinLR, c.Learner.WarmupSteps, c.Learner.TotalSteps = peak, floor, 2, 4
		c.WarmupLR, c.Steps, c.CheckpointEvery = 1e-2, 4, 1
		return c
	}
	// Steps 1-2 SFT; RL steps 0..3 of the schedule: warm-up peak/2, peak,
	// then the cosine from peak, halfway down at RL step 3 of 4.
	want := map[int]float64{1: 1e-2, 2: 1e-2, 3: peak / 2, 4: peak, 5: peak, 6: (peak + floor) / 2}
	full := t.TempDir()
	if _, err := Run(ctx, run(full)); err != nil {
		t.Fatal(err)
	}
	check := func(name string, lines []map[string]any) {
		t.Helper()
		for _, m := range lines {
			step := int(m["step"].(float64))
			if lr, _ := m["lr"].(float64); math.Abs(lr-want[step]) > 1e-12 {
				t.Errorf("%s: step %d: lr %v, want %v", name, step, lr, want[step])
			}
		}
	}
	lines := readMetrics(t, filepath.Join(full, "metrics.jsonl"))
	if len(lines) != 6 {
		t.Fatalf("uninterrupted run: %d metrics lines, want 6", len(lines))
	}
	check("uninterrupted", lines)
	last := func(out string) map[string][]float32 {
		m, err := model.Load(filepath.Join(out, "checkpoints", "step-6"), cpu.New())
		if err != nil {
			t.Fatal(err)
		}
		return m.Weights()
	}
	wa := last(full)
	for _, from := range []int{3, 5} {
		out := t.TempDir()
		cfg := run(out)
		cfg.Resume = filepath.Join(full, "checkpoints", fmt.Sprintf("step-%d", from))
		if _, err := Run(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("resumed from step %d", from)
		lines := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
		if len(lines) != 6-from {
			t.Errorf("%s: %d metrics lines, want %d", name, len(lines), 6-from)
		}
		check(name, lines)
		wb := last(out)
		for tn, w := range wa {
			if !slices.Equal(w, wb[tn]) {
				t.Errorf("%s: tensor %s differs from the uninterrupted run's", name, tn)
			}
		}
	}
}
