package train

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

// TurnEval is the evaluation of a multi-turn episode on held-out
// problems: accuracy of the first answer and of the final one (MLMT's
// turn 3, SCoRe's turn 2), their difference, and how often a problem
// flipped (fractions of all problems, as in the SCoRe paper; sampled:
// of all episodes).
type TurnEval struct {
	Episode  string  `json:"episode"`
	Problems int     `json:"problems"`
	Turn1    float64 `json:"turn1_accuracy"`
	Final    float64 `json:"final_accuracy"`
	// FinalStatic is MLMT's turn-3 accuracy with the static feedback text
	// in place of the feedback policy's, on the same first attempts (−1:
	// not measured — static runs, SCoRe, no static text).
	FinalStatic        float64 `json:"final_accuracy_static"`
	Delta              float64 `json:"delta"`
	IncorrectToCorrect float64 `json:"incorrect_to_correct"`
	CorrectToIncorrect float64 `json:"correct_to_incorrect"`
	// Sampled is a sampled evaluation's pass@k and maj@n of the final
	// turn (nil: greedy). The figures above are then means over all
	// Problems × Samples episodes (evalsample.go).
	Sampled *SampledEval `json:"sampled,omitempty"`
}

func (te TurnEval) fill(m *Metrics) {
	v := func(x float64) *float64 { return &x }
	m.EvalAccuracy = v(te.Final)
	m.Turn1Accuracy = v(te.Turn1)
	if te.Episode == EpisodeSCoRe {
		m.Turn2Accuracy = v(te.Final)
	} else {
		m.Turn3Accuracy = v(te.Final)
	}
	if te.FinalStatic >= 0 {
		m.Turn3AccuracyStatic = v(te.FinalStatic)
	}
	m.Delta, m.IncorrectToCorrect, m.CorrectToIncorrect = v(te.Delta), v(te.IncorrectToCorrect), v(te.CorrectToIncorrect)
	m.EvalSampled = te.Sampled
}

// evalTurns is the multi-turn evaluation on probs (from src), scored by
// v: greedy, or cfg.EvalSampling's episodes per problem, each turn of
// each episode with its own seed (evalsample.go).
func evalTurns(ctx context.Context, cfg Config, tpl *compiled, solver, fb *policyEngine, src problemSource, probs []task.Problem, v verify.Verifier) (TurnEval, error) {
	eps := evalEpisodes(probs, cfg.EvalSampling.samples())
	b := episode.Batch{Examples: examplesOf(src, eps), N: 1, Seeds: cfg.evalSeeds(eps)}
	params := cfg.evalParams()
	run := player{cfg: &cfg, tpl: tpl, verifier: v}.runner(*episodePolicy("solver", solver, params), episodePolicy("feedback", fb, params))
	turns, err := run.Run(ctx, b)
	if err == nil {
		err = failedTurns(turns)
	}
	if err != nil {
		return TurnEval{}, err
	}
	played := outcomes(turns, "solver")
	n := float64(len(eps))
	te := TurnEval{Episode: cfg.Episode, Problems: len(probs), FinalStatic: -1}
	for _, e := range played {
		te.Turn1 += e.first / n
		te.Final += e.final / n
		switch {
		case e.first < 1 && e.final == 1:
			te.IncorrectToCorrect += 1 / n
		case e.first == 1 && e.final < 1:
			te.CorrectToIncorrect += 1 / n
		}
	}
	te.Delta = te.Final - te.Turn1
	if cfg.EvalSampling.sampled() {
		rewards, texts := make([]float64, 0, len(played)), make([]string, 0, len(played))
		for i, t := range turns {
			if i+1 == len(turns) || turns[i+1].EpisodeID != t.EpisodeID {
				rewards, texts = append(rewards, t.FinalReward), append(texts, t.ResponseText)
			}
		}
		te.Sampled = sampledEval(cfg, rewards, texts)
	}
	if mlmt, ok := run.(*episode.MLMT); ok && fb != nil && tpl.staticFeedback != nil {
		// The same first attempts and seeds as with the policy's
		// feedback: the comparison differs in the feedback text only.
		static, err := mlmt.RefineStatic(ctx, b, turns)
		if err == nil {
			err = failedTurns(static)
		}
		if err != nil {
			return TurnEval{}, err
		}
		te.FinalStatic = 0
		for _, e := range outcomes(static, "solver") {
			te.FinalStatic += e.final / n
		}
	}
	return te, nil
}

func (r *run) feedbackEngine() *policyEngine {
	if r.feedback == nil {
		return nil
	}
	return r.feedback.eng
}

