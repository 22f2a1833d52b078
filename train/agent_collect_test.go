package train

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/recipes"
)

// agent_rwsft's collected samples: the teacher's episodes return 8.5
// (equations' full solution), random play's less; every step is one
// sample whose prompt is the run's template over that step and whose
// response is the action ending in the end of text; the same seed
// collects the same samples; filter weighting keeps the teacher's.
func TestCollectSamples(t *testing.T) {
	load := func(sets ...string) (Config, *compiled) {
		t.Helper()
		l, err := recipes.Load("agent_rwsft", append([]string{"sft.collect.teacher=3", "sft.collect.random=5"}, sets...))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := FromRecipe(l, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := cfg.validate()
		if err != nil {
			t.Fatal(err)
		}
		return cfg, tpl
	}
	cfg, tpl := load()
	w := cfg.WarmupTrajectories
	if w == nil || w.Collect == nil || w.BaseSteps != 200 || cfg.Learner.LoRAWarmupAfter != 200 {
		t.Fatalf("agent_rwsft: warm-up trajectories %+v, lora after %d", w, cfg.Learner.LoRAWarmupAfter)
	}
	got, err := readTrajectories(context.Background(), cfg, tpl, w)
	if err != nil {
		t.Fatal(err)
	}
	sl := cfg.Learner
	sl.Model, sl.ModelDir = cfg.Model, cfg.ModelDir
	pc, err := contextOf(sl, "models.policy")
	if err != nil {
		t.Fatal(err)
	}
	tok := pc.tok
	teacher, random := map[string]bool{}, map[string]float64{}
	for _, s := range got.samples {
		resp := tok.Decode(toInts(s.Response))
		if !strings.HasPrefix(resp, "<action>") || !strings.HasSuffix(resp, "</action>"+tokenizer.EndOfText) {
			t.Errorf("%s step %d: response %q is not one action and the end of text", s.Episode, s.Step, resp)
		}
		prompt := tok.Decode(toInts(s.Prompt))
		if s.Step == 0 && (!strings.HasPrefix(prompt, "Done: none\nSolve for x: ") || !strings.HasSuffix(prompt, "\n")) {
			t.Errorf("%s: first prompt %q is not the template over the first observation", s.Episode, prompt)
		}
		switch {
		case strings.HasPrefix(s.Episode, "teacher/"):
			teacher[s.Episode] = true
			if s.Reward != 8.5 {
				t.Errorf("%s: teacher episode returns %v, want 8.5", s.Episode, s.Reward)
			}
		case strings.HasPrefix(s.Episode, "random/"):
			random[s.Episode] = s.Reward
		default:
			t.Errorf("sample from %q", s.Episode)
		}
	}
	if len(teacher) != 3 || len(random) != 5 {
		t.Fatalf("%d teacher and %d random episodes, want 3 and 5", len(teacher), len(random))
	}
	if n := 3 * 4; len(got.samples) < n+5 {
		t.Fatalf("%d samples: want the teacher's %d steps and at least one per random episode", len(got.samples), n)
	}
	for ep, r := range random {
		if r >= 8.5 {
			t.Errorf("%s: random play returns %v, as much as the teacher", ep, r)
		}
	}
	if got.base == nil || len(got.base.samples) != len(got.samples) {
		t.Fatalf("base steps' samples: %v", got.base)
	}
	again, err := readTrajectories(context.Background(), cfg, tpl, w)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range again.samples {
		if s.Episode != got.samples[i].Episode || s.Reward != got.samples[i].Reward || !slices.Equal(s.Prompt, got.samples[i].Prompt) {
			t.Fatalf("sample %d differs when collected again", i)
		}
	}

	cfg, tpl = load("sft.weighting=filter", "sft.threshold=8")
	f, err := readTrajectories(context.Background(), cfg, tpl, cfg.WarmupTrajectories)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.samples {
		if s.Reward < 8 {
			t.Errorf("filter ≥ 8 kept %s with return %v", s.Episode, s.Reward)
		}
	}
	if len(f.base.samples) != len(got.samples) {
		t.Errorf("filter: the base steps train on %d samples, want all %d", len(f.base.samples), len(got.samples))
	}
}

// A collected step longer than the policy's context is refused before the
// run starts, naming the episode, step and field.
func TestCollectSamplesTooLong(t *testing.T) {
	l, err := recipes.Load("agent_rwsft", []string{"models.policy.init.max_positions=128"})
	if err != nil {
		t.Fatal(err)
	}
	err = Check(l)
	if err == nil || !strings.Contains(err.Error(), "sft.collect") || !strings.Contains(err.Error(), "max_positions") || !strings.Contains(err.Error(), "episode") {
		t.Fatalf("a 128-position context: %v", err)
	}
}
