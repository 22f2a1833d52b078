package train

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/recipes"
)

// The controller's rule (Skywork-OR1's adaptive entropy control): below
// the target the coefficient rises a step, above it falls a step, at it
// stays; it stays within [0, Max]; and the bonus applies only while the
// entropy last measured is below the target.
func TestEntropyControlRule(t *testing.T) {
	ec := EntropyControl{Target: 0.3, Step: 0.005, Max: 0.02}
	for _, tc := range []struct {
		name        string
		coef        float64
		last        *float64 // the entropy measured at the step before
		applied     float64  // the next step's coefficient
		measured    float64  // this step's entropy
		coefAfter   float64
		appliedNext float64
	}{
		{"nothing measured yet: no bonus", 0.01, nil, 0, 0.1, 0.015, 0.015},
		{"below target: raised and applied", 0.01, ptr(0.1), 0.01, 0.1, 0.015, 0.015},
		{"above target: lowered, not applied", 0.01, ptr(0.5), 0, 0.5, 0.005, 0},
		{"at target: kept, not applied", 0.01, ptr(0.3), 0, 0.3, 0.01, 0},
		{"raised to the ceiling", 0.018, ptr(0.1), 0.018, 0.2, 0.02, 0.02},
		{"held at the ceiling", 0.02, ptr(0.1), 0.02, 0.2, 0.02, 0.02},
		{"lowered to 0", 0.003, ptr(6.58), 0, 6.58, 0, 0},
		{"held at 0", 0, ptr(6.58), 0, 6.58, 0, 0},
		{"from 0 when it falls below", 0, ptr(0.5), 0, 0.29, 0.005, 0.005},
		{"zero entropy", 0.01, ptr(0.0), 0.01, 0, 0.015, 0.015},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := entropyState{Coef: tc.coef, Entropy: tc.last}
			if got := ec.applied(s); got != tc.applied {
				t.Errorf("applied %v, want %v", got, tc.applied)
			}
			after := ec.observe(s, tc.measured)
			if math.Abs(after.Coef-tc.coefAfter) > 1e-15 {
				t.Errorf("coefficient after measuring %v: %v, want %v", tc.measured, after.Coef, tc.coefAfter)
			}
			if after.Entropy == nil || *after.Entropy != tc.measured {
				t.Errorf("entropy after: %v, want %v", after.Entropy, tc.measured)
			}
			if got := ec.applied(after); math.Abs(got-tc.appliedNext) > 1e-15 {
				t.Errorf("applied at the next step %v, want %v", got, tc.appliedNext)
			}
			if s.Coef != tc.coef || s.Entropy != tc.last {
				t.Error("observe changed the state it was given")
			}
		})
	}
}

// The hazard the controller exists for, replayed on the measured entropies
// of a feedback policy going uniform (0.27 → 1.68 → 6.58 nats): once the
// entropy passes the target the bonus is off at once, and the coefficient
// decays to 0 instead of growing with the entropy.
func TestEntropyControlStopsTheRunaway(t *testing.T) {
	ec := EntropyControl{Target: 0.3, Step: 0.005, Max: 0.05}
	s := entropyState{Coef: 0.01}
	var applied []float64
	for _, h := range []float64{0.27, 1.68, 6.58, 6.58, 6.58} {
		applied = append(applied, ec.applied(s))
		s = ec.observe(s, h)
	}
	want := []float64{0, 0.015, 0, 0, 0}
	for i := range want {
		if math.Abs(applied[i]-want[i]) > 1e-15 {
			t.Errorf("applied coefficients %v, want %v", applied, want)
			break
		}
	}
	if s.Coef != 0 {
		t.Errorf("coefficient after three steps far above the target: %v, want 0", s.Coef)
	}
}

