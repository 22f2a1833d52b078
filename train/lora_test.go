package train

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native"
)

// loraRun is tinyRun training LoRA adapters in its RL steps, with
// reward-weighted SFT: every sample counts even when the tiny model earns
// no reward, so the adapters move at every step.
func loraRun(out string) Config {
	c := tinyRun(out)
	c.Learner.Algorithm = learner.RWSFT
	c.Learner.LoRA = &model.LoRAConfig{Rank: 4, Alpha: 8, TargetModules: []string{"q_proj", "v_proj", "o_proj", "down_proj"}, Seed: c.Seed}
	c.Learner.LR = 1e-2 // adapters move visibly in three steps
	return c
}

// pushLog records the adapter pushes (testAdapterPushed).
type pushLog struct {
	mu       sync.Mutex
	versions map[string][]int64
	tensors  map[string]int
}

func watchPushes(t *testing.T) *pushLog {
	t.Helper()
	pl := &pushLog{versions: map[string][]int64{}, tensors: map[string]int{}}
	testAdapterPushed = func(id string, version int64, tensors int) {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		pl.versions[id] = append(pl.versions[id], version)
		pl.tensors[id] = tensors
	}
	t.Cleanup(func() { testAdapterPushed = nil })
	return pl
}

// probeGen is the engine's greedy continuation of a probe prompt, taken at
// every weight version the run pushes.
type probeGen struct {
	mu   sync.Mutex
	last map[int64]engine.Sample
}

func (g *probeGen) onWeights(t *testing.T, ctx context.Context) func(int64, engine.Engine) {
	g.last = map[int64]engine.Sample{}
	return func(v int64, eng engine.Engine) {
		if v != eng.WeightVersion() {
			t.Errorf("OnWeights(%d): the engine serves version %d", v, eng.WeightVersion())
		}
		res, err := eng.Generate(ctx, []engine.Request{{ID: fmt.Sprintf("probe-%d", v), Prompt: loraProbe, Params: engine.SamplingParams{N: 1, MaxTokens: 6}}})
		if err != nil {
			t.Errorf("probe at version %d: %v", v, err)
			return
		}
		g.mu.Lock()
		g.last[v] = res[0].Samples[0]
		g.mu.Unlock()
	}
}

var loraProbe = []int{1, 2, 3, 4}

// learnerLogProbs is the learner's own forward (base plus unmerged
// adapters) of the checkpoint in dir: log probabilities of response after
// prompt.
func learnerLogProbs(t *testing.T, cfg Config, dir string, prompt, response []int) []float32 {
	t.Helper()
	l := cfg.Learner
	l.Model, l.Seed, l.Shards = cfg.Model, cfg.Seed, 0
	ln, err := learner.New(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Load(dir); err != nil {
		t.Fatalf("load %s: %v", dir, err)
	}
	if ln.Adapter() == nil {
		t.Fatalf("%s: the learner has no adapters after loading it", dir)
	}
	bt, err := model.NewBatch([]model.Sequence{{Prompt: toInt32(prompt), Response: toInt32(response)}}, 0, true, cfg.Model.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	lp, _, err := ln.Model().Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(lp)
}

// checkServedIsLearner compares the engine's greedy sample at the run's
// last version with the learner's forward of the last checkpoint.
func checkServedIsLearner(t *testing.T, cfg Config, g *probeGen, last int64) {
	t.Helper()
	s, ok := g.last[last]
	if !ok {
		t.Fatalf("no probe at version %d (have %v)", last, g.last)
	}
	dir := filepath.Join(cfg.Out, "checkpoints", fmt.Sprintf("step-%d", last))
	want := learnerLogProbs(t, cfg, dir, loraProbe, s.TokenIDs)
	if len(want) != len(s.LogProbs) {
		t.Fatalf("%d learner log probs for %d sampled tokens", len(want), len(s.LogProbs))
	}
	var d float64
	for i := range want {
		d = max(d, math.Abs(float64(want[i]-s.LogProbs[i])))
	}
	t.Logf("engine vs learner log probs at version %d: max |Δ| %g over %d tokens", last, d, len(want))
	if d > 1e-4 {
		t.Errorf("the engine's log probs %v differ from the learner's %v by %g", s.LogProbs, want, d)
	}
}

// checkLoRACheckpoint checks dir is the frozen base plus a PEFT adapter
// with optimizer state for the adapters only.
func checkLoRACheckpoint(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", model.AdapterWeights, model.AdapterConfig, learner.StateFile, DriverStateFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("LoRA checkpoint: %v", err)
		}
	}
	sizes := map[string]int{}
	f, err := safetensors.ReadFile(filepath.Join(dir, model.AdapterWeights))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range f.Names() {
		v, _, err := f.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		sizes[n] = len(v)
	}
	st, _, err := learner.ReadOptimizerState(dir, sizes)
	if err != nil {
		t.Fatalf("%s: optimizer state of the adapters: %v", dir, err)
	}
	adapters := 0
	for _, x := range st.Tensors {
		switch {
		case strings.Contains(x.Name, ".lora_"):
			adapters++
		case !strings.Contains(x.Name, "v_head."): // PPO's value head trains beside the adapters
			t.Errorf("%s: optimizer state for %s, a frozen base weight", dir, x.Name)
		}
	}
	if adapters != 2*len(sizes) {
		t.Errorf("%s: optimizer state has %d adapter moments for %d adapter tensors", dir, adapters, len(sizes))
	}
}