// warmupMultiTurn is the SFT warm-up of multi-turn runs: each step draws
// problems, samples the solver's first attempts from its current weights
// (so the later prompts look like those of RL), and trains the solver on
// the reference answer after the first prompt and after the later one,
// and the feedback policy on the reference feedback
// (FeedbackAnswerTemplate, which may show the hint); both learn the
// formats. With static feedback the later prompt carries the static text.
func (r *run) warmupMultiTurn(ctx context.Context) error {
	cfg := r.cfg
	eos, ok := r.solver.tok.TokenID(tokenizer.EndOfText)
	if !ok {
		return fmt.Errorf("driver: the tokenizer has no %s token to end answers with", tokenizer.EndOfText)
	}
	sft := func(tok *tokenizer.Tokenizer, b *learner.Batch, prompt []int32, target string) {
		b.Prompts = append(b.Prompts, prompt)
		b.Responses = append(b.Responses, append(toInt32(tok.Encode(target)), int32(eos)))
	}
	pr := prompter{r.tpl}
	for r.step < cfg.WarmupSteps {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("driver: warm-up step %d: %w", r.step+1, err)
		}
		t0 := time.Now()
		from := r.cursor
		probs, err := r.nextProblems(cfg.WarmupBatch)
		if err != nil {
			return err
		}
		// The solver's first attempts, unscored.
		exs := examplesOf(r.src, probs)
		attempts := &episode.SingleTurn{Solver: *episodePolicy(r.solver.id, r.solver.eng, cfg.rlParams()), Prompter: pr, Limits: quoteLimits}
		turns, err := attempts.Run(ctx, episode.Batch{Examples: exs, N: 1, FirstGroupID: int64(from), Seeds: rlSeeds(&r.cfg, from, r.cursor)})
		if err == nil {
			err = failedTurns(turns)
		}
		if err != nil {
			return fmt.Errorf("driver: warm-up step %d: %w", r.step+1, err)
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
				d := TemplateData{Question: p.Question, Hint: p.Hint, Answer: p.Answer, Attempt: attempt}
				var fbText string
				if r.feedback == nil {
					fbText = render(r.tpl.staticFeedback, d)
				} else {
					fbText = render(r.tpl.feedbackAnswer, d)
					sft(r.feedback.tok, &fbb, toInt32(r.feedback.tok.Encode(render(r.tpl.feedback, d))), fbText)
				}
				later, _ = pr.Refine(exs[j], attempt, fbText)
			}
			sft(r.solver.tok, &sb, toInt32(r.solver.tok.Encode(later.Text)), answer)
		}
		st, err := r.train(ctx, r.solver, sb)
		if err != nil {
			return err
		}
		m := Metrics{Phase: "warmup"}
		r.fill(&m, st)
		if r.feedback != nil {
			fst, err := r.train(ctx, r.feedback, fbb)
			if err != nil {
				return err
			}
			fillFeedback(&m, fst, cfg.Learner.Algorithm)
		}
		m.TrainSeconds = time.Since(t0).Seconds()
		if err := r.finishWarmupStep(ctx, &m); err != nil {
			return err
		}
	}
	return nil
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
			return fmt.Errorf("driver: set the %s algorithm %s: %w", p.id, l.Algorithm, err)
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

// heldOutProblems takes up to n distinct held-out problems: the ones every
// evaluation of a config uses, in order.
func heldOutProblems(gen *task.Generator, n int) ([]task.Problem, error) {
	var out []task.Problem
	seen := map[string]bool{}
	for i := 0; i < 50*n && len(out) < n; i++ {
		p, err := gen.Problem(task.HeldOut, i)
		if err != nil {
			return nil, fmt.Errorf("held-out problem %d: %w", i, err)
		}
		if !seen[p.Question] {
			seen[p.Question] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the task has no held-out problems")
	}
	return out, nil
}

// EvaluateCheckpoint evaluates the multi-turn episode of cfg greedily on
// its held-out problems (the EvalProblems the run evaluates on: the
// task's, or the dataset's eval file or held-out rows), scored by cfg's
// verifier, with the checkpoint in dir: the solver from dir, MLMT's feedback policy (when
// cfg.Feedback is set) from dir/feedback — the layout Run writes.
func EvaluateCheckpoint(ctx context.Context, cfg Config, dir string) (TurnEval, error) {
	if !cfg.multiTurn() {
		return TurnEval{}, fmt.Errorf("driver: evaluate %s: episode %q is not multi-turn", dir, cfg.Episode)
	}
	cfg.Out = dir // validate wants a run directory; nothing is written
	tpl, err := cfg.validate()
	if err != nil {
		return TurnEval{}, err
	}
	if cfg.EvalProblems <= 0 {
		return TurnEval{}, fmt.Errorf("driver: evaluate %s: eval_problems %d: want > 0", dir, cfg.EvalProblems)
	}
	cfg.EvalEvery = max(cfg.EvalEvery, 1) // a dataset source holds out EvalProblems
	src, err := newSource(cfg)
	if err != nil {
		return TurnEval{}, err
	}
	probs, err := src.heldOut(cfg.EvalProblems)
	if err != nil {
		return TurnEval{}, fmt.Errorf("driver: %w", err)
	}
	v, err := newVerifier(cfg)
	if err != nil {
		return TurnEval{}, err
	}
	batch := cfg.EngineBatch
	if batch == 0 {
		batch = 256
	}
	solver, err := native.Load(dir, native.Config{MaxBatch: batch, MaxStepTokens: 4096})
	if err != nil {
		return TurnEval{}, fmt.Errorf("driver: load solver %s: %w", dir, err)
	}
	defer solver.Close()
	var fb *native.Engine
	if cfg.Feedback != nil {
		fdir := filepath.Join(dir, FeedbackDir)
		if _, err := os.Stat(fdir); err != nil {
			return TurnEval{}, fmt.Errorf("driver: the recipe has a feedback policy, but %s has none: %w", dir, err)
		}
		if fb, err = native.Load(fdir, native.Config{MaxBatch: batch, MaxStepTokens: 4096}); err != nil {
			return TurnEval{}, fmt.Errorf("driver: load feedback policy %s: %w", fdir, err)
		}
		defer fb.Close()
	}
	var fbe *policyEngine
	if fb != nil {
		fbe = &policyEngine{Engine: fb, tok: fb.Tokenizer()}
	}
	te, err := evalTurns(ctx, cfg, tpl, &policyEngine{Engine: solver, tok: solver.Tokenizer()}, fbe, src, probs, v)
	if err != nil {
		return TurnEval{}, fmt.Errorf("driver: evaluate %s: %w", dir, err)
	}
	return te, nil
}
