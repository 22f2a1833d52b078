package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
)

// Runs whose generation goes through rollout actors (two replicas on the
// embedded cluster), synchronous and asynchronous with max staleness 1:
// every step is logged once and in order, each RL step's samples lag the
// on-policy version by at most k (exactly 0 when synchronous), evaluation
// runs on the actors, and training moved the weights away from the model
// the actors started from.
func TestRunOnRolloutActors(t *testing.T) {
	for _, c := range []struct {
		name      string
		staleness int
		spread    bool
	}{
		{"sync", 0, false},
		{"async-k1", 1, false},
		{"sync-spread", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out := t.TempDir()
			cfg := tinyRun(out)
			cfg.Steps = 5
			cfg.Rollout = &Rollout{Replicas: 2, Spread: c.spread}
			cfg.MaxStaleness = c.staleness
			if c.staleness > 0 {
				// Truncated importance sampling needs the engines' sampling
				// logprobs, which travel back from the actors.
				cfg.Learner.Loss.TISCap = 2
			}
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			total := cfg.WarmupSteps + cfg.Steps
			if res.Steps != total || res.WeightVersion != int64(total) {
				t.Errorf("steps %d, version %d: want %d and %d", res.Steps, res.WeightVersion, total, total)
			}
			if res.FinalEval < 0 || res.PostWarmupEval < 0 {
				t.Errorf("evaluation missing: post-warm-up %v, final %v", res.PostWarmupEval, res.FinalEval)
			}
			ms := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
			if len(ms) != total {
				t.Fatalf("%d metrics lines, want %d", len(ms), total)
			}
			lags := map[int64]int{}
			for i, m := range ms {
				if int(m["step"].(float64)) != i+1 {
					t.Fatalf("line %d: step %v, want %d", i+1, m["step"], i+1)
				}
				if m["phase"] != "rl" {
					continue
				}
				lag, ok := m["weight_lag"].(float64)
				if !ok || lag < 0 || int(lag) > c.staleness {
					t.Errorf("step %d: weight_lag %v, want 0..%d", i+1, m["weight_lag"], c.staleness)
				}
				lags[int64(lag)]++
				if live, _ := m["rollout_live"].(float64); live != 2 {
					t.Errorf("step %d: rollout_live %v, want 2", i+1, m["rollout_live"])
				}
			}
			t.Logf("weight lag per RL step: %v", lags)
			// A checkpoint's data cursor counts the problems trained on,
			// not the next batch an asynchronous run drew already.
			ck := filepath.Join(out, "checkpoints", fmt.Sprintf("step-%d", cfg.WarmupSteps+2))
			js, err := os.ReadFile(filepath.Join(ck, DriverStateFile))
			if err != nil {
				t.Fatal(err)
			}
			var ds driverState
			if err := json.Unmarshal(js, &ds); err != nil {
				t.Fatal(err)
			}
			if want := cfg.WarmupSteps*cfg.WarmupBatch + 2*cfg.PromptsPerStep; ds.TrainCursor != want {
				t.Errorf("%s: train_cursor %d, want %d", ck, ds.TrainCursor, want)
			}
			start := starts.of(t, out, "solver")
			if start.version != 0 {
				t.Errorf("the rollout actors started at version %d, want 0", start.version)
			}
			if sameWeights(start.w, weightsOf(t, res.LastCheckpointDir)) {
				t.Error("the final weights equal the rollout actors' starting weights: nothing was trained")
			}
			if _, err := os.Stat(filepath.Join(out, "rollout")); !os.IsNotExist(err) {
				t.Errorf("%s/rollout: %v; the actors' weights are pushed, nothing is written for them", out, err)
			}
		})
	}
}

