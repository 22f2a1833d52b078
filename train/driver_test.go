package train

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native"
)

// tinyRun is the quickstart loop shrunk to seconds: a 1-layer model, two
// warm-up steps, three GRPO steps.
func tinyRun(out string) Config {
	c := Quickstart(out)
	m := *c.Model
	m.HiddenSize, m.IntermediateSize, m.NumLayers, m.HeadDim = 32, 64, 1, 8
	c.Model = &m
	c.WarmupSteps, c.WarmupBatch = 2, 8
	c.Steps, c.PromptsPerStep, c.GroupSize = 3, 4, 4
	c.EvalEvery, c.EvalProblems, c.CheckpointEvery = 2, 8, 2
	return c
}

func readMetrics(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s:%d: %v", path, len(out)+1, err)
		}
		out = append(out, m)
	}
	return out
}

// The loop's mechanics: one metrics line per step with the required keys,
// evaluation and checkpoints when due, checkpoints that load both as a
// learner and as a model for the native engine, weights that moved away
// from the initialization, and an engine serving the checkpoint's weights
// under the step's version.
func TestRunMechanics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := t.TempDir()
	cfg := tinyRun(out)
	probe := []int{1, 2, 3}
	var served []int64
	var lastGen engine.Sample
	cfg.OnWeights = func(v int64, eng engine.Engine) {
		served = append(served, v)
		if v != eng.WeightVersion() {
			t.Errorf("OnWeights(%d): the engine serves version %d", v, eng.WeightVersion())
		}
		res, err := eng.Generate(ctx, []engine.Request{{Prompt: probe, Params: engine.SamplingParams{MaxTokens: 4}}})
		if err != nil {
			t.Fatal(err)
		}
		lastGen = res[0].Samples[0]
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 5 || res.WeightVersion != 5 {
		t.Errorf("result: %d steps, serving version %d; want 5 and 5", res.Steps, res.WeightVersion)
	}
	if want := []int64{0, 1, 2, 3, 4, 5}; !slices.Equal(served, want) {
		t.Errorf("weight versions pushed %v, want %v", served, want)
	}

	lines := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
	if len(lines) != 5 {
		t.Fatalf("%d metrics lines, want 5", len(lines))
	}
	for i, m := range lines {
		step := i + 1
		phase := "rl"
		if step <= 2 {
			phase = "warmup"
		}
		if m["step"] != float64(step) || m["phase"] != phase || m["weight_version"] != float64(step) {
			t.Errorf("line %d: step %v phase %v weight_version %v; want %d, %s, %d", i+1, m["step"], m["phase"], m["weight_version"], step, phase, step)
		}
		r, has := m["reward_mean"]
		if !has || (phase == "rl") != (r != nil) {
			t.Errorf("line %d: reward_mean %v (present %v); want a number on RL steps, null on warm-up", i+1, r, has)
		}
		_, hasEval := m["eval_accuracy"]
		if wantEval := step == 2 || step == 4 || step == 5; hasEval != wantEval {
			t.Errorf("line %d: eval_accuracy present %v, want %v", i+1, hasEval, wantEval)
		}
		if !(m["tokens"].(float64) > 0) {
			t.Errorf("line %d: tokens %v", i+1, m["tokens"])
		}
	}

	for _, step := range []int{4, 5} {
		dir := filepath.Join(out, "checkpoints", fmt.Sprintf("step-%d", step))
		for _, f := range []string{"config.json", "model.safetensors", learner.OptimizerFile, learner.StateFile, "tokenizer.json", DriverStateFile} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("checkpoint: %v", err)
			}
		}
	}
	last := filepath.Join(out, "checkpoints", "step-5")
	if res.LastCheckpointDir != last {
		t.Errorf("last checkpoint %q, want %q", res.LastCheckpointDir, last)
	}
	var ds driverState
	js, err := os.ReadFile(filepath.Join(last, DriverStateFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &ds); err != nil {
		t.Fatal(err)
	}
	if ds.Step != 5 || ds.TrainCursor != 2*8+3*4 || ds.WeightVersion != 5 {
		t.Errorf("driver state %+v, want step 5, cursor 28, version 5", ds)
	}

	l := cfg.Learner
	l.Model, l.Seed = cfg.Model, cfg.Seed
	ln, err := learner.New(l)
	if err != nil {
		t.Fatal(err)
	}
	init := ln.PolicyWeights()
	if err := ln.Load(last); err != nil {
		t.Fatal(err)
	}
	if ln.Step() != 5 {
		t.Errorf("restored learner at step %d, want 5", ln.Step())
	}
	moved := 0
	for name, w := range ln.PolicyWeights() {
		if !slices.Equal(w, init[name]) {
			moved++
		}
	}
	if moved == 0 {
		t.Error("no tensor moved away from the initialization")
	}

	// The engine served exactly the checkpoint's weights at the end.
	eng, err := native.Load(last, native.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	got, err := eng.Generate(ctx, []engine.Request{{Prompt: probe, Params: engine.SamplingParams{MaxTokens: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	if s := got[0].Samples[0]; !slices.Equal(s.TokenIDs, lastGen.TokenIDs) || !slices.Equal(s.LogProbs, lastGen.LogProbs) {
		t.Errorf("checkpoint generates %v %v, the run's engine generated %v %v", s.TokenIDs, s.LogProbs, lastGen.TokenIDs, lastGen.LogProbs)
	}
	if _, err := model.Load(last, cpu.New()); err != nil {
		t.Errorf("checkpoint as a model: %v", err)
	}
}

// Config errors stop the run before anything starts, naming the field.
func TestRunRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		want string
		edit func(*Config)
	}{
		{"out", func(c *Config) { c.Out = "" }},
		{"exactly one of model and model_dir", func(c *Config) { c.ModelDir = "x" }},
		{"group_size", func(c *Config) { c.GroupSize = 0 }},
		{"max_tokens", func(c *Config) { c.MaxTokens = 0 }},
		{"prompt_template", func(c *Config) { c.PromptTemplate = "{{.Nope}}" }},
		{"answer_template", func(c *Config) { c.AnswerTemplate = "{{.Question}}" }},
		{"learner config: lr", func(c *Config) { c.Learner.LR = -1 }},
		{"warmup_lr", func(c *Config) { c.WarmupLR = 0 }},
	} {
		out := filepath.Join(t.TempDir(), "run")
		c := tinyRun(out)
		tc.edit(&c)
		if c.Out != "" {
			c.Out = out
		}
		_, err := Run(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: the run directory was created for a refused config", tc.want)
		}
	}
}

// A run resumed from its step-4 checkpoint reaches the same step-5
// weights as the uninterrupted run (CPU, fixed seed), and appends to the
// metrics of the run directory it continues in. Reward-weighted SFT makes
// every sample count even when the tiny model earns no reward, so a wrong
// data cursor or lost optimizer state would show in the weights.
func TestResumeReachesSameWeights(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(out string) Config {
		c := tinyRun(out)
		c.Learner.Algorithm = learner.RWSFT
		return c
	}
	full := t.TempDir()
	if _, err := Run(ctx, run(full)); err != nil {
		t.Fatal(err)
	}
	resumed := t.TempDir()
	cfg := run(resumed)
	cfg.Resume = filepath.Join(full, "checkpoints", "step-4")
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 5 {
		t.Errorf("resumed run ended at step %d, want 5", res.Steps)
	}
	lines := readMetrics(t, filepath.Join(resumed, "metrics.jsonl"))
	if len(lines) != 1 || lines[0]["step"] != float64(5) {
		t.Errorf("resumed run wrote %d metrics lines (%v), want one for step 5", len(lines), lines)
	}
	a, err := model.Load(filepath.Join(full, "checkpoints", "step-5"), cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	b, err := model.Load(filepath.Join(resumed, "checkpoints", "step-5"), cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	wb := b.Weights()
	for name, w := range a.Weights() {
		if !slices.Equal(w, wb[name]) {
			t.Errorf("tensor %s differs between the uninterrupted and the resumed run", name)
		}
	}

	bad := tinyRun(t.TempDir())
	bad.Seed = 2
	bad.Resume = cfg.Resume
	if _, err := Run(ctx, bad); err == nil || !strings.Contains(err.Error(), "seed") {
		t.Errorf("resume with another seed: error %v, want one naming the seed", err)
	}

	// A checkpoint whose weights no longer match its manifest is never
	// trained on.
	weights := filepath.Join(cfg.Resume, "model.safetensors")
	wbytes, err := os.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	wbytes[len(wbytes)/2] ^= 0xff
	if err := os.WriteFile(weights, wbytes, 0o644); err != nil {
		t.Fatal(err)
	}
	corrupt := run(t.TempDir())
	corrupt.Resume = cfg.Resume
	if _, err := Run(ctx, corrupt); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "model.safetensors") {
		t.Errorf("resume from a corrupt checkpoint: error %v, want ErrCorrupt naming model.safetensors", err)
	}
}

// loadRun maps built-in recipe name with sets onto a Config writing to a
// fresh folder, out.
func loadRun(t *testing.T, name string, sets []string) (cfg Config, out string) {
	t.Helper()
	l, err := recipes.Load(name, sets)
	if err != nil {
		t.Fatal(err)
	}
	out = t.TempDir()
	cfg, err = FromRecipe(l, out)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, out
}

// A checkpoint the caller has just verified (Config.ResumeVerified, as
// rlnode run --resume sets after NewestIntact) is not read for its
// checksums once more at the run's start: a manifest line naming a
// missing file fails the check where the run makes it, and passes where
// the caller said it had checked.
func TestResumeVerifiedIsNotCheckedAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := t.TempDir()
	if _, err := Run(ctx, tinyRun(full)); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(full, "checkpoints", "step-4")
	f, err := os.OpenFile(filepath.Join(ck, ManifestFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(f, "%064x  not-written.bin\n", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := tinyRun(t.TempDir())
	cfg.Resume = ck
	if _, err := Run(ctx, cfg); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "not-written.bin") {
		t.Fatalf("resume, not verified by the caller: error %v, want ErrCorrupt naming not-written.bin", err)
	}
	cfg = tinyRun(t.TempDir())
	cfg.Resume, cfg.ResumeVerified = ck, true
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("resume verified by the caller: %v", err)
	}
	if res.Steps != 5 {
		t.Errorf("resumed run ended at step %d, want 5", res.Steps)
	}
}
