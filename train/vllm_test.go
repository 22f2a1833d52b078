package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// The fake servers cannot learn: these tests check the plumbing between
// the driver, the learner and vLLM servers (generation spread over the
// servers, one reload per learner step with its checkpoint directory,
// versions checked, errors naming the server), not learning.

// vllmRun is tinyRun generating on two fake vLLM servers.
func vllmRun(t *testing.T) (Config, *vllmtest.Server, *vllmtest.Server) {
	t.Helper()
	cfg := tinyRun(t.TempDir())
	opts := vllmtest.Options{Model: "tiny", Vocab: cfg.Model.VocabSize}
	a, b := vllmtest.New(opts), vllmtest.New(opts)
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	cfg.VLLM = &VLLM{Servers: []string{a.URL(), b.URL()}, Model: "tiny", ReloadTimeout: 5 * time.Second}
	return cfg, a, b
}

func TestRunOnVLLM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, a, b := vllmRun(t)
	var served []int64
	cfg.OnWeights = func(v int64, eng engine.Engine) {
		served = append(served, v)
		if eng.WeightVersion() != v {
			t.Errorf("OnWeights(%d): the client serves version %d", v, eng.WeightVersion())
		}
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.Generated() == 0 || b.Generated() == 0 {
		t.Errorf("generation requests answered: %s %d, %s %d; want both > 0", a.URL(), a.Generated(), b.URL(), b.Generated())
	}
	dir := filepath.Join(cfg.Out, "vllm-weights")
	// One reload at start and one per learner step (warm-up and RL).
	want := 1 + cfg.WarmupSteps + cfg.Steps
	for _, s := range []*vllmtest.Server{a, b} {
		rl := s.Reloads()
		if len(rl) != want {
			t.Fatalf("%s: %d reloads %+v, want %d", s.URL(), len(rl), rl, want)
		}
		for i, r := range rl {
			if r.Version != strconv.FormatInt(served[i], 10) || r.Path != filepath.Join(dir, "step-"+r.Version) {
				t.Errorf("%s reload %d = %+v, want version %d from %s/step-%d", s.URL(), i, r, served[i], dir, served[i])
			}
		}
	}
	if last := served[len(served)-1]; res.WeightVersion != last || last != int64(cfg.WarmupSteps+cfg.Steps) {
		t.Errorf("final version %d, last served %d, want %d", res.WeightVersion, last, cfg.WarmupSteps+cfg.Steps)
	}
	// The servers' directory holds whole checkpoints; older ones are pruned.
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 {
		t.Errorf("%s holds %d entries, want the 2 newest step directories", dir, len(ents))
	}
	last := filepath.Join(dir, "step-"+strconv.FormatInt(res.WeightVersion, 10))
	// It holds the model and nothing else vLLM would read, with the run's
	// final weights: it loads
	// as a native engine and matches the run's last checkpoint.
	files, err := os.ReadDir(last)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name())
	}
	if got := strings.Join(names, " "); got != "config.json model.safetensors tokenizer.json" {
		t.Errorf("%s holds %s, want config.json model.safetensors tokenizer.json", last, got)
	}
	eng, err := native.Load(last, native.Config{MaxBatch: 4, MaxStepTokens: 256})
	if err != nil {
		t.Fatalf("the reloaded directory does not load as a model: %v", err)
	}
	eng.Close()
	final := filepath.Join(cfg.Out, "checkpoints", "step-"+strconv.FormatInt(res.WeightVersion, 10))
	if !sameWeights(weightsOf(t, last), weightsOf(t, final)) {
		t.Errorf("%s holds other weights than the run's last checkpoint %s", last, final)
	}
	m := readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))
	if len(m) != cfg.WarmupSteps+cfg.Steps {
		t.Fatalf("%d metrics lines, want %d", len(m), cfg.WarmupSteps+cfg.Steps)
	}
	for _, k := range []string{"step", "reward_mean"} {
		if _, ok := m[len(m)-1][k]; !ok {
			t.Errorf("the last metrics line has no %s: %v", k, m[len(m)-1])
		}
	}
}

