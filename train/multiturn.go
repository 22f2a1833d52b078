package train

// Multi-turn runs: the SFT warm-up of MLMT and SCoRe, and the feedback
// policy's algorithm and metrics.

import (
	"context"
	"fmt"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/task"
)

// feedbackEngine is the feedback policy's engine; nil without one.
func (r *run) feedbackEngine() *policyEngine {
	if r.cfg.SharedWeights {
		return r.solver.eng
	}
	if r.feedback == nil {
		return nil
	}
	return r.feedback.eng
}

// warmupStepMultiTurn is a step of the SFT warm-up of multi-turn runs: it draws
// problems, samples the solver's first attempts from its current weights
// (so the later prompts look like those of RL), and trains the solver on
// the reference answer after the first prompt and after the later one,
// and the feedback policy on the reference feedback
// (FeedbackAnswerTemplate, which may show the hint); both learn the
// formats. The later prompt shows RefineFeedbackTemplate's feedback
// (FeedbackAnswerTemplate's when it is not set); with static feedback,
// the static text.
func (r *run) warmupStepMultiTurn(ctx context.Context) (Metrics, error) {
	cfg := r.cfg
	eos, err := endOfText(r.solver.tok)
	if err != nil {
		return Metrics{}, err
	}
	sft := func(tok *tokenizer.Tokenizer, b *learner.Batch, prompt []int32, target string) {
		b.Prompts = append(b.Prompts, prompt)
		b.Responses = append(b.Responses, append(toInt32(tok.Encode(target)), int32(eos)))
	}
	pr := prompter{r.tpl}
	t0 := time.Now()
	from := r.cursor
	probs, err := r.nextProblems(cfg.WarmupBatch)
	if err != nil {
		return Metrics{}, err
	}
	// The solver's first attempts, unscored.
	exs := examplesOf(r.src, probs)
	attempts := &episode.SingleTurn{Solver: *episodePolicy(r.solver.id, r.solver.eng, cfg.rlParams()), Prompter: pr, Limits: quoteLimits}
	turns, err := attempts.Run(ctx, episode.Batch{Examples: exs, N: 1, FirstGroupID: int64(from), Seeds: rlSeeds(&r.cfg, from, r.cursor)})
	if err == nil {
		err = failedTurns(turns)
	}
	if err != nil {
		return Metrics{}, fmt.Errorf("warm-up step %d: %w", r.step+1, err)
	}
	var sb, fbb learner.Batch
	for j, p := range probs {
		answer := render(r.tpl.answer, TemplateData{Question: p.Question, Answer: p.Answer})
		sft(r.solver.tok, &sb, turns[j].PromptIDs, answer)
		attempt, _ := quoteLimits.Quote(turns[j].ResponseText)
		var later episode.Prompt
		if cfg.Episode == EpisodeSCoRe {
			later, _ = pr.Review(exs[j], attempt)
		} else {
			d := TemplateData{Question: p.Question, Hint: p.Hint, AnyHint: r.src.anyHint(p), Answer: p.Answer, Attempt: attempt}
			var fbText string
			switch {
			case r.cfg.SharedWeights: // one model in both roles: one batch
				fbText = render(r.tpl.refineFeedback, d)
				sft(r.solver.tok, &sb, toInt32(r.solver.tok.Encode(render(r.tpl.feedback, d))), render(r.tpl.feedbackAnswer, d))
			case r.feedback == nil:
				fbText = render(r.tpl.staticFeedback, d)
			default:
				fbText = render(r.tpl.refineFeedback, d)
				sft(r.feedback.tok, &fbb, toInt32(r.feedback.tok.Encode(render(r.tpl.feedback, d))), render(r.tpl.feedbackAnswer, d))
			}
			later, _ = pr.Refine(exs[j], attempt, fbText)
		}
		sft(r.solver.tok, &sb, toInt32(r.solver.tok.Encode(later.Text)), answer)
	}
	st, err := r.train(ctx, r.solver, sb)
	if err != nil {
		return Metrics{}, err
	}
	m := Metrics{Phase: "warmup"}
	r.fill(&m, st)
	if r.feedback != nil {
		fst, err := r.train(ctx, r.feedback, fbb)
		if err != nil {
			return Metrics{}, err
		}
		fillFeedback(&m, fst, cfg.Learner.Algorithm)
	}
	m.TrainSeconds = time.Since(t0).Seconds()
	return m, nil
}

// setRLAlgorithms switches every policy's learner to its RL algorithm
// and learning rate: the solver to Learner's, MLMT's feedback policy to
// its own (FeedbackPolicy.Algorithm and LR, defaulting to the solver's).
func (r *run) setRLAlgorithms(ctx context.Context) error {
	for _, p := range []*policy{r.solver, r.feedback} {
		if p == nil {
			continue
		}
		l := r.cfg.Learner
		if p == r.feedback {
			l = r.cfg.Feedback.learnerConfig(r.cfg)
		}
		if err := p.learner.SetAlgorithm(ctx, l.Algorithm, l.LR); err != nil {
			return fmt.Errorf("set the %s algorithm %s: %w", p.id, l.Algorithm, err)
		}
	}
	return nil
}

func fillFeedback(m *Metrics, st learner.Stats, algorithm string) {
	m.FeedbackLoss, m.FeedbackGradNorm, m.FeedbackEntropy, m.FeedbackLR = &st.Loss, &st.GradNorm, &st.Entropy, &st.LR
	if m.Phase == "rl" && algorithm == learner.PPO {
		m.FeedbackValueLoss, m.FeedbackExplainedVar = &st.ValueLoss, &st.ExplainedVar
	}
}

// heldOutExhausted is how many draws in a row that bring no new problem
// end heldOutProblems' search: the task's held-out split has no more.
const heldOutExhausted = 100_000

// heldOutProblems takes n distinct held-out problems: the ones every
// evaluation of a config uses, in order. A task with fewer is an error
// that names eval.held_out and what the task has; it used to return the
// ones it found, and to look through 50·n draws first (an hour, past any
// stop, for eval.held_out: 1000000 on a small task).
func heldOutProblems(gen *task.Generator, n int) ([]task.Problem, error) {
	var out []task.Problem
	seen := map[string]bool{}
	for i, misses := 0, 0; i < 50*n && len(out) < n && misses < heldOutExhausted; i++ {
		p, err := gen.Problem(task.HeldOut, i)
		if err != nil {
			return nil, fmt.Errorf("held-out problem %d: %w", i, err)
		}
		if seen[p.Question] {
			misses++
			continue
		}
		seen[p.Question] = true
		out = append(out, p)
		misses = 0
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the task has no held-out problems")
	}
	if len(out) < n {
		return nil, fmt.Errorf("eval.held_out is %d, but the task's held-out split has %d distinct problems: set eval.held_out to %d or fewer", n, len(out), len(out))
	}
	return out, nil
}