// The in-process engine: the warm-up pushes full weights, every RL step
// only the adapters (merged onto the base it holds); the engine then
// computes what the learner's adapted model does. The base stays frozen
// from the warm-up on, and checkpoints are base + PEFT adapter.
func TestLoRARun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl := watchPushes(t)
	cfg := loraRun(t.TempDir())
	var g probeGen
	cfg.OnWeights = g.onWeights(t, ctx)
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 5 || res.WeightVersion != 5 {
		t.Fatalf("steps %d, version %d", res.Steps, res.WeightVersion)
	}
	if got := pl.versions["solver"]; !slices.Equal(got, []int64{3, 4, 5}) {
		t.Errorf("adapter pushes at versions %v, want the RL steps' 3, 4, 5", got)
	}
	if pl.tensors["solver"] != 8 {
		t.Errorf("adapter pushes carried %d tensors, want 8 (A and B of 4 projections)", pl.tensors["solver"])
	}
	ck4, ck5 := filepath.Join(cfg.Out, "checkpoints", "step-4"), filepath.Join(cfg.Out, "checkpoints", "step-5")
	checkLoRACheckpoint(t, ck4)
	checkLoRACheckpoint(t, ck5)
	if !sameFile(t, filepath.Join(ck4, "model.safetensors"), filepath.Join(ck5, "model.safetensors")) {
		t.Error("the base moved between RL steps 4 and 5")
	}
	if sameFile(t, filepath.Join(ck4, model.AdapterWeights), filepath.Join(ck5, model.AdapterWeights)) {
		t.Error("the adapters did not move between RL steps 4 and 5")
	}
	checkServedIsLearner(t, cfg, &g, 5)
	// Evaluation of the checkpoint serves base + adapter: the engine it
	// loads generates what the run's engine did, and scores the run's own
	// final accuracy.
	eng, err := native.Load(ck5, native.Config{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := eng.Generate(ctx, []engine.Request{{Prompt: loraProbe, Params: engine.SamplingParams{N: 1, MaxTokens: 6}}})
	eng.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s, w := got[0].Samples[0], g.last[5]; !slices.Equal(s.TokenIDs, w.TokenIDs) || maxAbsDiff(s.LogProbs, w.LogProbs) > 1e-5 {
		t.Errorf("the checkpoint served merged generates %v %v, the run's engine %v %v", s.TokenIDs, s.LogProbs, w.TokenIDs, w.LogProbs)
	}
	se, err := EvaluateSingleCheckpoint(ctx, cfg, ck5)
	if err != nil {
		t.Fatal(err)
	}
	if se.Accuracy != res.FinalEval {
		t.Errorf("EvaluateSingleCheckpoint %v, the run's final eval %v", se.Accuracy, res.FinalEval)
	}
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

// Two rollout actors: each RL step publishes the adapters, which every
// actor merges onto the base it got at the end of the warm-up; their
// generation then equals the learner's forward, and the run reaches the
// in-process run's weights byte for byte.
func TestLoRAOnRolloutActors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pl := watchPushes(t)
	cfg := loraRun(t.TempDir())
	cfg.Rollout = &Rollout{Replicas: 2}
	var g probeGen
	cfg.OnWeights = g.onWeights(t, ctx)
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 5 || res.WeightVersion != 5 {
		t.Fatalf("steps %d, version %d", res.Steps, res.WeightVersion)
	}
	if got := pl.versions["solver"]; !slices.Equal(got, []int64{3, 4, 5}) {
		t.Errorf("adapter pushes at versions %v, want 3, 4, 5", got)
	}
	checkServedIsLearner(t, cfg, &g, 5)
	local := loraRun(t.TempDir())
	if _, err := Run(ctx, local); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"model.safetensors", model.AdapterWeights, learner.OptimizerFile} {
		if !sameFile(t, filepath.Join(cfg.Out, "checkpoints", "step-5", f), filepath.Join(local.Out, "checkpoints", "step-5", f)) {
			t.Errorf("%s differs between the run on rollout actors and the in-process run", f)
		}
	}
}

