package episode

import (
	"context"
	"fmt"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/verify"
)

// SCoRe is the two-turn self-correction episode of SCoRe (Kumar et al.,
// 2024): turn 0 the solver answers; turn 1 it sees its own answer followed
// by the review instruction (Prompter.Review) and answers again. Turn 0
// carries its score r0 as Reward; turn 1 the shaped r1 + Alpha·(r1 − r0)
// (stage II's reward bonus; Alpha 0: its own score). FinalReward is r1.
type SCoRe struct {
	Solver   Policy
	Prompter Prompter
	Verifier verify.Verifier
	Workers  int // verifications at once; 0: one
	Limits   Limits
	Alpha    float64
}

// NewSCoRe checks the policy and templates.
func NewSCoRe(solver Policy, v verify.Verifier, t Templates, lim Limits) (*SCoRe, error) {
	if err := solver.check("solver"); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("score episode: no verifier")
	}
	pr, err := t.Prompter()
	if err != nil {
		return nil, err
	}
	return &SCoRe{Solver: solver, Prompter: pr, Verifier: v, Limits: lim}, nil
}

// Run implements Runner.
func (r *SCoRe) Run(ctx context.Context, b Batch) ([]data.Turn, error) {
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
	type slot struct {
		turns []data.Turn
		ref   verify.Reference
	}
	var eps []*slot
	var live []*slot
	var reqs []call
	for i, ex := range b.Examples {
		g := b.FirstGroupID + int64(i)
		for s := range b.N {
			e := &slot{ref: ex.Ref}
			eps = append(eps, e)
			if o := outs[i]; o.err != nil {
				e.turns = append(e.turns, failedTurn(r.Solver, o, "turn 0: "+o.err.Error()))
				continue
			}
			smp := outs[i].res.Samples[s]
			t := turnOf(r.Solver, outs[i], smp)
			t.Reward, t.Note = rewards[0], notes[0]
			rewards, notes = rewards[1:], notes[1:]
			q, cut := lim.Quote(smp.Text)
			if cut {
				t.Note = joinNotes(t.Note, "answer cut in the review conversation")
			}
			e.turns = append(e.turns, t)
			prompt, err := r.Prompter.Review(ex, q)
			if err != nil {
				return nil, err
			}
			req, err := r.Solver.request(episodeID(g, s)+"-t1", prompt, b.params(r.Solver.Params, StageFinal, i, s, 1, 1))
			if err != nil {
				return nil, err
			}
			live = append(live, e)
			reqs = append(reqs, req)
		}
	}
	outs, err = generate(ctx, r.Solver, reqs)
	if err != nil {
		return nil, err
	}
	var jobs []Answer
	for k, e := range live {
		if outs[k].err == nil {
			jobs = append(jobs, Answer{outs[k].res.Samples[0].Text, e.ref})
		}
	}
	if rewards, notes, err = ScoreAll(ctx, r.Verifier, r.Workers, lim, jobs); err != nil {
		return nil, err
	}
	for k, e := range live {
		if o := outs[k]; o.err != nil {
			e.turns = append(e.turns, failedTurn(r.Solver, o, "turn 1: "+o.err.Error()))
			continue
		}
		t := turnOf(r.Solver, outs[k], outs[k].res.Samples[0])
		t.Reward, t.Note = rewards[0], notes[0]
		rewards, notes = rewards[1:], notes[1:]
		e.turns = append(e.turns, t)
	}
	var turns []data.Turn
	for i := range b.Examples {
		for s := range b.N {
			e := eps[i*b.N+s]
			var final float64
			if len(e.turns) == 2 && e.turns[1].FinishReason != "error" {
				final = e.turns[1].Reward
				e.turns[1].Reward = final + r.Alpha*(final-e.turns[0].Reward)
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
