package episode

import (
	"context"
	"fmt"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/verify"
)

// MLMT is the multi-level multi-turn episode of three turns:
//
//   - turn 0: the solver answers the problem (the "attempt");
//   - turn 1: the feedback policy (the higher level, possibly another
//     engine and model) sees problem and attempt and writes feedback — or,
//     with Feedback nil, the static feedback text is the feedback;
//   - turn 2: the solver refines, seeing problem, attempt and feedback.
//
// Rewards: turn 0 carries the attempt's score, turn 2 the refined
// answer's, which is every turn's FinalReward; turn 1 is credited with the
// outcome it led to: the final score, or with FeedbackImprovement the
// final score less the attempt's. Each turn records its own policy id,
// token ids, logprobs and loss mask, so the solver, the feedback policy or
// both can be trained from one batch. With static feedback there is no
// turn-1 row (nothing was generated).
type MLMT struct {
	Solver              Policy
	Feedback            *Policy // nil: static feedback
	Prompter            Prompter
	Verifier            verify.Verifier
	Workers             int // verifications at once; 0: one
	Limits              Limits
	FeedbackImprovement bool
	// ShapeRefine gives the refine turn SCoRe's shaped reward r2 +
	// Alpha·(r2 − r1) (r1 the attempt's score; RL-guided SCoRe) in place
	// of r2; FinalReward stays r2.
	ShapeRefine bool
	Alpha       float64
	// Shared: the feedback policy is the solver's model in a second role
	// (the same id, engine and weights). Without it the ids must differ.
	Shared bool
}