// A server that goes down mid-run: its requests move to the other server,
// and the next reload stops the run with an error naming its URL.
func TestVLLMServerDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, a, b := vllmRun(t)
	downAt := int64(cfg.WarmupSteps + 1)
	var aAt, bAt int
	cfg.OnWeights = func(v int64, _ engine.Engine) {
		if v == downAt {
			b.Close()
			aAt, bAt = a.Generated(), b.Generated()
		}
	}
	_, err := Run(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), b.URL()) {
		t.Fatalf("Run: err = %v, want one naming %s", err, b.URL())
	}
	t.Logf("Run: %v", err)
	if a.Generated() <= aAt || b.Generated() != bAt {
		t.Errorf("after %s went down: %s answered %d more, it %d more; want its requests on the other", b.URL(), a.URL(), a.Generated()-aAt, b.Generated()-bAt)
	}
	if rl := a.Reloads(); len(rl) != int(downAt)+1 {
		t.Errorf("%s: %d reloads, want %d (the one after the failed one is not made)", a.URL(), len(rl), downAt+1)
	}
}

// A server that never confirms a reload stops the step within
// ReloadTimeout with an error naming it; one that is unreachable at start
// stops the run before any training.
func TestVLLMReloadErrors(t *testing.T) {
	t.Run("no confirmation", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cfg, _, b := vllmRun(t)
		cfg.VLLM.ReloadTimeout = 300 * time.Millisecond
		cfg.OnWeights = func(v int64, _ engine.Engine) {
			if v == 1 {
				b.HangReloads()
			}
		}
		_, err := Run(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), b.URL()) || !strings.Contains(err.Error(), "finish") || !strings.Contains(err.Error(), "did not confirm the reload within 300ms") {
			t.Fatalf("Run: err = %v, want the finish step of %s", err, b.URL())
		}
		t.Logf("Run: %v", err)
	})
	t.Run("refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cfg, a, _ := vllmRun(t)
		a.RefuseReloads(true)
		_, err := Run(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), a.URL()) {
			t.Fatalf("Run: err = %v, want one naming %s", err, a.URL())
		}
		t.Logf("Run: %v", err)
	})
	t.Run("unreachable", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cfg, _, b := vllmRun(t)
		b.Close()
		_, err := Run(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), b.URL()) {
			t.Fatalf("Run: err = %v, want one naming %s", err, b.URL())
		}
		t.Logf("Run: %v", err)
		if _, err := os.Stat(filepath.Join(cfg.Out, "vllm-weights")); err == nil {
			t.Errorf("weights were written before the servers were checked")
		}
	})
}

// Servers answering token ids outside the policy's vocabulary stop the
// run with an error naming a server and the id, not at the learner (before:
// "batch: ... token id out of range", no server named).
func TestVLLMOutOfVocabulary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, a, b := vllmRun(t)
	for _, s := range []*vllmtest.Server{a, b} {
		for range 1000 {
			s.AddFaults(vllmtest.FaultOutOfVocab)
		}
	}
	_, err := Run(ctx, cfg)
	if err == nil || !(strings.Contains(err.Error(), a.URL()) || strings.Contains(err.Error(), b.URL())) ||
		!strings.Contains(err.Error(), "outside the vocabulary [0, "+strconv.Itoa(cfg.Model.VocabSize)+")") {
		t.Fatalf("Run: err = %v, want one naming a server and the vocabulary", err)
	}
	t.Logf("Run: %v", err)
}

func TestVLLMConfigErrors(t *testing.T) {
	fb := &VLLM{Servers: []string{"http://127.0.0.1:2"}, Model: "f"}
	for _, tc := range []struct {
		name string
		mlmt bool // a trainable feedback policy
		edit func(*Config)
		want string
	}{
		{"no servers", false, func(c *Config) { c.VLLM.Servers = nil }, "VLLM.Servers is empty"},
		{"no model", false, func(c *Config) { c.VLLM.Model = "" }, "VLLM.Model is empty"},
		{"rollout too", false, func(c *Config) { c.Rollout = &Rollout{Replicas: 1} }, "VLLM and Rollout"},
		{"negative keep", false, func(c *Config) { c.VLLM.Keep = -1 }, "negative"},
		{"async multi-turn", true, func(c *Config) { c.FeedbackVLLM, c.MaxStaleness = fb, 1 }, "single-turn"},
		{"feedback without servers", true, func(c *Config) {}, "needs vLLM servers of its own"},
		{"feedback servers without feedback", false, func(c *Config) { c.FeedbackVLLM = fb }, "no feedback policy"},
		{"feedback servers without solver servers", true, func(c *Config) { c.VLLM, c.FeedbackVLLM = nil, fb }, "FeedbackVLLM without VLLM"},
		{"a server for both", true, func(c *Config) { c.FeedbackVLLM = &VLLM{Servers: c.VLLM.Servers, Model: "f"} }, "also serves the solver"},
		{"one directory for both", true, func(c *Config) {
			c.VLLM.Dir = "/w"
			c.FeedbackVLLM = &VLLM{Servers: fb.Servers, Model: "f", Dir: "/w"}
		}, "own directory"},
		{"feedback model missing", true, func(c *Config) { c.FeedbackVLLM = &VLLM{Servers: fb.Servers} }, "FeedbackVLLM.Model is empty"},
		{"feedback on actors too", true, func(c *Config) { c.FeedbackVLLM, c.FeedbackRollout = fb, &Rollout{Replicas: 1} }, "FeedbackVLLM and FeedbackRollout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyRun(t.TempDir())
			if tc.mlmt {
				cfg = tinyMLMT(t.TempDir())
			}
			cfg.VLLM = &VLLM{Servers: []string{"http://127.0.0.1:1"}, Model: "m"}
			tc.edit(&cfg)
			_, err := cfg.validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate: err = %v, want %q", err, tc.want)
			}
		})
	}
}

