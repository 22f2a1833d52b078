package train

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/rollout"
)

// Generation on rollout actors with the learner as two shard ranks: rank 1
// stopped after step 5 fails step 6; the learners restart from step 4's
// checkpoint and the rollout actors are replaced by a new pool at version
// 4 (the old one serves version 5 and would refuse it), steps 5–7 are
// redone and every step is logged once, with weight_lag within k and both
// actors live. The synchronous run ends at the weights of an uninterrupted
// one; in the asynchronous ones (max staleness 1 and 2) the batches drawn
// ahead are dropped, so step 6's checkpoint cursor counts exactly the
// problems trained on.
func TestRolloutActorsShardRankLost(t *testing.T) {
	for _, c := range []struct {
		name      string
		staleness int
	}{
		{"sync", 0},
		{"async-k1", 1},
		{"async-k2", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			run := func(name string, killAfter int) (Config, Result, []int, map[string]bool) {
				t.Helper()
				node, err := cluster.Start(ctx, cluster.Config{CPUs: 4, Logger: actor.DiscardLogger()})
				if err != nil {
					t.Fatal(err)
				}
				defer node.Stop()
				cfg := shardRun(filepath.Join(t.TempDir(), name), 2)
				cfg.Node = node
				cfg.Steps = 5 // checkpoints at steps 4, 6, 7
				cfg.Rollout = &Rollout{Replicas: 2}
				cfg.MaxStaleness = c.staleness
				if c.staleness > 0 {
					cfg.Learner.Loss.TISCap = 2
				}
				var seen []int
				pools := map[string]bool{} // the rollout pools seen live at a step's end
				var killErr error
				cfg.Progress = func(m Metrics) {
					seen = append(seen, m.Step)
					for _, rec := range node.Directory().Actors() {
						if rec.Kind == rollout.ActorKind && rec.State == cluster.Alive {
							pools[rec.Name[:strings.LastIndexByte(rec.Name, '-')]] = true
						}
					}
					if m.Step == killAfter {
						killAfter = -1
						killErr = stopRank(ctx, node, "solver", 1)
					}
				}
				res, err := Run(ctx, cfg)
				if err != nil || killErr != nil {
					t.Fatalf("%s: %v (stop a rank: %v)", name, err, killErr)
				}
				if killAfter > 0 {
					t.Fatalf("%s: rank never stopped", name)
				}
				return cfg, res, seen, pools
			}
			cfg, res, seen, pools := run("restarted", 5)
			if res.Steps != 7 || res.WeightVersion != 7 {
				t.Errorf("steps %d, version %d: want 7 and 7", res.Steps, res.WeightVersion)
			}
			if want := "[1 2 3 4 5 5 6 7]"; fmt.Sprint(seen) != want {
				t.Errorf("steps done %v, want %s", seen, want)
			}
			if len(pools) != 2 {
				t.Errorf("rollout pools %v, want 2 (the first replaced at the restart)", pools)
			}
			metrics := filepath.Join(cfg.Out, "metrics.jsonl")
			checkStepsOnce(t, metrics, 7)
			for _, m := range readMetrics(t, metrics) {
				if m["phase"] != "rl" {
					continue
				}
				if lag, ok := m["weight_lag"].(float64); !ok || lag < 0 || int(lag) > c.staleness {
					t.Errorf("step %v: weight_lag %v, want 0..%d", m["step"], m["weight_lag"], c.staleness)
				}
				if live, _ := m["rollout_live"].(float64); live != 2 {
					t.Errorf("step %v: rollout_live %v, want 2", m["step"], m["rollout_live"])
				}
			}
			// The new pool started from the restored learner: step 4.
			if st := starts.of(t, cfg.Out, "solver"); st.version != 4 || !sameWeights(st.w, weightsOf(t, filepath.Join(cfg.Out, "checkpoints", "step-4"))) {
				t.Errorf("the replacement rollout actors started at version %d, want 4 with step-4's weights", st.version)
			}
			ds, err := readDriverState(filepath.Join(cfg.Out, "checkpoints", "step-6"), cfg.Seed)
			if err != nil {
				t.Fatal(err)
			}
			if want := cfg.WarmupSteps*cfg.WarmupBatch + 4*cfg.PromptsPerStep; ds.TrainCursor != want {
				t.Errorf("step 6's train_cursor %d, want %d", ds.TrainCursor, want)
			}
			if c.staleness > 0 {
				return // which version a prefetched sample gets depends on timing
			}
			straight, _, _, pools := run("straight", 0)
			if len(pools) != 1 {
				t.Errorf("uninterrupted run: rollout pools %v, want 1", pools)
			}
			a := weightsOf(t, filepath.Join(straight.Out, "checkpoints", "step-7"))
			b := weightsOf(t, filepath.Join(cfg.Out, "checkpoints", "step-7"))
			if d, at := maxWeightDiff(t, a, b); d > shardTol {
				t.Errorf("restarted run's weights differ from the uninterrupted run's by %g at %s (tolerance %g)", d, at, shardTol)
			}
		})
	}
}