// Each policy has its own controller: one policy's measurements move its
// coefficient alone, and the run's policies each start at the configured
// coefficient.
func TestEntropyControlPerPolicy(t *testing.T) {
	c := tinyMLMT(t.TempDir())
	c.Learner.Algorithm = learner.GRPO
	c.Learner.Loss.EntropyCoef = 0.01
	c.EntropyControl = &EntropyControl{Target: 0.3, Step: 0.005, Max: 0.05}
	r := &run{cfg: c}
	r.startEntropyControl()
	if len(r.entropy) != 2 || r.entropy["solver"].Coef != 0.01 || r.entropy["feedback"].Coef != 0.01 {
		t.Fatalf("starting state %v, want solver and feedback at 0.01", r.entropy)
	}
	ec := c.EntropyControl
	r.entropy["solver"] = ec.observe(r.entropy["solver"], 0.1)      // below: up
	r.entropy["feedback"] = ec.observe(r.entropy["feedback"], 1.68) // above: down
	r.entropy["solver"] = ec.observe(r.entropy["solver"], 0.1)
	if s, f := r.entropy["solver"], r.entropy["feedback"]; math.Abs(s.Coef-0.02) > 1e-15 || math.Abs(f.Coef-0.005) > 1e-15 {
		t.Errorf("solver %v, feedback %v: want 0.02 and 0.005", s.Coef, f.Coef)
	}
	if ec.applied(r.entropy["solver"]) == 0 || ec.applied(r.entropy["feedback"]) != 0 {
		t.Errorf("applied: solver %v (below target), feedback %v (above)", ec.applied(r.entropy["solver"]), ec.applied(r.entropy["feedback"]))
	}

	// Which policies are controlled: those that train in RL with an
	// entropy term.
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"both", func(*Config) {}, "solver feedback"},
		{"feedback frozen", func(c *Config) { c.Feedback.Train = false }, "solver"},
		{"solver frozen", func(c *Config) { c.FreezeSolver = true }, "feedback"},
		{"feedback rw_sft", func(c *Config) { c.Feedback.Algorithm = learner.RWSFT }, "solver"},
		{"solver rw_sft", func(c *Config) { c.Learner.Algorithm = learner.RWSFT; c.Feedback.Algorithm = learner.GRPO }, "feedback"},
		{"shared weights", func(c *Config) { c.SharedWeights = true }, "solver"},
		{"static feedback", func(c *Config) { c.Feedback = nil }, "solver"},
		{"off", func(c *Config) { c.EntropyControl = nil }, ""},
	} {
		cc := c
		fb := *c.Feedback
		cc.Feedback = &fb
		tc.edit(&cc)
		if got := strings.Join(cc.entropyControlled(), " "); got != tc.want {
			t.Errorf("%s: controlled %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The recipe's ceiling on entropy_coef_max is the learner's on a batch's
// coefficient (recipes imports nothing of the learner to share it).
func TestEntropyCoefBoundsAgree(t *testing.T) {
	if recipes.MaxEntropyCoef != learner.MaxEntropyCoef {
		t.Errorf("recipes.MaxEntropyCoef %v, learner.MaxEntropyCoef %v", recipes.MaxEntropyCoef, learner.MaxEntropyCoef)
	}
}

// Entropy control's config errors stop the run before anything starts,
// naming the field.
func TestEntropyControlRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		want string
		edit func(*Config)
	}{
		{"entropy_control.target 0:", func(c *Config) { c.EntropyControl.Target = 0 }},
		{"entropy_control.target -1:", func(c *Config) { c.EntropyControl.Target = -1 }},
		{"entropy_control.target NaN:", func(c *Config) { c.EntropyControl.Target = math.NaN() }},
		{"entropy_control.step -0.005:", func(c *Config) { c.EntropyControl.Step = -0.005 }},
		{"entropy_control.max -1:", func(c *Config) { c.EntropyControl.Max = -1 }},
		{"entropy_control.max 2:", func(c *Config) { c.EntropyControl.Max = 2 }},
		{"below the starting coefficient", func(c *Config) { c.Learner.Loss.EntropyCoef = 0.1 }},
		{"no policy this run trains in RL has an entropy term", func(c *Config) { c.Learner.Algorithm = learner.RWSFT }},
	} {
		out := filepath.Join(t.TempDir(), "run")
		c := tinyRun(out)
		c.EntropyControl = &EntropyControl{Target: 0.3, Step: 0.005, Max: 0.05}
		tc.edit(&c)
		_, err := Run(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: the run directory was created for a refused config", tc.want)
		}
	}
}

// entropyMLMT is tinyMLMT with both policies trained by GRPO under entropy
// control, four RL steps, checkpoints every two steps.
func entropyMLMT(out string, target float64) Config {
	c := tinyMLMT(out)
	c.Learner.Algorithm = learner.GRPO
	c.Learner.Loss.EntropyCoef = 0.01
	c.Steps, c.CheckpointEvery, c.EvalEvery = 4, 2, 0
	c.EntropyControl = &EntropyControl{Target: target, Step: 0.005, Max: 0.05}
	return c
}

// A run resumed from a checkpoint taken after two RL steps ends with the
// same weights of both policies, the same driver state (the controllers'
// coefficients and last entropies) and the same logged coefficients as
// the uninterrupted run. With the target above any entropy the tiny model
// reaches, the coefficients grow a step each RL step, so a controller
// that restarted from entropy_coef would apply other coefficients.
func TestEntropyControlResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	full := t.TempDir()
	if _, err := Run(ctx, entropyMLMT(full, 100)); err != nil {
		t.Fatal(err)
	}
	lines := readMetrics(t, filepath.Join(full, "metrics.jsonl"))
	// Warm-up steps 1-2 log no coefficient; RL steps 3-6 apply none at the
	// first (nothing measured), then 0.015, 0.02, 0.025.
	want := map[float64][]any{1: {nil, nil}, 2: {nil, nil}, 3: {0.0, 0.0}, 4: {0.015, 0.015}, 5: {0.02, 0.02}, 6: {0.025, 0.025}}
	for _, m := range lines {
		w := want[m["step"].(float64)]
		for i, key := range []string{"entropy_coef", "feedback_entropy_coef"} {
			got, ok := m[key]
			switch {
			case w[i] == nil && ok:
				t.Errorf("step %v: %s %v, want none", m["step"], key, got)
			case w[i] != nil && (!ok || math.Abs(got.(float64)-w[i].(float64)) > 1e-12):
				t.Errorf("step %v: %s %v, want %v", m["step"], key, got, w[i])
			}
		}
	}
	if len(lines) != 6 {
		t.Errorf("%d metrics lines, want 6", len(lines))
	}

	resumed := t.TempDir()
	cfg := entropyMLMT(resumed, 100)
	cfg.Resume = filepath.Join(full, "checkpoints", "step-4")
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"", FeedbackDir} {
		a := weightsOf(t, filepath.Join(full, "checkpoints", "step-6", sub))
		b := weightsOf(t, filepath.Join(resumed, "checkpoints", "step-6", sub))
		if !sameWeights(a, b) {
			t.Errorf("%q: the resumed run's step-6 weights differ from the uninterrupted run's", sub)
		}
	}
	a, err := os.ReadFile(filepath.Join(full, "checkpoints", "step-6", DriverStateFile))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(resumed, "checkpoints", "step-6", DriverStateFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("driver state differs:\nuninterrupted %s\nresumed %s", a, b)
	}
	if !strings.Contains(string(a), `"entropy_control"`) || !strings.Contains(string(a), `"feedback"`) {
		t.Errorf("driver state holds no entropy control of both policies: %s", a)
	}
	rl := readMetrics(t, filepath.Join(resumed, "metrics.jsonl"))
	for i, m := range rl {
		if i+4 >= len(lines) {
			break
		}
		for _, key := range []string{"entropy_coef", "feedback_entropy_coef", "entropy", "feedback_entropy"} {
			if m[key] != lines[i+4][key] {
				t.Errorf("resumed step %v: %s %v, uninterrupted %v", m["step"], key, m[key], lines[i+4][key])
			}
		}
	}

	// A run without entropy control refuses the checkpoint of one with it.
	off := entropyMLMT(t.TempDir(), 100)
	off.EntropyControl = nil
	off.Resume = cfg.Resume
	if _, err := Run(ctx, off); err == nil || !strings.Contains(err.Error(), "entropy_target") {
		t.Errorf("resume without entropy control: error %v, want one naming entropy_target", err)
	}
}

