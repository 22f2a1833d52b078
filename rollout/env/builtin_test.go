package env

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestTeachersSolve: every built-in environment's teacher solves its
// tasks of both splits, within the default step limit.
func TestTeachersSolve(t *testing.T) {
	ctx := context.Background()
	for _, name := range BuiltinNames {
		for _, split := range []string{TaskTrain, TaskHeldOut} {
			for seed := range int64(40) {
				e, err := New(name, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.Reset(ctx, seed, split); err != nil {
					t.Fatalf("%s %s seed %d: %v", name, split, seed, err)
				}
				var total float64
				for steps := 1; ; steps++ {
					a, err := e.Teach()
					if err != nil {
						t.Fatalf("%s %s seed %d step %d: teach: %v", name, split, seed, steps, err)
					}
					r, err := e.Step(ctx, a)
					if err != nil {
						t.Fatalf("%s %s seed %d: step %s: %v", name, split, seed, a, err)
					}
					if r.Invalid != "" {
						t.Fatalf("%s %s seed %d: teacher's %s invalid: %s", name, split, seed, a, r.Invalid)
					}
					total += r.Reward
					if r.Done {
						if r.Info[InfoOutcome] != OutcomeSolved {
							t.Fatalf("%s %s seed %d: ended %q after %d steps", name, split, seed, r.Info[InfoOutcome], steps)
						}
						break
					}
				}
				if _, err := e.Teach(); !errors.Is(err, ErrDone) {
					t.Errorf("%s: teach after done: %v, want ErrDone", name, err)
				}
				if total <= 0 {
					t.Errorf("%s %s seed %d: the solution earned %v", name, split, seed, total)
				}
			}
		}
	}
}

// TestBuiltinSplits: the splits of every environment differ, and the
// same seed and task give the same episode.
func TestBuiltinSplits(t *testing.T) {
	ctx := context.Background()
	for _, name := range BuiltinNames {
		seen := map[string]string{}
		for _, split := range []string{TaskTrain, TaskHeldOut} {
			for seed := range int64(200) {
				e, _ := New(name, 0)
				obs, err := e.Reset(ctx, seed, split)
				if err != nil {
					t.Fatal(err)
				}
				// The hidden number of guess is not in its observation: the
				// teacher's play names the episode.
				key := obs.Text
				for {
					a, _ := e.Teach()
					key += "|" + a.String()
					r, _ := e.Step(ctx, a)
					if r.Done {
						break
					}
				}
				if s, ok := seen[key]; ok && s != split {
					t.Fatalf("%s: %q in both splits", name, key)
				}
				seen[key] = split
				again, _ := New(name, 0)
				obs2, _ := again.Reset(ctx, seed, split)
				if obs2.Text != obs.Text {
					t.Fatalf("%s seed %d: reset gave %q then %q", name, seed, obs.Text, obs2.Text)
				}
			}
		}
	}
}

func TestMultiply(t *testing.T) {
	ctx := context.Background()
	type step struct {
		a       Action
		reward  float64
		done    bool
		invalid bool
		info    string // InfoOutcome, else InfoToolError's presence
		text    string
	}
	tests := []struct {
		name  string
		tools bool
		steps []step
	}{
		{"calculate, then answer", true, []step{
			{a: act(Calculate, "347 * 28"), text: "347*28 = 9716"},
			{a: act(Answer, "9716"), reward: 1, done: true, info: OutcomeSolved},
		}},
		{"a wrong answer ends it", true, []step{{a: act(Answer, "9000"), done: true, info: OutcomeWrongAnswer}}},
		{"a bad expression is a tool error", true, []step{
			{a: act(Calculate, "347 / 28"), reward: -0.2, info: "tool_error", text: "error: unexpected"},
			{a: act(Calculate, "((((((((((((((((((1))))))))))))))))))"), reward: -0.2, info: "tool_error", text: "deeper"},
			{a: act(Calculate, "999999999999*999999999999"), reward: -0.2, info: "tool_error", text: "out of range"},
		}},
		{"without tools calculate is unknown", false, []step{{a: act(Calculate, "347*28"), reward: -0.5, invalid: true, text: "unknown action"}}},
		{"step limit", true, []step{
			{a: act("x", ""), reward: -0.5, invalid: true}, {a: act(Answer, "ten"), reward: -0.5, invalid: true},
			{a: act(Calculate, "1+1")}, {a: act(Calculate, "2"), done: true, info: OutcomeStepLimit},
		}},
	}
	for _, tc := range tests {
		m := NewMultiply(tc.tools)
		if _, err := m.Reset(ctx, 0, "347 * 28"); err != nil {
			t.Fatal(err)
		}
		for i, s := range tc.steps {
			r, err := m.Step(ctx, s.a)
			if err != nil {
				t.Fatalf("%s: step %d: %v", tc.name, i, err)
			}
			got := r.Info[InfoOutcome]
			if s.info == "tool_error" {
				got = map[bool]string{true: "tool_error"}[r.Info[InfoToolError] != ""]
			}
			if r.Reward != s.reward || r.Done != s.done || (r.Invalid != "") != s.invalid || got != s.info || !strings.Contains(r.Observation.Text, s.text) {
				t.Errorf("%s: step %d %s: got reward %v done %v invalid %q info %v %q", tc.name, i, s.a, r.Reward, r.Done, r.Invalid, r.Info, r.Observation.Text)
			}
		}
	}
	if _, err := NewMultiply(true).Reset(ctx, 0, "seven times eight"); err == nil {
		t.Error("a task that is no product: no error")
	}
}

func TestGuess(t *testing.T) {
	ctx := context.Background()
	g := NewGuess()
	if _, err := g.Reset(ctx, 0, "find 37"); err != nil {
		t.Fatal(err)
	}
	for i, s := range []struct {
		a      Action
		reward float64
		text   string
	}{
		{act(GuessAction, "25"), -0.1, "25: higher. The number is from 26 to 50"},
		{act(GuessAction, "10"), -0.3, "from 26 to 50"},
		{act(GuessAction, "40"), -0.1, "from 26 to 39; 3 guesses left"},
		{act(GuessAction, "x"), -0.5, "Invalid action"},
		{act(GuessAction, "37"), 1, "37 is right"},
	} {
		r, err := g.Step(ctx, s.a)
		if err != nil || r.Reward != s.reward || !strings.Contains(r.Observation.Text, s.text) {
			t.Errorf("step %d %s: %+v, %v", i, s.a, r, err)
		}
	}
	if _, err := g.Step(ctx, act(GuessAction, "1")); !errors.Is(err, ErrDone) {
		t.Errorf("step after done: %v, want ErrDone", err)
	}
	for _, bad := range []string{"find 0", "find 51", "guess", ""} {
		if _, err := NewGuess().Reset(ctx, 0, bad); err == nil {
			t.Errorf("task %q: no error", bad)
		}
	}
	if _, err := New("chess", 0); err == nil || !strings.Contains(err.Error(), "equations") {
		t.Errorf("unknown env: %v", err)
	}
}

func TestEvalInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"347*28", 9716, ""}, {" 2 * (3 + 4) - -1 ", 15, ""}, {"-5*-5", 25, ""},
		{"", 0, "ends early"}, {"2+", 0, "ends early"}, {"(1", 0, "missing )"}, {"1)", 0, "unexpected"},
		{"2**3", 0, "unexpected"}, {"9223372036854775807+1", 0, "out of range"}, {strings.Repeat("1", 200), 0, "bytes"},
	} {
		got, err := evalInt(tc.in)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) || got != tc.want {
			t.Errorf("evalInt(%q) = %d, %v; want %d, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}
