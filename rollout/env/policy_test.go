package env

import (
	"context"
	"testing"
)

func TestNewPolicy(t *testing.T) {
	for _, c := range []struct{ kind, env string }{{"scripted", "http"}, {"greedy", "equations"}, {"", "equations"}} {
		if _, err := NewPolicy(c.kind, c.env, 1); err == nil {
			t.Errorf("NewPolicy(%q, %q): no error", c.kind, c.env)
		}
	}
	// The teacher solves what it is given, and answers an observation it
	// cannot read with no action.
	mk, err := NewPolicy(PolicyScripted, "equations", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := Checked(NewEquations())
	obs, err := e.Reset(ctx, 0, "7x + 1 = -20")
	if err != nil {
		t.Fatal(err)
	}
	p := mk()
	var total float64
	for {
		r, err := e.Step(ctx, p.Act(obs))
		if err != nil {
			t.Fatal(err)
		}
		total += r.Reward
		if r.Done {
			if r.Info["outcome"] != OutcomeSolved || total != 8.5 {
				t.Fatalf("teacher: %v, total %v", r.Info, total)
			}
			break
		}
		obs = r.Observation
	}
	if a := mk().Act(Observation{Text: "Find the number."}); a != (Action{}) {
		t.Fatalf("teacher on an unknown observation: %+v", a)
	}
}

// TestScriptedTeachersMatch: the scripted teacher of every built-in
// environment, reading only the observations, takes the action the
// environment's own Teach names at every step and solves every episode
// of both splits; an observation it cannot read gets no action.
func TestScriptedTeachersMatch(t *testing.T) {
	ctx := context.Background()
	for _, name := range BuiltinNames {
		mk, err := NewPolicy(PolicyScripted, name, 1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, task := range []string{TaskTrain, TaskHeldOut} {
			for seed := range int64(60) {
				e, err := New(name, 0)
				if err != nil {
					t.Fatal(err)
				}
				obs, err := e.Reset(ctx, seed, task)
				if err != nil {
					t.Fatal(err)
				}
				p := mk()
				for step := 0; ; step++ {
					want, err := e.Teach()
					if err != nil {
						t.Fatalf("%s %s seed %d step %d: Teach: %v", name, task, seed, step, err)
					}
					got := p.Act(obs)
					if got != want {
						t.Fatalf("%s %s seed %d step %d: scripted %+v, Teach %+v (observation %q)", name, task, seed, step, got, want, obs.Text)
					}
					r, err := e.Step(ctx, got)
					if err != nil {
						t.Fatal(err)
					}
					if r.Done {
						if r.Info[InfoOutcome] != OutcomeSolved {
							t.Fatalf("%s %s seed %d: ended %q after %d steps", name, task, seed, r.Info[InfoOutcome], step+1)
						}
						break
					}
					obs = r.Observation
				}
			}
		}
		if a := mk().Act(Observation{Text: "Something else entirely."}); a != (Action{}) {
			t.Errorf("%s teacher on an unknown observation: %+v", name, a)
		}
	}
}