// A LoRA run resumed from its step-4 checkpoint ends with the bytes of
// the uninterrupted run: base, adapter and the adapters' optimizer state.
// With dropout, its random source travels in the checkpoint.
func TestLoRAResumeReachesSameBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(out string) Config {
		c := loraRun(out)
		c.Learner.LoRA.Dropout = 0.1
		return c
	}
	full := run(t.TempDir())
	if _, err := Run(ctx, full); err != nil {
		t.Fatal(err)
	}
	resumed := run(t.TempDir())
	resumed.Resume = filepath.Join(full.Out, "checkpoints", "step-4")
	if _, err := Run(ctx, resumed); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"model.safetensors", model.AdapterWeights, learner.OptimizerFile} {
		if !sameFile(t, filepath.Join(full.Out, "checkpoints", "step-5", f), filepath.Join(resumed.Out, "checkpoints", "step-5", f)) {
			t.Errorf("%s differs between the uninterrupted and the resumed run", f)
		}
	}
}

// Two learner shards train the adapters (only their gradients cross the
// ring) and end within shardTol of one learner's.
func TestLoRAShardedMatchesOneLearner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cfgs [2]Config
	for i, n := range []int{1, 2} {
		cfgs[i] = shardRun(filepath.Join(t.TempDir(), "run"), n)
		lc := loraRun(cfgs[i].Out)
		cfgs[i].Learner.LoRA, cfgs[i].Learner.LR, cfgs[i].Learner.Algorithm = lc.Learner.LoRA, lc.Learner.LR, lc.Learner.Algorithm
		if _, err := Run(ctx, cfgs[i]); err != nil {
			t.Fatalf("%d shards: %v", n, err)
		}
	}
	last := filepath.Join(cfgs[1].Out, "checkpoints", "step-5")
	checkLoRACheckpoint(t, last)
	one, _ := checkpointWeights(t, cfgs[0], filepath.Join(cfgs[0].Out, "checkpoints", "step-5"))
	two, _ := checkpointWeights(t, cfgs[1], last)
	d, at := maxWeightDiff(t, one, two)
	t.Logf("max |w1 − w2| after 5 steps: %g at %s", d, at)
	if d > shardTol {
		t.Errorf("two shards' merged weights differ from one learner's by %g at %s", d, at)
	}
}

// MLMT with LoRA on both policies, the feedback policy on rollout actors:
// each RL step pushes both policies' adapters, the checkpoint keeps both
// as base + adapter (the feedback policy's under feedback/), and
// evaluating the checkpoint (rlnode eval's path) serves them merged: the
// run's own last turn accuracies.
func TestLoRAMLMT(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pl := watchPushes(t)
	cfg := tinyMLMT(t.TempDir())
	cfg.Learner.LoRA = &model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj"}, Seed: 1}
	cfg.Feedback.LoRA = &model.LoRAConfig{Rank: 4, Alpha: 4, TargetModules: []string{"up_proj", "down_proj"}, Seed: 2}
	cfg.FeedbackRollout = &Rollout{Replicas: 2}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 4 {
		t.Fatalf("%d steps, want 4", res.Steps)
	}
	for _, id := range []string{"solver", "feedback"} {
		if got := pl.versions[id]; !slices.Equal(got, []int64{3, 4}) {
			t.Errorf("%s adapter pushes at versions %v, want 3, 4", id, got)
		}
	}
	if pl.tensors["solver"] != 4 || pl.tensors["feedback"] != 4 {
		t.Errorf("adapter tensors pushed: %v, want 4 each", pl.tensors)
	}
	ck := filepath.Join(cfg.Out, "checkpoints", "step-4")
	checkLoRACheckpoint(t, ck)
	fck := filepath.Join(ck, FeedbackDir)
	for _, f := range []string{model.AdapterWeights, model.AdapterConfig, "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(fck, f)); err != nil {
			t.Errorf("feedback checkpoint: %v", err)
		}
	}
	te, err := EvaluateCheckpoint(ctx, cfg, ck)
	if err != nil {
		t.Fatal(err)
	}
	if te.Turn1 != res.FinalTurns.Turn1 || te.Final != res.FinalTurns.Final {
		t.Errorf("EvaluateCheckpoint turn 1 %v, final %v; the run's last evaluation %v, %v", te.Turn1, te.Final, res.FinalTurns.Turn1, res.FinalTurns.Final)
	}
}