// Asynchronous training on vLLM (max staleness 1): the next step's batch
// generates while a step trains; every step still reloads the servers
// once and in order, and every step's samples are at most one version
// behind its on-policy version (weight_lag).
func TestRunOnVLLMAsync(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, a, b := vllmRun(t)
	cfg.Steps = 6
	cfg.MaxStaleness = 1
	cfg.Learner.Loss.TISCap = 2
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	steps := cfg.WarmupSteps + cfg.Steps
	if res.Steps != steps || res.WeightVersion != int64(steps) {
		t.Errorf("steps %d, version %d: want %d and %d", res.Steps, res.WeightVersion, steps, steps)
	}
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
	lags := map[int]int{}
	for i, m := range readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl")) {
		if int(m["step"].(float64)) != i+1 {
			t.Fatalf("line %d: step %v", i+1, m["step"])
		}
		if m["phase"] != "rl" {
			continue
		}
		lag, ok := m["weight_lag"].(float64)
		if !ok || lag < 0 || lag > 1 {
			t.Errorf("step %d: weight_lag %v, want 0 or 1", i+1, m["weight_lag"])
		}
		lags[int(lag)]++
	}
	if lags[0]+lags[1] != cfg.Steps {
		t.Errorf("weight_lag on %d RL steps, want %d", lags[0]+lags[1], cfg.Steps)
	}
	t.Logf("weight lag per RL step: %v", lags)
}

// MLMT with a trainable feedback policy on vLLM: the solver's turns go to
// its two servers and the feedback turns to the feedback policy's two;
// each set reloads its own policy's checkpoint once per step (from its own
// directory), and the feedback servers' last reload holds the run's final
// feedback weights.
func TestMLMTFeedbackOnVLLM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tinyMLMT(t.TempDir())
	servers := make([]*vllmtest.Server, 4)
	for i := range servers {
		servers[i] = vllmtest.New(vllmtest.Options{Model: "tiny", Vocab: cfg.Model.VocabSize})
		defer servers[i].Close()
	}
	cfg.VLLM = &VLLM{Servers: []string{servers[0].URL(), servers[1].URL()}, Model: "tiny", ReloadTimeout: 5 * time.Second}
	cfg.FeedbackVLLM = &VLLM{Servers: []string{servers[2].URL(), servers[3].URL()}, Model: "tiny", ReloadTimeout: 5 * time.Second}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	steps := cfg.WarmupSteps + cfg.Steps
	if n := len(readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))); n != steps {
		t.Errorf("%d metrics lines, want %d", n, steps)
	}
	for i, s := range servers {
		dir := filepath.Join(cfg.Out, "vllm-weights")
		if i >= 2 {
			dir += "-feedback"
		}
		rl := s.Reloads()
		if s.Generated() == 0 || len(rl) != 1+steps {
			t.Fatalf("%s: %d requests answered, %d reloads; want > 0 and %d", s.URL(), s.Generated(), len(rl), 1+steps)
		}
		for v, r := range rl {
			if want := filepath.Join(dir, "step-"+strconv.Itoa(v)); r.Path != want || r.Version != strconv.Itoa(v) {
				t.Errorf("%s: reload %d = %+v, want version %d from %s", s.URL(), v, r, v, want)
			}
		}
	}
	last := filepath.Join(cfg.Out, "vllm-weights-feedback", "step-"+strconv.Itoa(steps))
	final := filepath.Join(res.LastCheckpointDir, FeedbackDir)
	if !sameWeights(weightsOf(t, last), weightsOf(t, final)) {
		t.Errorf("%s holds other weights than the run's final feedback checkpoint %s", last, final)
	}
	if sameWeights(weightsOf(t, last), weightsOf(t, filepath.Join(cfg.Out, "vllm-weights", "step-"+strconv.Itoa(steps)))) {
		t.Error("the feedback servers reloaded the solver's weights")
	}
}

