package env

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func act(name, param string) Action { return Action{Name: name, Param: param} }

var solve3x5 = []Action{act(IdentifyOperation, ""), act(SubtractTerms, ""), act(DivideTerms, ""), act(StateAnswer, "3")}

func TestEquationsSteps(t *testing.T) {
	type step struct {
		reward  float64
		done    bool
		invalid bool
		outcome string
		text    string // a part of the observation
	}
	tests := []struct {
		name    string
		task    string
		actions []Action
		want    []step
	}{
		{"the solution of 3x + 5 = 14", "3x + 5 = 14", solve3x5, []step{
			{reward: 1.5, text: "3x + 5 = 14"},
			{reward: 2, text: "3x = 9"},
			{reward: 2, text: "x = 3"},
			{reward: 3, done: true, outcome: OutcomeSolved, text: "Correct"},
		}},
		{"negative constant", "-2x - 4 = 6", []Action{act(IdentifyOperation, ""), act(SubtractTerms, ""), act(DivideTerms, ""), act(StateAnswer, " -5 ")}, []step{
			{reward: 1.5}, {reward: 2, text: "-2x = 10"}, {reward: 2, text: "x = -5"}, {reward: 3, done: true, outcome: OutcomeSolved},
		}},
		{"out of order leaves the equation", "3x + 5 = 14", []Action{act(DivideTerms, ""), act(SubtractTerms, ""), act(IdentifyOperation, ""), act(IdentifyOperation, "")}, []step{
			{reward: -0.5, text: "unchanged: 3x + 5 = 14"}, {reward: -0.5}, {reward: 1.5}, {reward: -0.5},
		}},
		{"answer early: solved, skipped steps earn nothing", "3x + 5 = 14", []Action{act(StateAnswer, "3")}, []step{
			{reward: 3, done: true, outcome: OutcomeSolved},
		}},
		{"wrong answer ends the episode", "3x + 5 = 14", []Action{act(IdentifyOperation, ""), act(StateAnswer, "4")}, []step{
			{reward: 1.5}, {reward: -1, done: true, outcome: OutcomeWrongAnswer, text: "Wrong"},
		}},
		{"unknown action", "3x + 5 = 14", []Action{act("guess", "")}, []step{{reward: -1, invalid: true, text: `unknown action "guess"`}}},
		{"unparsable turn (empty name)", "3x + 5 = 14", []Action{act("", "")}, []step{{reward: -1, invalid: true, text: "no action given"}}},
		{"parameter on a bare action", "3x + 5 = 14", []Action{act(SubtractTerms, "5")}, []step{{reward: -1, invalid: true, text: "takes no parameter"}}},
		{"non-integer answer", "3x + 5 = 14", []Action{act(StateAnswer, "three"), act(StateAnswer, "")}, []step{
			{reward: -1, invalid: true, text: "integer"}, {reward: -1, invalid: true},
		}},
		{"step limit", "3x + 5 = 14", []Action{act("a", ""), act("b", ""), act("c", ""), act("d", ""), act("e", ""), act("f", ""), act("g", ""), act("h", "")}, []step{
			{reward: -1, invalid: true}, {reward: -1, invalid: true}, {reward: -1, invalid: true}, {reward: -1, invalid: true},
			{reward: -1, invalid: true}, {reward: -1, invalid: true}, {reward: -1, invalid: true},
			{reward: -1, invalid: true, done: true, outcome: OutcomeStepLimit, text: "Step limit of 8"},
		}},
	}
	ctx := context.Background()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := Checked(NewEquations())
			obs, err := e.Reset(ctx, 1, tc.task)
			if err != nil {
				t.Fatal(err)
			}
			if len(obs.Actions) != 4 || obs.Actions[3].Usage() != "state_answer(value)" {
				t.Fatalf("reset offers %+v", obs.Actions)
			}
			for i, a := range tc.actions {
				r, err := e.Step(ctx, a)
				if err != nil {
					t.Fatalf("step %d %s: %v", i, a, err)
				}
				w := tc.want[i]
				if r.Reward != w.reward || r.Done != w.done || (r.Invalid != "") != w.invalid || r.Info["outcome"] != w.outcome || !strings.Contains(r.Observation.Text, w.text) {
					t.Fatalf("step %d %s: got reward %v done %v invalid %q info %v text %q; want %+v", i, a, r.Reward, r.Done, r.Invalid, r.Info, r.Observation.Text, w)
				}
			}
			if last := tc.want[len(tc.want)-1]; last.done {
				if _, err := e.Step(ctx, act(StateAnswer, "3")); !errors.Is(err, ErrDone) {
					t.Fatalf("step after done: %v, want ErrDone", err)
				}
			}
		})
	}
}