// Above the target the bonus is off: a run whose entropy stays above a
// tiny target trains exactly as one with no entropy bonus at all.
func TestEntropyControlOffAboveTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	controlled := entropyMLMT(t.TempDir(), 1e-6)
	controlled.Steps, controlled.CheckpointEvery = 3, 5
	plain := entropyMLMT(t.TempDir(), 1e-6)
	plain.Steps, plain.CheckpointEvery = 3, 5
	plain.EntropyControl, plain.Learner.Loss.EntropyCoef = nil, 0
	for _, c := range []Config{controlled, plain} {
		if _, err := Run(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range []string{"", FeedbackDir} {
		a := weightsOf(t, filepath.Join(controlled.Out, "checkpoints", "step-5", sub))
		b := weightsOf(t, filepath.Join(plain.Out, "checkpoints", "step-5", sub))
		if !sameWeights(a, b) {
			t.Errorf("%q: weights differ from a run without entropy bonus", sub)
		}
	}
	for _, m := range readMetrics(t, filepath.Join(controlled.Out, "metrics.jsonl")) {
		if m["phase"] == "rl" && (m["entropy_coef"] != 0.0 || m["feedback_entropy_coef"] != 0.0) {
			t.Errorf("step %v: entropy_coef %v, feedback_entropy_coef %v, want 0 above the target", m["step"], m["entropy_coef"], m["feedback_entropy_coef"])
		}
	}
}

// The recipe's keys map onto Config.EntropyControl, with the defaults for
// those not given; without entropy_target there is none.
func TestEntropyControlFromRecipe(t *testing.T) {
	cfg, _ := loadRun(t, "quickstart", []string{"algorithm.entropy_target=0.4", "algorithm.entropy_coef_max=0.02"})
	want := EntropyControl{Target: 0.4, Step: recipes.DefaultEntropyCoefStep, Max: 0.02}
	if cfg.EntropyControl == nil || *cfg.EntropyControl != want {
		t.Errorf("entropy control %+v, want %+v", cfg.EntropyControl, want)
	}
	if cfg, _ := loadRun(t, "quickstart", nil); cfg.EntropyControl != nil {
		t.Errorf("no entropy_target: entropy control %+v, want none", *cfg.EntropyControl)
	}
}
