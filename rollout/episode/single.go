package episode

import (
	"context"
	"fmt"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/verify"
)

// SingleTurn is the plain episode: the solver answers once; the reward is
// the verifier's score of that answer. One Turn per episode.
type SingleTurn struct {
	Solver   Policy
	Verifier verify.Verifier
	Limits   Limits
	tpl      *compiled
}

// NewSingleTurn checks the policy and templates.
func NewSingleTurn(solver Policy, v verify.Verifier, t Templates, lim Limits) (*SingleTurn, error) {
	if err := solver.check("solver"); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("single-turn episode: no verifier")
	}
	tpl, err := t.compile()
	if err != nil {
		return nil, err
	}
	return &SingleTurn{Solver: solver, Verifier: v, Limits: lim.withDefaults(), tpl: tpl}, nil
}

// Run implements Runner.
func (r *SingleTurn) Run(ctx context.Context, b Batch) ([]data.Turn, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	outs, err := first(ctx, r.Solver, r.tpl, b)
	if err != nil {
		return nil, err
	}
	var turns []data.Turn
	for i, ex := range b.Examples {
		g := b.FirstGroupID + int64(i)
		for s := range b.N {
			var t data.Turn
			if o := outs[i]; o.err != nil {
				t = failedTurn(r.Solver, "turn 0: "+o.err.Error())
			} else {
				t = turnOf(r.Solver, o.res, o.res.Samples[s])
				var note string
				t.Reward, note = score(ctx, r.Verifier, r.Limits, o.res.Samples[s].Text, ex.Ref)
				t.Note = joinNotes(t.Note, note)
			}
			t.FinalReward = t.Reward
			setEpisode(&t, g, s, 0)
			turns = append(turns, t)
		}
	}
	return turns, nil
}
