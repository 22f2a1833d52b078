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
