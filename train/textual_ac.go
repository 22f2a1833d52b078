package train

import (
	"context"
	"fmt"
	"math"

	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/task"
)

// The textual actor-critic (hierarchical in-context RL) on MLMT's
// episode: turn 0 is the solver's answer to the problem alone, turn 1 the
// context generator's text c (its prompt has the problem and the hint, no
// attempt), turn 2 the solver's answer y to the problem with c. The
// generator's turn is rewarded by rl.ContextRewards: the answer's reward,
// the solver's mean log-probability of the verified answer y* given c,
// and log π(y | x, c) − log π(y | x), both scored on the solver's engine
// with the weights that sampled the episode.

// validateHierarchy checks TextualAC and UpdateRatio.
func (c *Config) validateHierarchy() error {
	if h, l := c.UpdateRatio[0], c.UpdateRatio[1]; h != 0 || l != 0 {
		switch {
		case h < 1 || l < 1:
			return fmt.Errorf("train config: update_ratio %d:%d: want both ≥ 1", h, l)
		case c.Episode != EpisodeMLMT || c.Feedback == nil || !c.Feedback.Train || c.FreezeSolver:
			return fmt.Errorf("train config: update_ratio %d:%d: alternates the feedback policy's and the solver's updates: needs episode mlmt with both trained", h, l)
		case c.BiLevel != nil:
			return fmt.Errorf("train config: update_ratio %d:%d: not with bi_level", h, l)
		}
	}
	if c.SharedWeights {
		f := c.Feedback
		switch {
		case c.Episode != EpisodeMLMT || f == nil || !f.Train || c.FreezeSolver:
			return fmt.Errorf("train config: shared_weights: one model in the solver's and the feedback policy's roles: needs episode mlmt with both trained")
		case c.BiLevel != nil:
			return fmt.Errorf("train config: shared_weights: not with bi_level (its value head lives on a feedback model of its own)")
		case c.FeedbackRollout != nil || c.FeedbackVLLM != nil:
			return fmt.Errorf("train config: shared_weights: the feedback role generates on the solver's engines (feedback_rollout, feedback_vllm set)")
		case f.Algorithm != "" && f.Algorithm != c.Learner.Algorithm, f.LR != 0 && f.LR != c.Learner.LR, f.LoRA != nil:
			return fmt.Errorf("train config: shared_weights: one learner trains both roles: the feedback policy's algorithm %q, lr %v and LoRA (%v) must be the solver's", f.Algorithm, f.LR, f.LoRA != nil)
		}
	}
	ac := c.TextualAC
	if ac == nil {
		return nil
	}
	switch {
	case c.Episode != EpisodeMLMT || c.Feedback == nil:
		return fmt.Errorf("train config: textual_ac: needs episode mlmt with a feedback policy (the context generator)")
	case c.BiLevel != nil:
		return fmt.Errorf("train config: textual_ac: not with bi_level")
	case c.FeedbackReward == FeedbackRewardImprovement:
		return fmt.Errorf("train config: textual_ac: the context's reward builds on the final reward (feedback_reward is %q)", c.FeedbackReward)
	case c.Rollout != nil || c.VLLM != nil || c.MaxStaleness > 0:
		return fmt.Errorf("train config: textual_ac: the solver's engine scores its answers: it must run in process, synchronously (no rollout actors, vLLM or max_staleness)")
	case !(ac.ConfidenceCoef >= 0) || !(ac.DependenceCoef >= 0) || math.IsInf(ac.ConfidenceCoef, 0) || math.IsInf(ac.DependenceCoef, 0):
		return fmt.Errorf("train config: textual_ac: coefficients %v, %v: want finite and ≥ 0", ac.ConfidenceCoef, ac.DependenceCoef)
	}
	return nil
}

// contextStats are an RL batch's measured context terms, means over its
// episodes with a context.
type contextStats struct {
	confidence, dependence float64
	n                      int
}

// contextRewards adds the context terms to the generator's turns of
// turns (one RL batch of probs, group i = firstGroup + i) and returns the
// batch's means. sc scores on the solver's engine.
func (r *run) contextRewards(ctx context.Context, sc engine.Scorer, turns []data.Turn, probs []task.Problem, firstGroup int) (contextStats, error) {
	eos, err := endOfText(r.solver.tok)
	if err != nil {
		return contextStats{}, fmt.Errorf("textual actor-critic: %w", err)
	}
	type episodeRows struct{ first, context, answer int }
	var eps []episodeRows
	byID := map[string]int{}
	for i, t := range turns {
		k, seen := byID[t.EpisodeID]
		if !seen {
			k = len(eps)
			byID[t.EpisodeID] = k
			eps = append(eps, episodeRows{-1, -1, -1})
		}
		switch t.Turn {
		case 0:
			eps[k].first = i
		case 1:
			eps[k].context = i
		case 2:
			eps[k].answer = i
		}
	}
	var live []episodeRows
	var reqs []engine.ScoreRequest
	for _, e := range eps {
		if e.first < 0 || e.context < 0 || e.answer < 0 || turns[e.answer].FinishReason == "error" || len(turns[e.answer].ResponseIDs) == 0 {
			continue // ended early: the context keeps the final reward
		}
		a := turns[e.answer]
		g := int(a.GroupID) - firstGroup
		if g < 0 || g >= len(probs) {
			return contextStats{}, fmt.Errorf("textual actor-critic: episode %s: group %d outside the batch", a.EpisodeID, a.GroupID)
		}
		p := probs[g]
		ref := append(r.solver.tok.Encode(render(r.tpl.answer, TemplateData{Question: p.Question, Answer: p.Answer})), eos)
		reqs = append(reqs,
			engine.ScoreRequest{Prompt: toInts(a.PromptIDs), Response: ref},                                // y* | x, c
			engine.ScoreRequest{Prompt: toInts(a.PromptIDs), Response: toInts(a.ResponseIDs)},              // y | x, c
			engine.ScoreRequest{Prompt: toInts(turns[e.first].PromptIDs), Response: toInts(a.ResponseIDs)}) // y | x
		live = append(live, e)
	}
	if len(live) == 0 {
		return contextStats{}, nil
	}
	scores, err := sc.Score(ctx, reqs)
	if err != nil {
		return contextStats{}, fmt.Errorf("textual actor-critic: score the solver's answers: %w", err)
	}
	in := rl.ContextInputs{Success: make([]float64, len(live))}
	for k, e := range live {
		in.Success[k] = turns[e.answer].FinalReward
		in.AnswerLogProbs = append(in.AnswerLogProbs, scores[3*k])
		in.WithContext = append(in.WithContext, scores[3*k+1])
		in.WithoutContext = append(in.WithoutContext, scores[3*k+2])
	}
	cs, err := rl.ContextRewards(*r.cfg.TextualAC, in)
	if err != nil {
		return contextStats{}, fmt.Errorf("textual actor-critic: %w", err)
	}
	st := contextStats{n: len(live)}
	for k, e := range live {
		turns[e.context].Reward = cs.Rewards[k]
		st.confidence += cs.Confidence[k] / float64(len(live))
		st.dependence += cs.Dependence[k] / float64(len(live))
	}
	return st, nil
}

func toInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, v := range ids {
		out[i] = int(v)
	}
	return out
}
