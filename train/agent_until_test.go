package train

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
)

// groupFilterWeights: a solved episode's turns weigh n/k (n episodes in
// its group, k solved), the rest 0, whatever the rows' order.
func TestGroupFilterWeights(t *testing.T) {
	var turns []data.Turn
	ep := func(id string, group int64, ret float64, steps int) {
		for k := range steps {
			turns = append(turns, data.Turn{EpisodeID: id, GroupID: group, Turn: int32(k), Reward: ret})
		}
	}
	ep("g0-a", 0, 8.5, 2) // group 0: one of four solved
	ep("g0-b", 0, 4.5, 2)
	ep("g0-c", 0, 4.5, 1)
	ep("g0-d", 0, -3, 3)
	ep("g1-a", 1, 8.5, 2) // group 1: both solved
	ep("g1-b", 1, 8, 1)
	ep("g2-a", 2, 4.5, 2) // group 2: none
	ep("g2-b", 2, 7.9, 2)
	cases := []struct {
		name string
		rows []int
		want []float64
	}{
		{"every row", []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, []float64{4, 4, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0}},
		{"some rows, shuffled", []int{10, 1, 13, 8, 4}, []float64{1, 4, 0, 1, 0}},
		{"none", nil, []float64{}},
	}
	for _, c := range cases {
		if got := groupFilterWeights(turns, c.rows, 8); !slices.Equal(got, c.want) {
			t.Errorf("%s: weights %v, want %v", c.name, got, c.want)
		}
	}
}

// tinyEquations is agent_equations with a tiny model, a 60-step warm-up
// at a high rate (the format learned, a few answers right by step 50)
// and 2 RL steps.
func tinyEquations(t *testing.T, out string, sets ...string) Config {
	t.Helper()
	t.Setenv("RLNODE_HOME", t.TempDir())
	return tinyAgentRecipe(t, "agent_equations", out, []string{
		"sft.steps=60", "sft.batch_size=16", "sft.lr=1e-2", "schedule.steps=2", "schedule.eval_every=20", "schedule.checkpoint_every=1",
		"eval.held_out=8", "algorithm.group_size=4", "algorithm.batch_prompts=4", "algorithm.micro_batch=32",
	}, sets)
}

// sft.until: probes that never reach the threshold leave the run as it
// is without them (same weights at the end; each probe's figure in its
// warm-up line); a threshold the k-th probe reaches ends the warm-up at
// that step — evaluated there, RL's steps after it — and a run resumed
// from one of its RL checkpoints keeps that warm-up and ends with the same
// weights.
func TestWarmupUntil(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run := func(cfg Config) Result {
		t.Helper()
		res, err := Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	model := func(res Result) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(res.LastCheckpointDir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	plain := run(tinyEquations(t, t.TempDir()))
	never := tinyEquations(t, t.TempDir(), "sft.until={completion: 1, every: 10, episodes: 32}")
	nres := run(never)
	if !slices.Equal(model(nres), model(plain)) {
		t.Errorf("a run whose probes never reach the threshold ends with other weights than the run without probes")
	}
	probes := map[int]float64{}
	for _, m := range readMetrics(t, filepath.Join(never.Out, "metrics.jsonl")) {
		step := int(m["step"].(float64))
		c, ok := m["warmup_probe"].(float64)
		if want := step%10 == 0 && step < 60; ok != want {
			t.Errorf("step %d: warmup_probe %v, want one: %v", step, m["warmup_probe"], want)
		}
		if ok {
			probes[step] = c
		}
	}
	end := 0
	for step := 10; step < 60; step += 10 {
		if probes[step] > 0 {
			end = step
			break
		}
	}
	if end == 0 {
		t.Fatalf("no probe solved a training task (%v): the setup no longer learns enough to test the threshold", probes)
	}
	// The first probe with a completion above 0, as the threshold.
	out := t.TempDir()
	early := tinyEquations(t, out, "sft.until={completion: "+jsonFloat(probes[end])+", every: 10, episodes: 32}")
	eres := run(early)
	ms := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
	if len(ms) != end+2 {
		t.Fatalf("%d metrics lines, want %d warm-up steps and 2 RL steps", len(ms), end)
	}
	for i, m := range ms {
		phase := "warmup"
		if i >= end {
			phase = "rl"
		}
		if m["phase"] != phase {
			t.Errorf("step %v: phase %v, want %s", m["step"], m["phase"], phase)
		}
	}
	if _, ok := ms[end-1]["eval_accuracy"]; !ok {
		t.Errorf("the warm-up's last step %d has no evaluation", end)
	}
	if eres.PostWarmupEval < 0 {
		t.Errorf("post-warm-up evaluation %v: not recorded", eres.PostWarmupEval)
	}
	first := filepath.Join(out, "checkpoints", "step-"+jsonFloat(float64(end+1)))
	js, err := os.ReadFile(filepath.Join(first, DriverStateFile))
	if err != nil {
		t.Fatal(err)
	}
	var ds driverState
	if err := json.Unmarshal(js, &ds); err != nil || ds.WarmupSteps == nil || *ds.WarmupSteps != end {
		t.Fatalf("driver state %s (%v): want warmup_steps %d", js, err, end)
	}
	if w, ok := EndedWarmup(first); !ok || w != end {
		t.Errorf("EndedWarmup(%s) = %d, %v; want %d, true", first, w, ok, end)
	}
	if w, ok := EndedWarmup(nres.LastCheckpointDir); ok {
		t.Errorf("EndedWarmup of a run whose warm-up ran its planned steps = %d, true; want false", w)
	}
	resumed := tinyEquations(t, t.TempDir(), "sft.until={completion: "+jsonFloat(probes[end])+", every: 10, episodes: 32}")
	resumed.Resume = first
	rres := run(resumed)
	if !slices.Equal(model(rres), model(eres)) {
		t.Errorf("resumed from %s: other weights at the end than the run it resumed", first)
	}
	rms := readMetrics(t, filepath.Join(resumed.Out, "metrics.jsonl"))
	if len(rms) == 0 || rms[len(rms)-1]["phase"] != "rl" || int(rms[len(rms)-1]["step"].(float64)) != end+2 {
		t.Errorf("resumed run's last line %v: want RL step at %d", rms[len(rms)-1:], end+2)
	}
}

func jsonFloat(x float64) string {
	b, _ := json.Marshal(x)
	return string(b)
}
