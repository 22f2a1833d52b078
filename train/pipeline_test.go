package train

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// holdTraining makes every asynchronous step train only once the batches
// drawn ahead of it have generated (training slower than generation, the
// case the pipeline is for): then the batch j steps ahead is generated on
// the weights of the step that drew it, and step i's lag is exactly
// min(i−1, k).
func holdTraining(t *testing.T) {
	t.Helper()
	pipelineHook = func(ctx context.Context, ahead []<-chan struct{}) {
		for _, done := range ahead {
			select {
			case <-done:
			case <-ctx.Done():
				return
			}
		}
	}
	t.Cleanup(func() { pipelineHook = nil })
}

// rlLags are the weight_lag values of a run's RL steps, in order.
func rlLags(t *testing.T, out string) []int {
	t.Helper()
	var lags []int
	for _, m := range readMetrics(t, filepath.Join(out, "metrics.jsonl")) {
		if m["phase"] != "rl" {
			continue
		}
		lag, ok := m["weight_lag"].(float64)
		if !ok {
			t.Fatalf("step %v: weight_lag %v", m["step"], m["weight_lag"])
		}
		lags = append(lags, int(lag))
	}
	return lags
}

// Asynchronous runs with max staleness k > 1 pipeline k batches deep,
// single-turn and MLMT (both policies on rollout actors): with training
// held until the batches ahead have generated, RL step i's samples lag
// the on-policy version by exactly min(i−1, k) — k is reached and never
// exceeded; every checkpoint's data cursor counts only the problems
// trained on (the k batches drawn ahead left out); and a run resumed from
// a checkpoint draws them again, logs the remaining steps once and ends
// at the uninterrupted run's cursor.
func TestAsyncPipelineDeep(t *testing.T) {
	single := func(out string, k int) Config {
		c := tinyRun(out)
		c.Steps, c.CheckpointEvery = 6, 1
		c.Rollout = &Rollout{Replicas: 2}
		c.MaxStaleness, c.Learner.Loss.TISCap = k, 2
		return c
	}
	mlmt := func(out string, k int) Config {
		c := asyncMLMT(out, k)
		c.Steps = 6
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  func(out string, k int) Config
		k    int
	}{
		{"single-k2", single, 2},
		{"single-k3", single, 3},
		{"mlmt-k2", mlmt, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holdTraining(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			full := t.TempDir()
			cfg := tc.cfg(full, tc.k)
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			total := cfg.WarmupSteps + cfg.Steps
			if res.Steps != total || res.WeightVersion != int64(total) {
				t.Fatalf("steps %d, version %d; want %d and %d", res.Steps, res.WeightVersion, total, total)
			}
			checkStepsOnce(t, filepath.Join(full, "metrics.jsonl"), total)
			var want []int
			for i := range cfg.Steps {
				want = append(want, min(i, tc.k))
			}
			if lags := rlLags(t, full); !slices.Equal(lags, want) {
				t.Errorf("weight_lag per RL step %v, want %v", lags, want)
			}
			checkCursors(t, full, cfg, total)
			resumed := t.TempDir()
			rc := tc.cfg(resumed, tc.k)
			rc.Resume = filepath.Join(full, "checkpoints", fmt.Sprintf("step-%d", cfg.WarmupSteps+2))
			if res, err := Run(ctx, rc); err != nil {
				t.Fatal(err)
			} else if res.Steps != total {
				t.Fatalf("the resumed run ended at step %d, want %d", res.Steps, total)
			}
			var steps []int
			for s := cfg.WarmupSteps + 3; s <= total; s++ {
				steps = append(steps, s)
			}
			if got := metricSteps(t, filepath.Join(resumed, "metrics.jsonl")); !slices.Equal(got, steps) {
				t.Errorf("the resumed run logged steps %v, want %v", got, steps)
			}
			// The resumed run's pipeline fills again from empty.
			if lags, want := rlLags(t, resumed), want[:len(steps)]; !slices.Equal(lags, want) {
				t.Errorf("resumed: weight_lag per RL step %v, want %v", lags, want)
			}
			sameFinalCursor(t, full, resumed, total, cfg.Seed)
		})
	}
}

// How far the pipeline reaches: k steps ahead, fewer near the end.
func TestPipelineAhead(t *testing.T) {
	for _, c := range []struct{ k, step, steps, want int }{
		{1, 1, 5, 1}, {3, 1, 5, 3}, {3, 3, 5, 2}, {3, 5, 5, 0}, {0, 1, 5, 0}, {2, 6, 5, 0},
	} {
		if got := pipelineAhead(c.k, c.step, c.steps); got != c.want {
			t.Errorf("pipelineAhead(%d, %d, %d) = %d, want %d", c.k, c.step, c.steps, got, c.want)
		}
	}
}

// On vLLM servers (single-turn) the pipeline is k batches deep too:
// with training held until the batches ahead have generated, step i's
// samples lag by exactly min(i−1, k), and the servers still reload every
// version once, in order.
func TestAsyncPipelineDeepVLLM(t *testing.T) {
	holdTraining(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, a, b := vllmRun(t)
	cfg.Steps, cfg.MaxStaleness, cfg.Learner.Loss.TISCap = 6, 2, 2
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var want []int
	for i := range cfg.Steps {
		want = append(want, min(i, cfg.MaxStaleness))
	}
	if lags := rlLags(t, cfg.Out); !slices.Equal(lags, want) {
		t.Errorf("weight_lag per RL step %v, want %v", lags, want)
	}
	steps := cfg.WarmupSteps + cfg.Steps
	for _, s := range []*vllmtest.Server{a, b} {
		rl := s.Reloads()
		if len(rl) != 1+steps {
			t.Fatalf("%s: %d reloads, want %d", s.URL(), len(rl), 1+steps)
		}
		for i, r := range rl {
			if r.Version != strconv.Itoa(i) {
				t.Errorf("%s: reload %d is version %s, want %d", s.URL(), i, r.Version, i)
			}
		}
	}
}

// sameFinalCursor: a resumed run's last checkpoint (step-total) has the
// uninterrupted run's data cursor.
func sameFinalCursor(t *testing.T, full, resumed string, total int, seed uint64) {
	t.Helper()
	a, err := readDriverState(filepath.Join(full, "checkpoints", fmt.Sprintf("step-%d", total)), seed)
	if err != nil {
		t.Fatal(err)
	}
	b, err := readDriverState(filepath.Join(resumed, "checkpoints", fmt.Sprintf("step-%d", total)), seed)
	if err != nil {
		t.Fatal(err)
	}
	if a.TrainCursor != b.TrainCursor {
		t.Errorf("final train_cursor: uninterrupted %d, resumed %d", a.TrainCursor, b.TrainCursor)
	}
}

// checkCursors: every RL checkpoint of a run (step-WarmupSteps+1 ..
// step-total) has the data cursor of the steps trained, the batches an
// asynchronous run drew ahead left out.
func checkCursors(t *testing.T, full string, cfg Config, total int) {
	t.Helper()
	for step := cfg.WarmupSteps + 1; step <= total; step++ {
		ds, err := readDriverState(filepath.Join(full, "checkpoints", fmt.Sprintf("step-%d", step)), cfg.Seed)
		if err != nil {
			t.Fatal(err)
		}
		if want := cfg.WarmupSteps*cfg.WarmupBatch + (step-cfg.WarmupSteps)*cfg.PromptsPerStep; ds.TrainCursor != want {
			t.Errorf("step-%d: train_cursor %d, want %d (the batches drawn ahead left out)", step, ds.TrainCursor, want)
		}
	}
}
