package learner

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/model"
)

// sftBatch is groupBatch as SFT sees it (the rewards are ignored).
func sftBatch() Batch {
	b := groupBatch()
	b.SampleLogProbs = nil
	return b
}

// scheduleConfig is GRPO with a 2-step warm-up to 1e-2 and a cosine to
// 1e-3 at RL optimizer step 6.
func scheduleConfig() Config {
	c := tinyConfig(GRPO)
	c.LR, c.MinLR, c.WarmupSteps, c.TotalSteps = 1e-2, 1e-3, 2, 6
	return c
}

// rlRates are scheduleConfig's rates at RL optimizer steps 0..7, by hand:
// warm-up 1e-2·(k+1)/2, then 1e-3 + 9e-3·(1+cos(π(k−2)/4))/2, then 1e-3.
var rlRates = []float64{5e-3, 1e-2, 1e-2,
	1e-3 + 9e-3*(1+math.Sqrt2/2)/2, 1e-3 + 9e-3/2, 1e-3 + 9e-3*(1-math.Sqrt2/2)/2, 1e-3, 1e-3}

func trainLR(t *testing.T, l *Learner, b Batch) float64 {
	t.Helper()
	st, err := l.Train(b)
	if err != nil {
		t.Fatal(err)
	}
	return st.LR
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

// After an SFT warm-up at its own constant rate, the RL schedule starts at
// its own step 0: warm-up, cosine, floor, counted from the switch.
func TestScheduleRestartsAtRL(t *testing.T) {
	for _, lora := range []bool{false, true} {
		c := scheduleConfig()
		if lora {
			c.LoRA = &model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"q_proj", "v_proj"}, Seed: 5}
		}
		scheduleAcrossSwitch(t, c)
	}

	// An SFT rate below min_lr does not lower the RL floor.
	l := newLearner(t, scheduleConfig())
	if err := l.SetAlgorithm(SFT, 1e-4); err != nil {
		t.Fatal(err)
	}
	trainLR(t, l, sftBatch())
	if err := l.SetAlgorithm(GRPO, 1e-2); err != nil {
		t.Fatal(err)
	}
	var last float64
	for range rlRates {
		last = trainLR(t, l, groupBatch())
	}
	if !near(last, 1e-3) {
		t.Errorf("floor after an SFT at 1e-4: %v, want min_lr 1e-3", last)
	}
}

// scheduleAcrossSwitch trains 3 SFT steps, then checks the RL rates (under
// LoRA the adapters start at the switch too).
func scheduleAcrossSwitch(t *testing.T, c Config) {
	t.Helper()
	l := newLearner(t, c)
	if err := l.SetAlgorithm(SFT, 5e-2); err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		if lr := trainLR(t, l, sftBatch()); lr != 5e-2 {
			t.Errorf("SFT step %d: lr %v, want the constant 5e-2", k, lr)
		}
	}
	if l.RLStart() != -1 {
		t.Errorf("RL start %d before the first RL step, want -1", l.RLStart())
	}
	if err := l.SetAlgorithm(GRPO, 1e-2); err != nil {
		t.Fatal(err)
	}
	for k, want := range rlRates {
		if lr := trainLR(t, l, groupBatch()); !near(lr, want) {
			t.Errorf("RL step %d (optimizer step %d): lr %v, want %v", k, 3+k, lr, want)
		}
	}
	if l.RLStart() != 3 {
		t.Errorf("RL start %d, want 3", l.RLStart())
	}
	if (c.LoRA != nil) != (l.Adapter() != nil) {
		t.Errorf("lora %v: adapters %v after the RL steps", c.LoRA != nil, l.Adapter())
	}
}

// Mini-batches and epochs are optimizer steps of the schedule: the last
// mini-batch's rate is reported.
func TestScheduleCountsOptimizerSteps(t *testing.T) {
	c := scheduleConfig()
	c.MiniBatches = 2
	l := newLearner(t, c)
	for k := range 4 {
		if lr, want := trainLR(t, l, groupBatch()), rlRates[2*k+1]; !near(lr, want) {
			t.Errorf("Train %d: lr %v, want RL step %d's %v", k, lr, 2*k+1, want)
		}
	}
}

// A checkpoint keeps the RL phase's start: resumed in the warm-up, at its
// end (the driver then sets the RL algorithm without SFT first), or in
// the RL phase, the rates and weights go on as without the stop.
func TestScheduleSurvivesCheckpoint(t *testing.T) {
	const sftSteps, rlSteps = 2, 5
	straight := newLearner(t, scheduleConfig())
	var want []float64
	if err := straight.SetAlgorithm(SFT, 5e-2); err != nil {
		t.Fatal(err)
	}
	for range sftSteps {
		want = append(want, trainLR(t, straight, sftBatch()))
	}
	if err := straight.SetAlgorithm(GRPO, 1e-2); err != nil {
		t.Fatal(err)
	}
	for range rlSteps {
		want = append(want, trainLR(t, straight, groupBatch()))
	}
	for stop := 1; stop < sftSteps+rlSteps; stop++ {
		a := newLearner(t, scheduleConfig())
		dir := t.TempDir()
		run := func(l *Learner, from, to int) {
			for k := from; k < to; k++ {
				alg, lr, b := SFT, 5e-2, sftBatch()
				if k >= sftSteps {
					alg, lr, b = GRPO, 1e-2, groupBatch()
				}
				if k == from || k == sftSteps {
					if err := l.SetAlgorithm(alg, lr); err != nil {
						t.Fatal(err)
					}
				}
				if got := trainLR(t, l, b); !near(got, want[k]) {
					t.Errorf("stop at %d: step %d: lr %v, want %v", stop, k, got, want[k])
				}
			}
		}
		run(a, 0, stop)
		if err := a.Save(dir); err != nil {
			t.Fatal(err)
		}
		r := loaded(t, scheduleConfig(), dir)
		run(r, stop, sftSteps+rlSteps)
		if d := maxDiff(straight.PolicyWeights(), r.PolicyWeights()); d != 0 {
			t.Errorf("stop at %d: resumed weights differ by %v", stop, d)
		}
	}
}

// learner_state.json's rl_start_step is checked, and one written before the
// field existed counts an RL checkpoint's schedule from step 0.
func TestScheduleStateFile(t *testing.T) {
	l := newLearner(t, scheduleConfig())
	for range 2 {
		trainLR(t, l, groupBatch())
	}
	dir := savedTo(t, l)
	path := filepath.Join(dir, StateFile)
	edit := func(f func(m map[string]any)) {
		js, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		if err := json.Unmarshal(js, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		if js, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, js, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit(func(m map[string]any) { m["rl_start_step"] = 3 })
	if err := newLearner(t, scheduleConfig()).Load(dir); err == nil || !strings.Contains(err.Error(), "rl_start_step 3 not in [-1, step 2]") {
		t.Errorf("rl_start_step past the step: %v", err)
	}
	edit(func(m map[string]any) { delete(m, "rl_start_step") })
	r := loaded(t, scheduleConfig(), dir)
	if r.RLStart() != 0 {
		t.Errorf("an old RL checkpoint: RL start %d, want 0", r.RLStart())
	}
	if lr := trainLR(t, r, groupBatch()); !near(lr, rlRates[2]) {
		t.Errorf("an old RL checkpoint: lr %v, want step 2's %v", lr, rlRates[2])
	}
}