// Multi-turn episodes without a feedback policy (SCoRe; MLMT with static
// feedback) generate every turn on the servers and reload once per step.
func TestMultiTurnOnVLLM(t *testing.T) {
	for _, ep := range []string{EpisodeSCoRe, EpisodeMLMT} {
		t.Run(ep, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg := tinyMLMT(t.TempDir())
			cfg.Feedback = nil
			if ep == EpisodeSCoRe {
				cfg.Episode, cfg.ReviewTemplate, cfg.ScoreAlpha = EpisodeSCoRe, "check and answer again", 10
			}
			opts := vllmtest.Options{Model: "tiny", Vocab: cfg.Model.VocabSize}
			a, b := vllmtest.New(opts), vllmtest.New(opts)
			defer a.Close()
			defer b.Close()
			cfg.VLLM = &VLLM{Servers: []string{a.URL(), b.URL()}, Model: "tiny", ReloadTimeout: 5 * time.Second}
			if _, err := Run(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			steps := cfg.WarmupSteps + cfg.Steps
			if n := len(readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl"))); n != steps {
				t.Errorf("%d metrics lines, want %d", n, steps)
			}
			for _, s := range []*vllmtest.Server{a, b} {
				if s.Generated() == 0 || len(s.Reloads()) != 1+steps {
					t.Errorf("%s: %d requests answered, %d reloads; want > 0 and %d", s.URL(), s.Generated(), len(s.Reloads()), 1+steps)
				}
			}
		})
	}
}

// modelOnly keeps what vLLM loads and drops the learner's other
// files (vLLM would read any *.safetensors as model weights).
func TestModelOnly(t *testing.T) {
	for _, tc := range []struct {
		maxShard int64 // < 0: no model
		extra    []string
		want     []string
		err      string
	}{
		{0, []string{"config.json", "optimizer.safetensors", "reference.safetensors", "value_head.safetensors", "learner_state.json"},
			[]string{"config.json", "model.safetensors"}, ""},
		{16, []string{"config.json", "optimizer.safetensors"},
			[]string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"}, ""},
		{-1, []string{"config.json", "optimizer.safetensors"}, nil, "no model"},
	} {
		dir := t.TempDir()
		if tc.maxShard >= 0 {
			var ts []safetensors.Tensor
			for _, n := range []string{"a", "b"} {
				tt, err := safetensors.FromFloat32(n, safetensors.F32, []int{4}, []float32{1, 2, 3, 4})
				if err != nil {
					t.Fatal(err)
				}
				ts = append(ts, tt)
			}
			if err := safetensors.WriteCheckpoint(dir, ts, tc.maxShard); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range tc.extra {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		err := modelOnly(context.Background(), dir)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err = %v, want %q", tc.extra, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.extra, err)
		}
		ents, _ := os.ReadDir(dir)
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("left %v, want %v", got, tc.want)
		}
	}
}

// A PPO checkpoint's value head (v_head.* in model.safetensors) is
// stripped; the model's tensors stay as they were.
func TestModelOnlyStripsValueHead(t *testing.T) {
	dir := t.TempDir()
	var ts []safetensors.Tensor
	for _, tc := range []struct {
		name  string
		shape []int
	}{{"model.embed_tokens.weight", []int{2, 2}}, {"v_head.summary.weight", []int{1, 2}}, {"v_head.summary.bias", []int{1}}} {
		n := 1
		for _, d := range tc.shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(i + 1)
		}
		tt, err := safetensors.FromFloat32(tc.name, safetensors.F32, tc.shape, v)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tt)
	}
	if err := safetensors.WriteCheckpoint(dir, ts, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A stop before the rewrite gives up, leaving the model as it was.
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if err := modelOnly(stopped, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("modelOnly stopped: %v, want context.Canceled", err)
	}
	if ck, err := safetensors.OpenCheckpoint(dir); err != nil || len(ck.Names()) != 3 {
		t.Fatalf("after a stopped rewrite: %v", err)
	}
	if err := modelOnly(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ck.Names(), " "); got != "model.embed_tokens.weight" {
		t.Fatalf("tensors left: %s", got)
	}
	tt, _, _ := ck.Tensor("model.embed_tokens.weight")
	if v, err := tt.Float32(); err != nil || len(v) != 4 || v[0] != 1 || v[3] != 4 {
		t.Errorf("the model tensor changed: %v %v", v, err)
	}
}

