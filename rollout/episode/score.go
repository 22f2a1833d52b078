package episode

import (
	"context"
	"fmt"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/verify"
)

// SCoRe is the two-turn self-correction episode of SCoRe (Kumar et al.,
// 2024): turn 0 the solver answers; turn 1 it sees its own answer in the
// conversation followed by the fixed Review instruction and answers again.
// Each turn carries its own score as Reward; FinalReward is turn 1's. The
// learner shapes the stage-II reward from the two (r1 + α(r1 − r0)).
type SCoRe struct {
	Solver   Policy
	Verifier verify.Verifier
	Limits   Limits
	tpl      *compiled
}

// NewSCoRe checks the policy and templates.
func NewSCoRe(solver Policy, v verify.Verifier, t Templates, lim Limits) (*SCoRe, error) {
	if err := solver.check("solver"); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("score episode: no verifier")
	}
	tpl, err := t.compile()
	if err != nil {
		return nil, err
	}
	return &SCoRe{Solver: solver, Verifier: v, Limits: lim.withDefaults(), tpl: tpl}, nil
}

// Run implements Runner.
func (r *SCoRe) Run(ctx context.Context, b Batch) ([]data.Turn, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	outs, err := first(ctx, r.Solver, r.tpl, b)
	if err != nil {
		return nil, err
	}
	review, err := r.tpl.render("review", TemplateData{})
	if err != nil {
		return nil, err
	}
	type slot struct {
		turns []data.Turn
		ref   verify.Reference
	}
	var eps []*slot
	var live []*slot
	var reqs []engine.Request
	for i, ex := range b.Examples {
		g := b.FirstGroupID + int64(i)
		prompt, err := r.tpl.render("solver", TemplateData{Problem: ex.Prompt})
		if err != nil {
			return nil, err
		}
		for s := range b.N {
			e := &slot{ref: ex.Ref}
			eps = append(eps, e)
			if o := outs[i]; o.err != nil {
				e.turns = append(e.turns, failedTurn(r.Solver, "turn 0: "+o.err.Error()))
				continue
			}
			smp := outs[i].res.Samples[s]
			t := turnOf(r.Solver, outs[i].res, smp)
			t.Reward, t.Note = score(ctx, r.Verifier, r.Limits, smp.Text, ex.Ref)
			q, cut := quote(smp.Text, r.Limits.MaxQuoteBytes)
			if cut {
				t.Note = joinNotes(t.Note, "answer cut in the review conversation")
			}
			e.turns = append(e.turns, t)
			p := seeded(r.Solver.Params, g, s, 1)
			p.N = 1
			live = append(live, e)
			reqs = append(reqs, engine.Request{ID: episodeID(g, s) + "-t1", Params: p, Messages: []tokenizer.Message{
				{Role: "user", Content: prompt}, {Role: "assistant", Content: q}, {Role: "user", Content: review},
			}})
		}
	}
	outs, err = generate(ctx, r.Solver, reqs)
	if err != nil {
		return nil, err
	}
	for k, e := range live {
		if o := outs[k]; o.err != nil {
			e.turns = append(e.turns, failedTurn(r.Solver, "turn 1: "+o.err.Error()))
			continue
		}
		smp := outs[k].res.Samples[0]
		t := turnOf(r.Solver, outs[k].res, smp)
		t.Reward, t.Note = score(ctx, r.Verifier, r.Limits, smp.Text, e.ref)
		e.turns = append(e.turns, t)
	}
	var turns []data.Turn
	for i := range b.Examples {
		for s := range b.N {
			e := eps[i*b.N+s]
			var final float32
			if len(e.turns) == 2 {
				final = e.turns[1].Reward
			}
			for k := range e.turns {
				setEpisode(&e.turns[k], b.FirstGroupID+int64(i), s, k)
				e.turns[k].FinalReward = final
			}
			turns = append(turns, e.turns...)
		}
	}
	return turns, nil
}