// PPO with LoRA: the value head trains beside the adapters (saved with
// them), the engine serves the adapted policy without it, and a resumed
// run reaches the same bytes.
func TestLoRAPPO(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(out string) Config {
		c := tinyRun(out)
		c.Steps, c.CheckpointEvery = 4, 2
		c.Learner.Algorithm = learner.PPO
		c.Learner.MiniBatches = 2
		c.Learner.LR = 1e-2
		c.Learner.LoRA = &model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "up_proj"}, Seed: 3}
		return c
	}
	cfg := run(t.TempDir())
	var g probeGen
	cfg.OnWeights = g.onWeights(t, ctx)
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	last := filepath.Join(cfg.Out, "checkpoints", "step-6")
	checkLoRACheckpoint(t, last)
	if _, err := os.Stat(filepath.Join(last, model.ValueHeadFile)); err != nil {
		t.Errorf("value head beside the adapter: %v", err)
	}
	checkServedIsLearner(t, cfg, &g, 6)
	resumed := run(t.TempDir())
	resumed.Resume = filepath.Join(cfg.Out, "checkpoints", "step-4")
	if _, err := Run(ctx, resumed); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"model.safetensors", model.AdapterWeights, model.ValueHeadFile, learner.OptimizerFile} {
		if !sameFile(t, filepath.Join(last, f), filepath.Join(resumed.Out, "checkpoints", "step-6", f)) {
			t.Errorf("%s differs between the uninterrupted and the resumed run", f)
		}
	}
}

// LoRA with two learner shards and two rollout actors, a rank stopped
// after step 5: the group restarts from step 4's checkpoint (base +
// adapter), the replacement actors load it served merged and take the
// later adapter pushes on its base; the run ends at the uninterrupted
// run's weights and its actors serve the learner's forward. Asynchronous
// generation (k = 1) on adapters runs too.
func TestLoRARolloutShardRankLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(name string, killAfter, staleness int) (Config, *probeGen) {
		t.Helper()
		node, err := cluster.Start(ctx, cluster.Config{CPUs: 4, Logger: actor.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer node.Stop()
		cfg := shardRun(filepath.Join(t.TempDir(), name), 2)
		lc := loraRun(cfg.Out)
		cfg.Learner.LoRA, cfg.Learner.LR, cfg.Learner.Algorithm = lc.Learner.LoRA, lc.Learner.LR, lc.Learner.Algorithm
		cfg.Node = node
		cfg.Steps = 5
		cfg.Rollout = &Rollout{Replicas: 2}
		cfg.MaxStaleness = staleness
		var g probeGen
		cfg.OnWeights = g.onWeights(t, ctx)
		var killErr error
		cfg.Progress = func(m Metrics) {
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
		if res.Steps != 7 {
			t.Fatalf("%s: %d steps", name, res.Steps)
		}
		return cfg, &g
	}
	cfg, g := run("restarted", 5, 0)
	checkStepsOnce(t, filepath.Join(cfg.Out, "metrics.jsonl"), 7)
	checkServedIsLearner(t, cfg, g, 7)
	straight, _ := run("straight", 0, 0)
	a, _ := checkpointWeights(t, straight, filepath.Join(straight.Out, "checkpoints", "step-7"))
	b, _ := checkpointWeights(t, cfg, filepath.Join(cfg.Out, "checkpoints", "step-7"))
	if d, at := maxWeightDiff(t, a, b); d > shardTol {
		t.Errorf("restarted run's merged weights differ from the uninterrupted run's by %g at %s", d, at)
	}
	async, ga := run("async", 0, 1)
	checkServedIsLearner(t, async, ga, 7)
}