// MLMT with both policies sharded and generating on rollout actors: a
// feedback rank stopped after step 5 fails step 6; both policies restart
// from step 4's checkpoint, both rollout pools are replaced (each new one
// loads its restored policy, step 4), step 5 is redone and the run ends
// at the weights of an uninterrupted one, both policies.
func TestMLMTRolloutActorsFeedbackRankLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(name string, kill bool) (Config, map[string]bool) {
		t.Helper()
		node, err := cluster.Start(ctx, cluster.Config{CPUs: 4, Logger: actor.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer node.Stop()
		cfg := tinyMLMT(filepath.Join(t.TempDir(), name))
		cfg.Learner.Shards = 2
		cfg.LearnerResources = cluster.Resources{cluster.CPU: 0.5}
		cfg.LearnerTimeout = 4 * time.Second
		cfg.Rollout, cfg.FeedbackRollout = &Rollout{Replicas: 1}, &Rollout{Replicas: 1}
		cfg.Node = node
		cfg.Steps, cfg.CheckpointEvery = 4, 2 // checkpoints at steps 4 and 6
		var seen []int
		pools := map[string]bool{}
		var killErr error
		cfg.Progress = func(m Metrics) {
			seen = append(seen, m.Step)
			for _, rec := range node.Directory().Actors() {
				if rec.Kind == rollout.ActorKind && rec.State == cluster.Alive {
					pools[rec.Name[:strings.LastIndexByte(rec.Name, '-')]] = true
				}
			}
			if kill && m.Step == 5 {
				kill = false
				killErr = stopRank(ctx, node, "feedback", 1)
			}
		}
		res, err := Run(ctx, cfg)
		if err != nil || killErr != nil {
			t.Fatalf("%s: %v (stop a rank: %v)", name, err, killErr)
		}
		want := "[1 2 3 4 5 6]"
		if strings.HasPrefix(name, "restarted") {
			want = "[1 2 3 4 5 5 6]"
		}
		if res.Steps != 6 || kill || fmt.Sprint(seen) != want {
			t.Fatalf("%s: %d steps, done %v (kill pending %v); want 6 steps, done %s", name, res.Steps, seen, kill, want)
		}
		checkStepsOnce(t, filepath.Join(cfg.Out, "metrics.jsonl"), 6)
		return cfg, pools
	}
	straight, pools := run("straight", false)
	if len(pools) != 2 {
		t.Errorf("uninterrupted run: rollout pools %v, want 2 (solver, feedback)", pools)
	}
	restarted, pools := run("restarted", true)
	if len(pools) != 4 {
		t.Errorf("restarted run: rollout pools %v, want 4 (both policies' replaced)", pools)
	}
	for _, p := range []struct{ id, sub string }{{"solver", ""}, {"feedback", FeedbackDir}} {
		if st := starts.of(t, restarted.Out, p.id); st.version != 4 || !sameWeights(st.w, weightsOf(t, filepath.Join(restarted.Out, "checkpoints", "step-4", p.sub))) {
			t.Errorf("%s: the replacement rollout actors started at version %d, want 4 with step-4's weights", p.id, st.version)
		}
		a := weightsOf(t, filepath.Join(straight.Out, "checkpoints", "step-6", p.sub))
		b := weightsOf(t, filepath.Join(restarted.Out, "checkpoints", "step-6", p.sub))
		if d, at := maxWeightDiff(t, a, b); d > shardTol {
			t.Errorf("%s: restarted run's weights differ from the uninterrupted run's by %g at %s (tolerance %g)", p.id, d, at, shardTol)
		}
	}
}
