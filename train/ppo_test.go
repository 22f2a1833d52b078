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
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native"
)

// ppoRun is tinyRun with PPO (value head as critic, GAE): a longer
// warm-up so that some sampled answers are right (rewards 0 and 1 in a
// batch), two mini-batches and two epochs per step, twelve RL steps.
func ppoRun(out string) Config {
	c := tinyRun(out)
	c.WarmupSteps, c.WarmupBatch = 120, 32
	c.Steps, c.EvalEvery, c.CheckpointEvery = 12, 4, 4
	c.Learner.Algorithm = learner.PPO
	c.Learner.MiniBatches, c.Learner.Epochs = 2, 2
	c.Learner.LR = 1e-3
	return c
}

func loadAll(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	m, err := model.Load(dir, cpu.New())
	if err != nil {
		t.Fatalf("load %s: %v", dir, err)
	}
	if m.Value == nil {
		t.Fatalf("checkpoint %s has no value head", dir)
	}
	return m.Weights()
}

// A PPO run: one metrics line per step with the critic's fields at RL
// steps (a finite value loss, an explained variance ≤ 1), checkpoints that
// carry the value head and that the native engine serves (without it), and
// a resumed run that ends at the uninterrupted run's weights, value head
// included.
func TestPPORun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := t.TempDir()
	cfg := ppoRun(full)
	var pushed []int64
	cfg.OnWeights = func(v int64, eng engine.Engine) { pushed = append(pushed, v) }
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	last := cfg.WarmupSteps + cfg.Steps
	if res.Steps != last || res.WeightVersion != int64(last) {
		t.Errorf("result: %d steps, version %d; want %d and %d (one step per batch, whatever the mini-batches and epochs)", res.Steps, res.WeightVersion, last, last)
	}
	if len(pushed) != last+1 || pushed[last] != int64(last) {
		t.Errorf("weight versions pushed %v, want 0..%d", pushed, last)
	}
	checkStepsOnce(t, filepath.Join(full, "metrics.jsonl"), last)
	var vl []float64
	var rewards []float64
	var ev []float64
	for _, m := range readMetrics(t, filepath.Join(full, "metrics.jsonl")) {
		_, hasV := m["value_loss"]
		_, hasEV := m["explained_var"]
		_, hasVC := m["value_clip_frac"]
		if rl := m["phase"] == "rl"; hasV != rl || hasEV != rl || hasVC != rl {
			t.Errorf("step %v (%v): value_loss %v, explained_var %v, value_clip_frac %v; want them at RL steps only", m["step"], m["phase"], hasV, hasEV, hasVC)
			continue
		}
		if hasV {
			vl = append(vl, m["value_loss"].(float64))
			rewards = append(rewards, m["reward_mean"].(float64))
			ev = append(ev, m["explained_var"].(float64))
		}
	}
	t.Logf("RL rewards %v, value loss %v, explained variance %v", rewards, vl, ev)
	if len(vl) != cfg.Steps {
		t.Fatalf("%d RL steps with a value loss, want %d", len(vl), cfg.Steps)
	}
	if !slices.ContainsFunc(rewards, func(r float64) bool { return r > 0 && r < 1 }) {
		t.Fatalf("RL rewards %v: none mixed, the critic has nothing to learn", rewards)
	}
	for i := range vl {
		if !(vl[i] > 0 && !math.IsInf(vl[i], 0)) || !(ev[i] <= 1) {
			t.Errorf("RL step %d: value loss %v, explained variance %v; want a finite loss > 0 and a variance ≤ 1", i+1, vl[i], ev[i])
		}
	}

	// The checkpoint carries the value head; the native engine loads it
	// and serves the policy.
	ck := filepath.Join(full, "checkpoints", fmt.Sprintf("step-%d", last-cfg.CheckpointEvery))
	w := loadAll(t, ck)
	if len(w[model.ValueHeadWeight]) != cfg.Model.HiddenSize || len(w[model.ValueHeadBias]) != 1 {
		t.Errorf("checkpoint value head: %d weights and %d biases, want %d and 1", len(w[model.ValueHeadWeight]), len(w[model.ValueHeadBias]), cfg.Model.HiddenSize)
	}
	eng, err := native.Load(ck, native.Config{})
	if err != nil {
		t.Fatalf("native engine on a PPO checkpoint: %v", err)
	}
	defer eng.Close()
	if _, err := eng.Generate(ctx, []engine.Request{{Prompt: []int{1, 2, 3}, Params: engine.SamplingParams{MaxTokens: 4}}}); err != nil {
		t.Errorf("native engine on a PPO checkpoint: generate: %v", err)
	}

	// Resume from that checkpoint: same weights at the end.
	resumed := t.TempDir()
	rc := ppoRun(resumed)
	rc.Resume = ck
	if res, err := Run(ctx, rc); err != nil {
		t.Fatal(err)
	} else if res.Steps != last {
		t.Errorf("resumed run ended at step %d, want %d", res.Steps, last)
	}
	end := fmt.Sprintf("step-%d", last)
	a := loadAll(t, filepath.Join(full, "checkpoints", end))
	b := loadAll(t, filepath.Join(resumed, "checkpoints", end))
	if len(a) != len(b) {
		t.Fatalf("%d tensors in the uninterrupted run's checkpoint, %d in the resumed one's", len(a), len(b))
	}
	for name, x := range a {
		if !slices.Equal(x, b[name]) {
			t.Errorf("tensor %s differs between the uninterrupted and the resumed run", name)
		}
	}
}