func TestEquationsTotal(t *testing.T) {
	ctx := context.Background()
	e := NewEquations()
	if _, err := e.Reset(ctx, 0, "3x + 5 = 14"); err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, a := range solve3x5 {
		r, err := e.Step(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		total += r.Reward
	}
	if total != 8.5 {
		t.Fatalf("total %v, want 8.5", total)
	}
	if _, err := e.Step(ctx, solve3x5[0]); !errors.Is(err, ErrDone) {
		t.Fatalf("unchecked step after done: %v, want ErrDone", err)
	}
	if _, err := NewEquations().Step(ctx, solve3x5[0]); !errors.Is(err, ErrDone) {
		t.Fatalf("step before reset: %v, want ErrDone", err)
	}
}

func TestEquationsBadTasks(t *testing.T) {
	for _, task := range []string{"", "solve it", "0x + 5 = 14", "2x + 5 = 14", "3x = 9", "3y + 5 = 14", "3x + 99999999999999999999 = 1"} {
		if _, err := NewEquations().Reset(context.Background(), 0, task); err == nil {
			t.Errorf("task %q: no error", task)
		}
	}
	if _, err := (&Equations{}).Reset(context.Background(), 0, "3x + 5 = 14"); err == nil {
		t.Error("MaxSteps 0: no error")
	}
}

func TestEquationsSplits(t *testing.T) {
	ctx := context.Background()
	seen := map[string]map[string]bool{TaskTrain: {}, TaskHeldOut: {}}
	for _, task := range []string{TaskTrain, TaskHeldOut} {
		for seed := range int64(300) {
			e := NewEquations()
			a, err := e.Reset(ctx, seed, task)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := NewEquations().Reset(ctx, seed, task)
			if a.Text != b.Text {
				t.Fatalf("%s seed %d: %q then %q", task, seed, a.Text, b.Text)
			}
			eq := strings.TrimPrefix(a.Text, "Solve for x: ")
			q, err := parseEquation(eq)
			if err != nil || q != e.eq || isHeldOut(q) != (task == TaskHeldOut) {
				t.Fatalf("%s seed %d: %q parses to %+v (%v), drawn %+v", task, seed, eq, q, err, e.eq)
			}
			seen[task][eq] = true
		}
	}
	for eq := range seen[TaskHeldOut] {
		if seen[TaskTrain][eq] {
			t.Fatalf("%q is in both splits", eq)
		}
	}
	if len(seen[TaskTrain]) < 200 || len(seen[TaskHeldOut]) < 200 {
		t.Fatalf("%d train and %d held-out equations from 300 seeds each", len(seen[TaskTrain]), len(seen[TaskHeldOut]))
	}
}

// badEnv returns what it is told to, whatever the step.
type badEnv struct {
	reward float64
	err    error
	steps  int
}

func (b *badEnv) Reset(context.Context, int64, string) (Observation, error) {
	return Observation{Text: "go", Actions: []ActionSpec{{Name: "go"}}}, nil
}

func (b *badEnv) Step(context.Context, Action) (StepResult, error) {
	b.steps++
	return StepResult{Reward: b.reward}, b.err
}

func TestChecked(t *testing.T) {
	ctx := context.Background()
	for _, r := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		b := &badEnv{reward: r}
		e := Checked(b)
		if _, err := e.Step(ctx, act("go", "")); !errors.Is(err, ErrDone) || b.steps != 0 {
			t.Fatalf("step before reset: %v after %d calls, want ErrDone and none", err, b.steps)
		}
		if _, err := e.Reset(ctx, 0, ""); err != nil {
			t.Fatal(err)
		}
		_, err := e.Step(ctx, act("go", ""))
		if !errors.Is(err, ErrBadReward) || !strings.Contains(err.Error(), "step 1 (go)") {
			t.Fatalf("reward %v: %v, want ErrBadReward naming the step", r, err)
		}
		if _, err := e.Step(ctx, act("go", "")); !errors.Is(err, ErrDone) || b.steps != 1 {
			t.Fatalf("step after a bad reward: %v after %d calls, want ErrDone", err, b.steps)
		}
	}
	gone := errors.New("connection refused")
	e := Checked(&badEnv{err: gone})
	e.Reset(ctx, 0, "")
	if _, err := e.Step(ctx, act("go", "x")); !errors.Is(err, gone) || !strings.Contains(err.Error(), "step 1 (go(x))") {
		t.Fatalf("env error: %v", err)
	}
	if _, err := Checked(&emptyEnv{}).Reset(ctx, 0, "t"); err == nil || !strings.Contains(err.Error(), "offers no action") {
		t.Fatalf("reset offering nothing: %v", err)
	}
}

