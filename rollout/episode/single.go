package episode

import (
	"context"
	"fmt"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/verify"
)

// SingleTurn is the plain episode: the solver answers once; the reward is
// the verifier's score of that answer. One Turn per episode. A nil
// Verifier scores nothing (rewards 0): SFT warm-ups sample attempts so.
type SingleTurn struct {
	Solver   Policy
	Prompter Prompter
	Verifier verify.Verifier
	Workers  int // verifications at once; 0: one
	Limits   Limits
}

// NewSingleTurn checks the policy and templates.
func NewSingleTurn(solver Policy, v verify.Verifier, t Templates, lim Limits) (*SingleTurn, error) {
	if err := solver.check("solver"); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("single-turn episode: no verifier")
	}
	pr, err := t.Prompter()
	if err != nil {
		return nil, err
	}
	return &SingleTurn{Solver: solver, Prompter: pr, Verifier: v, Limits: lim}, nil
}

// Run implements Runner.
func (r *SingleTurn) Run(ctx context.Context, b Batch) ([]data.Turn, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	if err := r.Solver.check("solver"); err != nil {
		return nil, err
	}
	lim := r.Limits.withDefaults()
	outs, rewards, notes, err := firstScored(ctx, r.Solver, r.Prompter.Solver, r.Verifier, r.Workers, lim, b)
	if err != nil {
		return nil, err
	}
	var turns []data.Turn
	for i := range b.Examples {
		g := b.FirstGroupID + int64(i)
		for s := range b.N {
			var t data.Turn
			if o := outs[i]; o.err != nil {
				t = failedTurn(r.Solver, o, "turn 0: "+o.err.Error())
			} else {
				t = turnOf(r.Solver, o, o.res.Samples[s])
				t.Reward, t.Note = rewards[0], notes[0]
				rewards, notes = rewards[1:], notes[1:]
			}
			t.FinalReward = t.Reward
			setEpisode(&t, g, s, 0)
			turns = append(turns, t)
		}
	}
	return turns, nil
}