// PPO with the learner as two shard ranks ends at the weights (value head
// included) of the same run with one learner.
func TestPPOShardedMatchesOneLearner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ws [2]map[string][]float32
	for i, n := range []int{1, 2} {
		c := ppoRun(filepath.Join(t.TempDir(), "run"))
		c.Steps, c.CheckpointEvery = 4, 4
		c.Learner.Shards = n
		if n > 1 {
			s := shardRun(c.Out, n)
			c.LearnerResources, c.LearnerTimeout = s.LearnerResources, s.LearnerTimeout
		}
		if _, err := Run(ctx, c); err != nil {
			t.Fatalf("%d shards: %v", n, err)
		}
		ws[i] = loadAll(t, filepath.Join(c.Out, "checkpoints", fmt.Sprintf("step-%d", c.WarmupSteps+c.Steps)))
	}
	d, at := maxWeightDiff(t, ws[0], ws[1])
	t.Logf("PPO: max |w1 − w2| after the run: %g at %s", d, at)
	if d > shardTol {
		t.Errorf("two shards' weights differ from one learner's by %g at %s (tolerance %g)", d, at, shardTol)
	}
}

// PPO with generation on two rollout actors, asynchronous (max staleness
// 1): the actors load the learner's starting checkpoint, value head and
// all, and take every step's weight push (which leaves the value head out).
func TestPPOOnRolloutActors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := ppoRun(t.TempDir())
	c.Steps, c.CheckpointEvery = 4, 4
	c.Rollout, c.MaxStaleness = &Rollout{Replicas: 2}, 1
	res, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	last := c.WarmupSteps + c.Steps
	if res.Steps != last || res.WeightVersion != int64(last) {
		t.Errorf("result: %d steps, version %d; want %d and %d", res.Steps, res.WeightVersion, last, last)
	}
	checkStepsOnce(t, filepath.Join(c.Out, "metrics.jsonl"), last)
	for _, m := range readMetrics(t, filepath.Join(c.Out, "metrics.jsonl")) {
		if m["phase"] != "rl" {
			continue
		}
		if lag, ok := m["weight_lag"].(float64); !ok || lag < 0 || lag > 1 {
			t.Errorf("step %v: weight_lag %v, want 0..1", m["step"], m["weight_lag"])
		}
		if _, ok := m["value_loss"]; !ok {
			t.Errorf("step %v: no value_loss", m["step"])
		}
	}
}