// rewardsEnv answers its steps with rewards, one each, never done.
type rewardsEnv struct {
	badEnv
	rewards []float64
}

func (r *rewardsEnv) Step(context.Context, Action) (StepResult, error) {
	r.steps++
	return StepResult{Reward: r.rewards[r.steps-1]}, nil
}

// Rewards each finite whose magnitudes sum past MaxEpisodeReward end the
// episode at the step that passes it, naming the step; a new episode
// starts its sum again. Before, 1e308 twice was taken, and the episode's
// return, +Inf, failed the whole run.
func TestCheckedRewardBound(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		rewards []float64
		ok      int // steps taken before the error; len(rewards): none
	}{
		{[]float64{1e308, 1e308}, 0},
		{[]float64{1.5, 2, 2, 3}, 4},
		{[]float64{MaxEpisodeReward / 2, -MaxEpisodeReward / 2, 1}, 2}, // magnitudes, not the sum
		{[]float64{MaxEpisodeReward}, 1},
		{[]float64{-MaxEpisodeReward, -0.5}, 1},
	} {
		for range 2 { // the second episode starts from 0 again
			e := Checked(&rewardsEnv{rewards: c.rewards})
			if _, err := e.Reset(ctx, 0, ""); err != nil {
				t.Fatal(err)
			}
			var err error
			taken := 0
			for range c.rewards {
				if _, err = e.Step(ctx, act("go", "")); err != nil {
					break
				}
				taken++
			}
			if taken != c.ok {
				t.Fatalf("rewards %v: %d steps taken (error %v), want %d", c.rewards, taken, err, c.ok)
			}
			if taken < len(c.rewards) {
				if want := fmt.Sprintf("step %d (go)", taken+1); !errors.Is(err, ErrRewardBound) || !strings.Contains(err.Error(), want) {
					t.Fatalf("rewards %v: %v, want ErrRewardBound naming %s", c.rewards, err, want)
				}
				if _, err := e.Step(ctx, act("go", "")); !errors.Is(err, ErrDone) {
					t.Fatalf("rewards %v: a step after the bound: %v, want ErrDone", c.rewards, err)
				}
			}
		}
	}
}

type emptyEnv struct{ badEnv }

func (emptyEnv) Reset(context.Context, int64, string) (Observation, error) {
	return Observation{Text: "nothing"}, nil
}

func TestParseAction(t *testing.T) {
	tests := []struct {
		text string
		want Action
		err  bool
	}{
		{"<action>identify_operation</action>", act(IdentifyOperation, ""), false},
		{"I subtract first. <action> subtract_terms </action>", act(SubtractTerms, ""), false},
		{"<action>state_answer(3)</action>", act(StateAnswer, "3"), false},
		{"<action>state_answer( -12 )</action>", act(StateAnswer, "-12"), false},
		{"<action>divide_terms</action> then <action>state_answer(4)</action>", act(StateAnswer, "4"), false},
		{"", Action{}, true},
		{"state_answer(3)", Action{}, true},
		{"state_answer(3)</action>", Action{}, true},
		{"<action></action>", Action{}, true},
		{"<action>state_answer()</action>", Action{}, true},
		{"<action>state_answer(3</action>", Action{}, true},
		{"<action>Divide Terms</action>", Action{}, true},
		{"<action>9lives</action>", Action{}, true},
		{"<action>" + strings.Repeat("x(", 1000) + "</action>", Action{}, true},
	}
	for _, tc := range tests {
		got, err := ParseAction(tc.text)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseAction(%.60q) = %+v, %v; want %+v, error %v", tc.text, got, err, tc.want, tc.err)
		}
		if err != nil && !errors.Is(err, ErrNoAction) {
			t.Errorf("ParseAction(%.60q): %v does not wrap ErrNoAction", tc.text, err)
		}
		if err == nil {
			if back, _ := ParseAction(got.Text()); back != got {
				t.Errorf("%+v: Text %q reads back as %+v", got, got.Text(), back)
			}
		}
	}
}
