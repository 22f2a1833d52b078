package train

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
)

// asyncMLMT is tinyMLMT with both policies on two rollout actors each,
// five RL steps and a checkpoint after each.
func asyncMLMT(out string, staleness int) Config {
	c := tinyMLMT(out)
	c.Steps, c.CheckpointEvery = 5, 1
	c.Rollout, c.FeedbackRollout = &Rollout{Replicas: 2}, &Rollout{Replicas: 2}
	c.MaxStaleness = staleness
	if staleness > 0 {
		// Truncated importance sampling with the engines' sampling
		// logprobs, as single-turn asynchronous runs use it.
		c.Learner.Loss.TISCap = 2
	}
	return c
}

func asyncScore(out string, staleness int) Config {
	c := asyncMLMT(out, staleness)
	c.Episode, c.Feedback, c.FeedbackRollout, c.ReviewTemplate = EpisodeSCoRe, nil, nil, "check and answer again"
	c.Task.Kinds, c.Task.Level = []string{"arithmetic"}, 1
	return c
}

// Multi-turn runs on rollout actors, synchronous and asynchronous (max
// staleness 1): every step is logged once and in order; each RL step's
// samples, every turn's, lag the on-policy version by at most k (0 when
// synchronous); a checkpoint's data cursor counts the problems trained
// on, not the batch drawn ahead; and a run resumed from a checkpoint
// draws that batch again and ends with the cursor of the uninterrupted
// run.
func TestMultiTurnAsync(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       func(out string, k int) Config
		staleness int
	}{
		{"mlmt-sync", asyncMLMT, 0},
		{"mlmt-async-k1", asyncMLMT, 1},
		{"score-async-k1", asyncScore, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			full := t.TempDir()
			cfg := tc.cfg(full, tc.staleness)
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			total := cfg.WarmupSteps + cfg.Steps
			if res.Steps != total || res.WeightVersion != int64(total) {
				t.Fatalf("steps %d, version %d; want %d and %d", res.Steps, res.WeightVersion, total, total)
			}
			checkStepsOnce(t, filepath.Join(full, "metrics.jsonl"), total)
			lags := map[int]int{}
			for _, m := range readMetrics(t, filepath.Join(full, "metrics.jsonl")) {
				if m["phase"] != "rl" {
					continue
				}
				lag, ok := m["weight_lag"].(float64)
				if !ok || lag < 0 || int(lag) > tc.staleness {
					t.Errorf("step %v: weight_lag %v, want 0..%d", m["step"], m["weight_lag"], tc.staleness)
				}
				lags[int(lag)]++
			}
			t.Logf("weight lag per RL step: %v", lags)
			checkCursors(t, full, cfg, total)
			resumed := t.TempDir()
			rc := tc.cfg(resumed, tc.staleness)
			rc.Resume = filepath.Join(full, "checkpoints", fmt.Sprintf("step-%d", cfg.WarmupSteps+2))
			if res, err := Run(ctx, rc); err != nil {
				t.Fatal(err)
			} else if res.Steps != total {
				t.Fatalf("the resumed run ended at step %d, want %d", res.Steps, total)
			}
			steps := metricSteps(t, filepath.Join(resumed, "metrics.jsonl"))
			if want := []int{cfg.WarmupSteps + 3, cfg.WarmupSteps + 4, cfg.WarmupSteps + 5}; !slices.Equal(steps, want) {
				t.Errorf("the resumed run logged steps %v, want %v", steps, want)
			}
			sameFinalCursor(t, full, resumed, total, cfg.Seed)
		})
	}
}

// A synchronous MLMT run ends with the same weights, both policies', on
// rollout actors as in-process: the episodes' requests carry their seeds
// and are generated for the step's version wherever they run.
func TestMLMTRolloutRunsRepeat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var dirs []string
	for _, actors := range []bool{false, true} {
		cfg := tinyMLMT(t.TempDir())
		if actors {
			cfg.Rollout, cfg.FeedbackRollout = &Rollout{Replicas: 2, ChunkSize: 3}, &Rollout{Replicas: 2}
		}
		res, err := Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, res.LastCheckpointDir)
	}
	for _, sub := range []string{"", FeedbackDir} {
		if !sameWeights(weightsOf(t, filepath.Join(dirs[0], sub)), weightsOf(t, filepath.Join(dirs[1], sub))) {
			t.Errorf("%q: the run on rollout actors ends with other weights than the in-process one", sub)
		}
	}
}

// An asynchronous MLMT run (max staleness 1, both policies sharded on
// rollout actors) whose feedback rank is stopped after step 5: both
// policies restart from step 4's checkpoint with new pools, the episodes
// played ahead for the failed step are dropped, step 5 is redone, every
// step is logged once with weight_lag within 1, and step 6's checkpoint
// cursor counts exactly the problems trained on.
func TestMLMTAsyncFeedbackRankLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, err := cluster.Start(ctx, cluster.Config{CPUs: 4, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()
	cfg := tinyMLMT(filepath.Join(t.TempDir(), "run"))
	cfg.Learner.Shards = 2
	cfg.LearnerResources = cluster.Resources{cluster.CPU: 0.5}
	cfg.LearnerTimeout = 4 * time.Second
	cfg.Rollout, cfg.FeedbackRollout = &Rollout{Replicas: 1}, &Rollout{Replicas: 1}
	cfg.MaxStaleness, cfg.Learner.Loss.TISCap = 1, 2
	cfg.Node = node
	cfg.Steps, cfg.CheckpointEvery = 4, 2 // checkpoints at steps 4 and 6
	var seen []int
	kill := true
	var killErr error
	cfg.Progress = func(m Metrics) {
		seen = append(seen, m.Step)
		if kill && m.Step == 5 {
			kill = false
			killErr = stopRank(ctx, node, "feedback", 1)
		}
	}
	res, err := Run(ctx, cfg)
	if err != nil || killErr != nil {
		t.Fatalf("%v (stop a rank: %v)", err, killErr)
	}
	if want := "[1 2 3 4 5 5 6]"; res.Steps != 6 || kill || fmt.Sprint(seen) != want {
		t.Fatalf("%d steps, done %v (kill pending %v); want 6 steps, done %s", res.Steps, seen, kill, want)
	}
	metrics := filepath.Join(cfg.Out, "metrics.jsonl")
	checkStepsOnce(t, metrics, 6)
	for _, m := range readMetrics(t, metrics) {
		if lag, ok := m["weight_lag"].(float64); m["phase"] == "rl" && (!ok || lag < 0 || lag > 1) {
			t.Errorf("step %v: weight_lag %v, want 0..1", m["step"], m["weight_lag"])
		}
	}
	for _, p := range []struct{ id, sub string }{{"solver", ""}, {"feedback", FeedbackDir}} {
		if st := starts.of(t, cfg.Out, p.id); st.version != 4 || !sameWeights(st.w, weightsOf(t, filepath.Join(cfg.Out, "checkpoints", "step-4", p.sub))) {
			t.Errorf("%s: the replacement rollout actors started at version %d, want 4 with step-4's weights", p.id, st.version)
		}
	}
	ds, err := readDriverState(filepath.Join(cfg.Out, "checkpoints", "step-6"), cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	if want := cfg.WarmupSteps*cfg.WarmupBatch + 4*cfg.PromptsPerStep; ds.TrainCursor != want {
		t.Errorf("step 6's train_cursor %d, want %d", ds.TrainCursor, want)
	}
}