// PPO on vLLM: several optimizer steps per run step (epochs ×
// mini-batches) still make one version per run step, and the critic's
// value head stays out of what the servers reload.
func TestPPOOnVLLM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, a, _ := vllmRun(t)
	cfg.Learner.Algorithm = learner.PPO
	cfg.Learner.MiniBatches, cfg.Learner.Epochs = 2, 2
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rl := a.Reloads()
	if len(rl) != 1+cfg.WarmupSteps+cfg.Steps {
		t.Fatalf("%d reloads %+v, want %d", len(rl), rl, 1+cfg.WarmupSteps+cfg.Steps)
	}
	for i, r := range rl {
		if r.Version != strconv.Itoa(i) {
			t.Errorf("reload %d is version %s, want the run step %d", i, r.Version, i)
		}
	}
	hasHead := func(dir string) bool {
		t.Helper()
		ck, err := safetensors.OpenCheckpoint(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, _, ok := ck.Tensor(model.ValueHeadWeight)
		return ok
	}
	v := strconv.FormatInt(res.WeightVersion, 10)
	if !hasHead(filepath.Join(cfg.Out, "checkpoints", "step-"+v)) {
		t.Fatal("the run's checkpoint has no value head: not a PPO run?")
	}
	if hasHead(filepath.Join(cfg.Out, "vllm-weights", "step-"+v)) {
		t.Error("the servers' checkpoint holds the value head")
	}
}

// A step whose weight push fails (an engine down) is checkpointed before
// the run stops, with its metrics line: resumed from it, the run ends
// with the weights of a run that never failed. (Before, the step and
// every step since the last planned checkpoint were lost.)
func TestEngineFailureAfterAStepIsCheckpointed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rw := func(cfg Config) Config {
		cfg.Learner.Algorithm = learner.RWSFT // every sample counts: a lost step would show in the weights
		return cfg
	}
	full, _, _ := vllmRun(t)
	full = rw(full)
	if _, err := Run(ctx, full); err != nil {
		t.Fatal(err)
	}

	cfg, _, b := vllmRun(t)
	cfg = rw(cfg)
	cfg.OnWeights = func(v int64, _ engine.Engine) {
		if v == 2 {
			b.Close() // step 3 generates on the other server; its push fails
		}
	}
	_, err := Run(ctx, cfg)
	step3 := filepath.Join(cfg.Out, "checkpoints", "step-3")
	if err == nil || !strings.Contains(err.Error(), b.URL()) || !strings.Contains(err.Error(), "(step 3, trained before it, is checkpointed in "+step3+")") {
		t.Fatalf("Run: %v; want the push's failure naming %s, and step 3 checkpointed", err, b.URL())
	}
	if err := VerifyCheckpoint(step3); err != nil {
		t.Fatalf("the failed step's checkpoint: %v", err)
	}
	if m := readMetrics(t, filepath.Join(cfg.Out, "metrics.jsonl")); len(m) != 3 || m[2]["step"] != float64(3) {
		t.Errorf("metrics lines %v, want steps 1 to 3", m)
	}

	resumed, _, _ := vllmRun(t)
	resumed = rw(resumed)
	resumed.Resume = step3
	res, err := Run(ctx, resumed)
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 5 {
		t.Errorf("resumed run ended at step %d, want 5", res.Steps)
	}
	a, b2 := weightsOf(t, filepath.Join(full.Out, "checkpoints", "step-5")), weightsOf(t, filepath.Join(resumed.Out, "checkpoints", "step-5"))
	if !sameWeights(a, b2) {
		t.Error("the run resumed from the failed step's checkpoint ends with other weights than the uninterrupted run")
	}
}

