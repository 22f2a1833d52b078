package episode

import (
	"context"
	"fmt"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/verify"
)

// MLMT is the multi-level multi-turn episode of three turns:
//
//   - turn 0: the solver answers the problem (the "attempt");
//   - turn 1: the feedback policy (the higher level, possibly another
//     engine and model) sees problem and attempt and writes feedback — or,
//     with Feedback nil, the StaticFeedback template is the feedback;
//   - turn 2: the solver refines, seeing problem, attempt and feedback.
//
// Rewards: turn 0 carries the attempt's score; turns 1 and 2 carry the
// refined answer's score, which is every turn's FinalReward. Each turn
// records its own policy id, token ids, logprobs and loss mask, so the
// solver, the feedback policy or both can be trained from one batch. With
// static feedback there is no turn-1 row (nothing was generated).
type MLMT struct {
	Solver   Policy
	Feedback *Policy // nil: static feedback template
	Verifier verify.Verifier
	Limits   Limits
	tpl      *compiled
}

// NewMLMT checks the policies and templates.
func NewMLMT(solver Policy, feedback *Policy, v verify.Verifier, t Templates, lim Limits) (*MLMT, error) {
	if err := solver.check("solver"); err != nil {
		return nil, err
	}
	if feedback != nil {
		if err := feedback.check("feedback"); err != nil {
			return nil, err
		}
		if feedback.ID == solver.ID {
			return nil, fmt.Errorf("mlmt episode: solver and feedback policies share the id %q", solver.ID)
		}
	}
	if v == nil {
		return nil, fmt.Errorf("mlmt episode: no verifier")
	}
	tpl, err := t.compile()
	if err != nil {
		return nil, err
	}
	return &MLMT{Solver: solver, Feedback: feedback, Verifier: v, Limits: lim.withDefaults(), tpl: tpl}, nil
}

type mlmtState struct {
	ex       data.Example
	group    int64
	sample   int
	turns    []data.Turn
	attempt  string
	feedback string
	notes    []string
	done     bool // ended early: final reward 0
}

// Run implements Runner.
func (r *MLMT) Run(ctx context.Context, b Batch) ([]data.Turn, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	outs, err := first(ctx, r.Solver, r.tpl, b)
	if err != nil {
		return nil, err
	}
	var eps []*mlmtState
	for i, ex := range b.Examples {
		for s := range b.N {
			e := &mlmtState{ex: ex, group: b.FirstGroupID + int64(i), sample: s}
			if o := outs[i]; o.err != nil {
				t := failedTurn(r.Solver, "turn 0: "+o.err.Error())
				e.turns, e.done = append(e.turns, t), true
			} else {
				smp := o.res.Samples[s]
				t := turnOf(r.Solver, o.res, smp)
				t.Reward, t.Note = score(ctx, r.Verifier, r.Limits, smp.Text, ex.Ref)
				e.turns = append(e.turns, t)
				q, cut := quote(smp.Text, r.Limits.MaxQuoteBytes)
				e.attempt = q
				if cut {
					e.notes = append(e.notes, "attempt cut for the later prompts")
				}
			}
			eps = append(eps, e)
		}
	}

	// Turn 1: feedback.
	if r.Feedback == nil {
		for _, e := range eps {
			if e.done {
				continue
			}
			if e.feedback, err = r.tpl.render("static_feedback", TemplateData{Problem: e.ex.Prompt, Attempt: e.attempt}); err != nil {
				return nil, err
			}
		}
	} else {
		var live []*mlmtState
		var reqs []engine.Request
		for _, e := range eps {
			if e.done {
				continue
			}
			prompt, err := r.tpl.render("feedback", TemplateData{Problem: e.ex.Prompt, Attempt: e.attempt})
			if err != nil {
				return nil, err
			}
			p := seeded(r.Feedback.Params, e.group, e.sample, 1)
			p.N = 1
			live = append(live, e)
			reqs = append(reqs, engine.Request{ID: episodeID(e.group, e.sample) + "-t1", Messages: userMessage(prompt), Params: p})
		}
		outs, err := generate(ctx, *r.Feedback, reqs)
		if err != nil {
			return nil, err
		}
		for k, e := range live {
			if o := outs[k]; o.err != nil {
				e.turns = append(e.turns, failedTurn(*r.Feedback, "turn 1: "+o.err.Error()))
				e.done = true
				continue
			}
			smp := outs[k].res.Samples[0]
			e.turns = append(e.turns, turnOf(*r.Feedback, outs[k].res, smp))
			q, cut := quote(smp.Text, r.Limits.MaxQuoteBytes)
			e.feedback = q
			if cut {
				e.notes = append(e.notes, "feedback cut for the refine prompt")
			}
		}
	}

	// Turn 2: refine.
	var live []*mlmtState
	var reqs []engine.Request
	for _, e := range eps {
		if e.done {
			continue
		}
		prompt, err := r.tpl.render("refine", TemplateData{Problem: e.ex.Prompt, Attempt: e.attempt, Feedback: e.feedback})
		if err != nil {
			return nil, err
		}
		p := seeded(r.Solver.Params, e.group, e.sample, 2)
		p.N = 1
		live = append(live, e)
		reqs = append(reqs, engine.Request{ID: episodeID(e.group, e.sample) + "-t2", Messages: userMessage(prompt), Params: p})
	}
	outs, err = generate(ctx, r.Solver, reqs)
	if err != nil {
		return nil, err
	}
	final := make(map[*mlmtState]float32)
	for k, e := range live {
		if o := outs[k]; o.err != nil {
			e.turns = append(e.turns, failedTurn(r.Solver, "turn 2: "+o.err.Error()))
			continue
		}
		smp := outs[k].res.Samples[0]
		t := turnOf(r.Solver, outs[k].res, smp)
		t.Reward, t.Note = score(ctx, r.Verifier, r.Limits, smp.Text, e.ex.Ref)
		final[e] = t.Reward
		e.turns = append(e.turns, t)
	}

	var turns []data.Turn
	for _, e := range eps {
		for k := range e.turns {
			t := &e.turns[k]
			turn := k
			if r.Feedback == nil && k == 1 {
				turn = 2 // no feedback row: the refine turn keeps its index
			}
			setEpisode(t, e.group, e.sample, turn)
			t.FinalReward = final[e]
			if turn == 1 {
				t.Reward = final[e] // the feedback is credited with the outcome it led to
			}
			t.Note = joinNotes(append([]string{t.Note}, e.notes...)...)
		}
		turns = append(turns, e.turns...)
	}
	return turns, nil
}