// Config errors of the rollout settings name the field.
func TestRolloutConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"async without actors", func(c *Config) { c.MaxStaleness = 1 }, "max_staleness 1: asynchronous generation runs on rollout actors"},
		{"negative staleness", func(c *Config) { c.MaxStaleness = -1 }, "max_staleness -1"},
		{"no replicas", func(c *Config) { c.Rollout = &Rollout{} }, "rollout.replicas 0"},
		{"async mlmt without feedback actors", func(c *Config) { *c = MLMTMath(c.Out); c.Rollout = &Rollout{Replicas: 1}; c.MaxStaleness = 1 }, "set feedback_rollout"},
		{"feedback rollout without feedback", func(c *Config) { c.FeedbackRollout = &Rollout{Replicas: 1} }, "feedback_rollout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tinyRun(t.TempDir())
			c.edit(&cfg)
			_, err := Run(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// MLMT with both policies on rollout actors (two each), resumed from a
// warm-up checkpoint of an in-process run: the actors start from the
// resumed weights (version = the checkpoint's step), the three turns run
// on them, and RL moves both policies' weights.
func TestMLMTOnRolloutActors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	warm := tinyMLMT(filepath.Join(t.TempDir(), "warm"))
	warm.Steps = 0
	if _, err := Run(ctx, warm); err != nil {
		t.Fatal(err)
	}
	cfg := tinyMLMT(filepath.Join(t.TempDir(), "rl"))
	cfg.Resume = filepath.Join(warm.Out, "checkpoints", "step-2")
	cfg.Rollout, cfg.FeedbackRollout = &Rollout{Replicas: 2}, &Rollout{Replicas: 2, ChunkSize: 3}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 4 || res.WeightVersion != 4 {
		t.Fatalf("steps %d, version %d: want 4 and 4", res.Steps, res.WeightVersion)
	}
	lines := readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))
	if len(lines) != 2 {
		t.Fatalf("%d metrics lines, want 2", len(lines))
	}
	if _, ok := lines[1]["turn3_accuracy"]; !ok {
		t.Errorf("last step has no turn3_accuracy: %v", lines[1])
	}
	for _, p := range []struct{ id, resumed, end string }{
		{"solver", cfg.Resume, res.LastCheckpointDir},
		{"feedback", filepath.Join(cfg.Resume, FeedbackDir), filepath.Join(res.LastCheckpointDir, FeedbackDir)},
	} {
		st := starts.of(t, cfg.Out, p.id)
		start := st.w
		if st.version != 2 {
			t.Errorf("%s: the rollout actors started at version %d, want the resumed checkpoint's 2", p.id, st.version)
		}
		if !sameWeights(start, weightsOf(t, p.resumed)) {
			t.Errorf("%s: the rollout actors did not start from the resumed checkpoint", p.id)
		}
		if sameWeights(start, weightsOf(t, p.end)) {
			t.Errorf("%s: RL did not move the weights", p.id)
		}
	}
}

// Synchronous runs of one seed end with the same weights on two rollout
// actors (cut into chunks of 1 or of 3 requests) and on the in-process
// engine: requests carry their seeds, so where and in which chunk a
// request runs does not change its samples (recipes' deterministic: true
// holds with rollout actors).
func TestRolloutRunsRepeat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got [][]byte
	for i := range 3 {
		cfg := tinyRun(t.TempDir())
		if i < 2 {
			cfg.Rollout = &Rollout{Replicas: 2, ChunkSize: 1 + 2*i} // different cuts
		}
		res, err := Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(res.LastCheckpointDir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
	}
	if !bytes.Equal(got[0], got[1]) {
		t.Error("two runs of the same seed on rollout actors (chunks of 1 and 3 requests) end with different weights")
	}
	if !bytes.Equal(got[0], got[2]) {
		t.Error("a run on rollout actors and one on the in-process engine end with different weights")
	}
}

// The embedded node offers what the run reserves, at least its cores.
func TestEmbeddedCPUs(t *testing.T) {
	cores := float64(runtime.NumCPU())
	for _, c := range []struct {
		name string
		edit func(*Config)
		want float64
	}{
		{"in-process", func(*Config) {}, cores},
		{"many actors", func(c *Config) { c.Rollout = &Rollout{Replicas: 8} }, max(cores, 1+8)},
		{"two CPUs each", func(c *Config) {
			c.Rollout = &Rollout{Replicas: 4, Resources: cluster.Resources{cluster.CPU: 2}}
		}, max(cores, 1+8)},
		{"two shards", func(c *Config) {
			c.Learner.Shards, c.LearnerResources = 2, cluster.Resources{cluster.CPU: 3}
			c.Rollout = &Rollout{Replicas: 2}
		}, max(cores, 2*3+2)},
		{"mlmt sharded", func(c *Config) {
			*c = MLMTMath(c.Out)
			c.Learner.Shards, c.LearnerResources = 3, cluster.Resources{cluster.CPU: 2}
		}, max(cores, 2*3*2)},
		{"mlmt", func(c *Config) {
			*c = MLMTMath(c.Out)
			c.LearnerResources = cluster.Resources{cluster.CPU: 3}
			c.Rollout, c.FeedbackRollout = &Rollout{Replicas: 4}, &Rollout{Replicas: 5, Resources: cluster.Resources{"rollout": 1}}
		}, max(cores, 3+3+4)},
	} {
		cfg := tinyRun("OUT")
		c.edit(&cfg)
		if got := embeddedCPUs(cfg); got != c.want {
			t.Errorf("%s: %v CPUs, want %v", c.name, got, c.want)
		}
	}
}

// startRecord is the weights and version a policy's rollout actors
// started from (rolloutStartHook), the last start of a run.
type startRecord struct {
	version int64
	w       map[string][]float32
}

type startLog struct {
	mu sync.Mutex
	m  map[string]startRecord
}

// starts records every rollout start of this test binary's runs, by run
// directory and policy.
var starts = func() *startLog {
	l := &startLog{m: map[string]startRecord{}}
	rolloutStartHook = func(out, policy string, version int64, w map[string][]float32) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.m[out+"|"+policy] = startRecord{version, w}
	}
	return l
}()

func (l *startLog) of(t *testing.T, out, policy string) startRecord {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.m[out+"|"+policy]
	if !ok {
		t.Fatalf("no rollout start recorded for %s in %s", policy, out)
	}
	return r
}