// NewMLMT checks the policies and templates.
func NewMLMT(solver Policy, feedback *Policy, v verify.Verifier, t Templates, lim Limits) (*MLMT, error) {
	if v == nil {
		return nil, fmt.Errorf("mlmt episode: no verifier")
	}
	pr, err := t.Prompter()
	if err != nil {
		return nil, err
	}
	r := &MLMT{Solver: solver, Feedback: feedback, Prompter: pr, Verifier: v, Limits: lim}
	if err := r.check(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *MLMT) check() error {
	if err := r.Solver.check("solver"); err != nil {
		return err
	}
	if r.Feedback != nil {
		if err := r.Feedback.check("feedback"); err != nil {
			return err
		}
		if r.Feedback.ID == r.Solver.ID && !r.Shared {
			return fmt.Errorf("mlmt episode: solver and feedback policies share the id %q", r.Solver.ID)
		}
	}
	return nil
}

type mlmtState struct {
	ex       data.Example
	i, s     int // example, sample
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
	if err := r.check(); err != nil {
		return nil, err
	}
	lim := r.Limits.withDefaults()
	outs, rewards, notes, err := firstScored(ctx, r.Solver, r.Prompter.Solver, r.Verifier, r.Workers, lim, b)
	if err != nil {
		return nil, err
	}
	var eps []*mlmtState
	for i, ex := range b.Examples {
		for s := range b.N {
			e := &mlmtState{ex: ex, i: i, s: s}
			eps = append(eps, e)
			if o := outs[i]; o.err != nil {
				e.turns, e.done = append(e.turns, failedTurn(r.Solver, o, "turn 0: "+o.err.Error())), true
				continue
			}
			smp := outs[i].res.Samples[s]
			t := turnOf(r.Solver, outs[i], smp)
			t.Reward, t.Note = rewards[0], notes[0]
			rewards, notes = rewards[1:], notes[1:]
			e.turns = append(e.turns, t)
			e.setAttempt(smp.Text, lim)
		}
	}
	return r.finish(ctx, b, eps, r.Feedback, lim)
}

func (e *mlmtState) setAttempt(text string, lim Limits) {
	q, cut := lim.Quote(text)
	e.attempt = q
	if cut {
		e.notes = append(e.notes, "attempt cut for the later prompts")
	}
}

// RefineStatic plays turn 2 again after the attempts of played (the rows
// of an earlier Run of b), with the static feedback in place of the
// feedback policy's: a comparison that differs in the feedback text only
// (with b.Seeds, the same seeds too). It returns the episodes' turns 0
// (as played) and 2.
func (r *MLMT) RefineStatic(ctx context.Context, b Batch, played []data.Turn) ([]data.Turn, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	lim := r.Limits.withDefaults()
	eps := make([]*mlmtState, len(b.Examples)*b.N)
	for _, t := range played {
		if t.Turn != 0 {
			continue
		}
		i, s := int(t.GroupID-b.FirstGroupID), int(t.Sample)
		if i < 0 || i >= len(b.Examples) || s < 0 || s >= b.N || eps[i*b.N+s] != nil {
			return nil, fmt.Errorf("mlmt episode: refine %s again: not an episode of the batch, or twice", t.EpisodeID)
		}
		t.Note = ""
		e := &mlmtState{ex: b.Examples[i], i: i, s: s, turns: []data.Turn{t}, done: t.FinishReason == "error"}
		if !e.done {
			e.setAttempt(t.ResponseText, lim)
		}
		eps[i*b.N+s] = e
	}
	for j, e := range eps {
		if e == nil {
			return nil, fmt.Errorf("mlmt episode: refine again: episode %s has no turn 0", episodeID(b.FirstGroupID+int64(j/b.N), j%b.N))
		}
	}
	return r.finish(ctx, b, eps, nil, lim)
}

// finish plays turns 1 (fb's, or the static feedback when fb is nil) and
// 2 of eps and returns every episode's turns.
func (r *MLMT) finish(ctx context.Context, b Batch, eps []*mlmtState, fb *Policy, lim Limits) ([]data.Turn, error) {
	var err error
	if fb == nil {
		for _, e := range eps {
			if e.done {
				continue
			}
			if e.feedback, err = r.Prompter.StaticFeedback(e.ex, e.attempt); err != nil {
				return nil, err
			}
		}
	} else {
		var live []*mlmtState
		var reqs []call
		for _, e := range eps {
			if e.done {
				continue
			}
			prompt, err := r.Prompter.Feedback(e.ex, e.attempt)
			if err != nil {
				return nil, err
			}
			req, err := fb.request(e.id(b)+"-t1", prompt, b.params(fb.Params, StageFeedback, e.i, e.s, 1, 1))
			if err != nil {
				return nil, err
			}
			live = append(live, e)
			reqs = append(reqs, req)
		}
		outs, err := generate(ctx, *fb, reqs)
		if err != nil {
			return nil, err
		}
		for k, e := range live {
			if o := outs[k]; o.err != nil {
				e.turns = append(e.turns, failedTurn(*fb, o, "turn 1: "+o.err.Error()))
				e.done = true
				continue
			}
			smp := outs[k].res.Samples[0]
			e.turns = append(e.turns, turnOf(*fb, outs[k], smp))
			q, cut := lim.Quote(smp.Text)
			e.feedback = q
			if cut {
				e.notes = append(e.notes, "feedback cut for the refine prompt")
			}
		}
	}

	// Turn 2: refine.
	var live []*mlmtState
	var reqs []call
	for _, e := range eps {
		if e.done {
			continue
		}
		prompt, err := r.Prompter.Refine(e.ex, e.attempt, e.feedback)
		if err != nil {
			return nil, err
		}
		req, err := r.Solver.request(e.id(b)+"-t2", prompt, b.params(r.Solver.Params, StageFinal, e.i, e.s, 2, 1))
		if err != nil {
			return nil, err
		}
		live = append(live, e)
		reqs = append(reqs, req)
	}
	outs, err := generate(ctx, r.Solver, reqs)
	if err != nil {
		return nil, err
	}
	var jobs []Answer
	for k, e := range live {
		if outs[k].err == nil {
			jobs = append(jobs, Answer{outs[k].res.Samples[0].Text, e.ex.Ref})
		}
	}
	rewards, notes, err := ScoreAll(ctx, r.Verifier, r.Workers, lim, jobs)
	if err != nil {
		return nil, err
	}
	final := make(map[*mlmtState]float64)
	for k, e := range live {
		if o := outs[k]; o.err != nil {
			e.turns = append(e.turns, failedTurn(r.Solver, o, "turn 2: "+o.err.Error()))
			continue
		}
		t := turnOf(r.Solver, outs[k], outs[k].res.Samples[0])
		t.Reward, t.Note = rewards[0], notes[0]
		rewards, notes = rewards[1:], notes[1:]
		final[e] = t.Reward
		e.turns = append(e.turns, t)
	}

	var turns []data.Turn
	for _, e := range eps {
		g := b.FirstGroupID + int64(e.i)
		for k := range e.turns {
			t := &e.turns[k]
			turn := k
			if fb == nil && k == 1 {
				turn = 2 // no feedback row: the refine turn keeps its index
			}
			setEpisode(t, g, e.s, turn)
			t.FinalReward = final[e]
			if turn == 1 {
				t.Reward = final[e] // the feedback is credited with the outcome it led to
				if r.FeedbackImprovement {
					t.Reward -= e.turns[0].Reward
				}
			}
			if turn == 2 && r.ShapeRefine && t.FinishReason != "error" {
				t.Reward += r.Alpha * (t.Reward - e.turns[0].Reward)
			}
			t.Note = joinNotes(append([]string{t.Note}, e.notes...)...)
		}
		turns = append(turns, e.turns...)
	}
	return turns, nil
}

func (e *mlmtState) id(b Batch) string { return episodeID(b.FirstGroupID+int64(e.i), e.s) }