// quickstart on vLLM servers as a stock vLLM runs them (main branch,
// VLLM_SERVER_DEV_MODE=1, no disk weight-transfer backend): each server
// reloads every learner step's checkpoint through collective_rpc
// reload_weights; with one server of each kind (weight_update auto) each
// gets its own route. Before, the run stopped at its first reload with
// the stock server's "Weight transfer not configured".
func TestQuickstartOnStockVLLM(t *testing.T) {
	for _, c := range []struct {
		name  string
		stock []bool // per server
	}{
		{"stock", []bool{true, true}},
		{"mixed", []bool{true, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var servers []*vllmtest.Server
			var urls []string
			for _, stock := range c.stock {
				s := vllmtest.New(vllmtest.Options{Model: "served", Vocab: 768, Stock: stock, ReadFiles: true})
				defer s.Close()
				servers = append(servers, s)
				urls = append(urls, strconv.Quote(s.URL()))
			}
			cfg, out := loadRun(t, "quickstart", []string{"deterministic=false", "engines.policy.kind=vllm",
				"engines.policy.vllm={servers: [" + strings.Join(urls, ", ") + "], model: served}",
				"sft.steps=1", "sft.batch_size=4", "schedule.steps=2", "schedule.eval_every=2", "eval.held_out=4",
				"algorithm.batch_prompts=2", "algorithm.group_size=2"})
			if cfg.VLLM.WeightUpdate != "auto" {
				t.Errorf("WeightUpdate %q from the recipe's default, want auto", cfg.VLLM.WeightUpdate)
			}
			var served []int64
			cfg.OnWeights = func(v int64, _ engine.Engine) { served = append(served, v) }
			res, err := Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(out, "vllm-weights")
			for i, s := range servers {
				rl := s.Reloads()
				if s.Generated() == 0 || len(rl) != len(served) || len(served) != 4 {
					t.Fatalf("%s: %d answered, reloads %+v for versions %v; want > 0 and one per version (4)", s.URL(), s.Generated(), rl, served)
				}
				for j, r := range rl {
					want := vllmtest.Reload{Path: filepath.Join(dir, "step-"+strconv.FormatInt(served[j], 10))}
					if !c.stock[i] {
						want.Version = strconv.FormatInt(served[j], 10) // the disk backend's finish carries it
					}
					if r != want {
						t.Errorf("%s reload %d = %+v, want %+v", s.URL(), j, r, want)
					}
				}
				// What the server read last is the run's final model.
				final := filepath.Join(out, "checkpoints", "step-"+strconv.FormatInt(res.WeightVersion, 10))
				got, want := s.Loaded().Weights, weightsOf(t, final)
				if len(got) == 0 || !sameWeights(got, weightsOf(t, rl[len(rl)-1].Path)) || !sameWeights(weightsOf(t, rl[len(rl)-1].Path), want) {
					t.Errorf("%s read %d tensors last, not the run's final weights", s.URL(), len(got))
				}
				calls := s.Calls()
				if c.stock[i] == slices.Contains(calls, "POST /start_weight_update") || c.stock[i] != slices.Contains(calls, "POST /collective_rpc") {
					t.Errorf("%s (stock %v) got calls %v", s.URL(), c.stock[i], calls)
				}
			}
		})
	}
}

// Servers that offer no route to reload a checkpoint (a vLLM whose
// reload_weights takes no path, without the disk backend) stop the run at
// its first reload, naming the server and how to start it.
func TestVLLMWithoutReloadRouteIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := vllmtest.New(vllmtest.Options{Model: "served", Vocab: 768, Stock: true, NoReloadPath: true})
	defer s.Close()
	cfg, _ := loadRun(t, "quickstart", []string{"deterministic=false", "engines.policy.kind=vllm",
		fmt.Sprintf("engines.policy.vllm={servers: [%q], model: served}", s.URL()),
		"sft.steps=1", "sft.batch_size=4", "schedule.steps=2", "eval.held_out=4",
		"algorithm.batch_prompts=2", "algorithm.group_size=2"})
	_, err := Run(ctx, cfg)
	for _, want := range []string{s.URL(), "weights_path", "VLLM_SERVER_DEV_MODE=1", `--weight-transfer-config '{"backend": "disk"}'`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
	}
	if n := s.Generated(); n != 0 {
		t.Errorf("%d requests answered before the first reload", n)
	}
}
