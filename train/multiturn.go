package train

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
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

// sampling is how one turn samples.
type sampling struct {
	n, maxTokens int
	temp, topP   float64
	seed         *int64  // request i gets *seed + i
	seeds        []int64 // request i gets seeds[i] (evaluation; over seed)
}

// rollouts are multi-turn episodes in progress: n per problem, flat index
// i*n + s for sample s of problem i.
type rollouts struct {
	n        int
	probs    []task.Problem
	refs     []verify.Reference // per problem: what its answers are verified against
	first    []engine.Result    // per problem, n samples
	r1       []float64
	attempts []string
	fb       []engine.Result // per episode; nil with static feedback
	fbText   []string
	final    []engine.Result // per episode
	r2       []float64
}

func newRollouts(probs []task.Problem, n int, src problemSource) *rollouts {
	refs := make([]verify.Reference, len(probs))
	for i, p := range probs {
		refs[i] = src.reference(p)
	}
	return &rollouts{n: n, probs: probs, refs: refs}
}

// scorer scores answers against their references: the run's verifier
// (math, gsm8k or code in the sandbox) on its verification workers.
type scorer func(ctx context.Context, jobs []verifyJob) ([]verify.Result, error)

// rewards scores texts[j] against the reference of problem j/per.
func (x *rollouts) rewards(ctx context.Context, score scorer, texts []string, per int) ([]float64, error) {
	jobs := make([]verifyJob, len(texts))
	for j, t := range texts {
		jobs[j] = verifyJob{t, x.refs[j/per]}
	}
	vs, err := score(ctx, jobs)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(vs))
	for j, v := range vs {
		out[j] = v.Reward
	}
	return out, nil
}

func (x *rollouts) prob(j int) task.Problem { return x.probs[j/x.n] }

// generateTexts runs one request per prompt on eng.
func generateTexts(ctx context.Context, eng engine.Engine, tok *tokenizer.Tokenizer, id string, prompts []string, sp sampling) ([]engine.Result, error) {
	reqs := make([]engine.Request, len(prompts))
	for i, p := range prompts {
		params := engine.SamplingParams{N: sp.n, MaxTokens: sp.maxTokens, Temperature: sp.temp, TopP: sp.topP}
		if sp.seeds != nil {
			params.Seed = &sp.seeds[i]
		} else if sp.seed != nil {
			s := *sp.seed + int64(i)
			params.Seed = &s
		}
		reqs[i] = engine.Request{ID: fmt.Sprintf("%s-%d", id, i), Prompt: tok.Encode(p), Params: params}
	}
	res, err := eng.Generate(ctx, reqs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	if len(res) != len(reqs) {
		return nil, fmt.Errorf("%s: engine returned %d results for %d requests", id, len(res), len(reqs))
	}
	for i := range res {
		if len(res[i].Samples) != max(sp.n, 1) {
			return nil, fmt.Errorf("%s: request %d: engine returned %d samples, want %d", id, i, len(res[i].Samples), max(sp.n, 1))
		}
	}
	return res, nil
}

// quoteLimit bounds an answer quoted inside a later prompt.
const quoteLimit = 256

func quoteAnswer(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > quoteLimit {
		s = strings.ToValidUTF8(s[:quoteLimit], "")
	}
	return s
}

// firstTurn: the solver answers every problem n times; score (nil: the
// warm-up, which needs no rewards) scores the answers.
func (x *rollouts) firstTurn(ctx context.Context, solver *policyEngine, tpl *compiled, sp sampling, score scorer) error {
	prompts := make([]string, len(x.probs))
	for i, p := range x.probs {
		prompts[i] = render(tpl.prompt, TemplateData{Question: p.Question})
	}
	sp.n = x.n
	res, err := generateTexts(ctx, solver, solver.Tokenizer(), "turn1", prompts, sp)
	if err != nil {
		return err
	}
	x.first = res
	x.r1, x.attempts = nil, nil
	var texts []string
	for _, rr := range res {
		for _, s := range rr.Samples {
			texts = append(texts, s.Text)
			x.attempts = append(x.attempts, quoteAnswer(s.Text))
		}
	}
	if score == nil {
		return nil
	}
	x.r1, err = x.rewards(ctx, score, texts, x.n)
	return err
}

// feedbackTurn writes MLMT's feedback: the feedback policy's (fb set) or
// the static text.
func (x *rollouts) feedbackTurn(ctx context.Context, fb *policyEngine, tpl *compiled, sp sampling) error {
	x.fb, x.fbText = nil, make([]string, len(x.attempts))
	if fb == nil {
		for j, a := range x.attempts {
			x.fbText[j] = render(tpl.staticFeedback, TemplateData{Question: x.prob(j).Question, Attempt: a})
		}
		return nil
	}
	prompts := make([]string, len(x.attempts))
	for j, a := range x.attempts {
		p := x.prob(j)
		prompts[j] = render(tpl.feedback, TemplateData{Question: p.Question, Hint: p.Hint, Attempt: a})
	}
	sp.n = 1
	res, err := generateTexts(ctx, fb, fb.Tokenizer(), "feedback", prompts, sp)
	if err != nil {
		return err
	}
	x.fb = res
	for j, rr := range res {
		x.fbText[j] = quoteAnswer(rr.Samples[0].Text)
	}
	return nil
}

// laterPrompt is the solver's final-turn prompt of episode j.
func (x *rollouts) laterPrompt(cfg *Config, tpl *compiled, j int) string {
	p := x.prob(j)
	d := TemplateData{Question: p.Question, Attempt: x.attempts[j]}
	if cfg.Episode == EpisodeSCoRe {
		return render(tpl.prompt, d) + x.attempts[j] + "\n" + render(tpl.review, d) + "\n"
	}
	d.Feedback = x.fbText[j]
	return render(tpl.refine, d)
}

// finalTurn: the solver answers again (MLMT refine, SCoRe second turn),
// scored by score.
func (x *rollouts) finalTurn(ctx context.Context, cfg *Config, solver *policyEngine, tpl *compiled, sp sampling, score scorer) error {
	prompts := make([]string, len(x.attempts))
	for j := range x.attempts {
		prompts[j] = x.laterPrompt(cfg, tpl, j)
	}
	sp.n = 1
	res, err := generateTexts(ctx, solver, solver.Tokenizer(), "final", prompts, sp)
	if err != nil {
		return err
	}
	texts := make([]string, len(res))
	for j, rr := range res {
		texts[j] = rr.Samples[0].Text
	}
	x.final = res
	x.r2, err = x.rewards(ctx, score, texts, x.n)
	return err
}

// evalTurns is the multi-turn evaluation on probs (from src), scored by
// score: greedy, or cfg.EvalSampling's episodes per problem, each turn of
// each episode with its own seed (evalsample.go).
func evalTurns(ctx context.Context, cfg Config, tpl *compiled, solver, fb *policyEngine, src problemSource, probs []task.Problem, score scorer) (TurnEval, error) {
	eps := evalEpisodes(probs, cfg.EvalSampling.samples())
	x := newRollouts(eps, 1, src)
	if err := x.firstTurn(ctx, solver, tpl, cfg.evalTurnSampling(eps, 1), score); err != nil {
		return TurnEval{}, err
	}
	if cfg.Episode == EpisodeMLMT {
		if err := x.feedbackTurn(ctx, fb, tpl, cfg.evalTurnSampling(eps, 2)); err != nil {
			return TurnEval{}, err
		}
	}
	final := cfg.evalTurnSampling(eps, 3)
	if err := x.finalTurn(ctx, &cfg, solver, tpl, final, score); err != nil {
		return TurnEval{}, err
	}
	n := float64(len(eps))
	te := TurnEval{Episode: cfg.Episode, Problems: len(probs), FinalStatic: -1}
	for j := range eps {
		te.Turn1 += x.r1[j] / n
		te.Final += x.r2[j] / n
		switch {
		case x.r1[j] < 1 && x.r2[j] == 1:
			te.IncorrectToCorrect += 1 / n
		case x.r1[j] == 1 && x.r2[j] < 1:
			te.CorrectToIncorrect += 1 / n
		}
	}
	te.Delta = te.Final - te.Turn1
	if cfg.EvalSampling.sampled() {
		texts := make([]string, len(x.final))
		for j, rr := range x.final {
			texts[j] = rr.Samples[0].Text
		}
		te.Sampled = sampledEval(cfg, x.r2, texts)
	}
	if cfg.Episode == EpisodeMLMT && fb != nil && tpl.staticFeedback != nil {
		if err := x.feedbackTurn(ctx, nil, tpl, final); err != nil {
			return TurnEval{}, err
		}
		// The same seeds as with the policy's feedback: the comparison
		// differs in the feedback text only.
		if err := x.finalTurn(ctx, &cfg, solver, tpl, final, score); err != nil {
			return TurnEval{}, err
		}
		te.FinalStatic = 0
		for _, r := range x.r2 {
			te.FinalStatic += r / n
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

// seedAt is the first sampling seed of turn t of the step whose problems
// end at the data cursor; request i of the turn gets seedAt + i. The
// (seed, cursor, turn) triple is hashed so that the seed ranges of
// different steps and turns do not overlap in practice.
func (r *run) seedAt(turn int) *int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%d", r.cfg.Seed, r.cursor, turn)
	s := int64(h.Sum64() >> 2) // room for + i without overflow
	return &s
}

func (r *run) rlSampling(turn int) sampling {
	return sampling{maxTokens: r.cfg.MaxTokens, temp: r.cfg.Temperature, topP: r.cfg.TopP, seed: r.seedAt(turn)}
}

func (r *run) nextProblems(n int) ([]task.Problem, error) {
	probs := make([]task.Problem, n)
	for i := range probs {
		p, err := r.nextTrain()
		if err != nil {
			return nil, err
		}
		probs[i] = p
	}
	return probs, nil
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
	sft := func(tok *tokenizer.Tokenizer, b *learner.Batch, prompt []int, target string) {
		b.Prompts = append(b.Prompts, toInt32(prompt))
		b.Responses = append(b.Responses, append(toInt32(tok.Encode(target)), int32(eos)))
	}
	for r.step < cfg.WarmupSteps {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("driver: warm-up step %d: %w", r.step+1, err)
		}
		t0 := time.Now()
		probs, err := r.nextProblems(cfg.WarmupBatch)
		if err != nil {
			return err
		}
		x := newRollouts(probs, 1, r.src)
		if err := x.firstTurn(ctx, r.solver.eng, r.tpl, r.rlSampling(0), nil); err != nil {
			return fmt.Errorf("driver: warm-up step %d: %w", r.step+1, err)
		}
		var sb, fbb learner.Batch
		x.fbText = make([]string, len(probs))
		for j, p := range probs {
			answer := render(r.tpl.answer, TemplateData{Question: p.Question, Answer: p.Answer})
			sft(r.solver.tok, &sb, x.first[j].PromptTokenIDs, answer)
			if cfg.Episode == EpisodeMLMT {
				d := TemplateData{Question: p.Question, Hint: p.Hint, Answer: p.Answer, Attempt: x.attempts[j]}
				if r.feedback == nil {
					x.fbText[j] = render(r.tpl.staticFeedback, d)
				} else {
					x.fbText[j] = render(r.tpl.feedbackAnswer, d)
					sft(r.feedback.tok, &fbb, r.feedback.tok.Encode(render(r.tpl.feedback, d)), x.fbText[j])
				}
			}
			sft(r.solver.tok, &sb, r.solver.tok.Encode(x.laterPrompt(&cfg, r.tpl, j)), answer)
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

// reinforceMultiTurn is the RL loop of MLMT and SCoRe episodes. Each step
// plays GroupSize episodes per prompt and trains:
//   - the solver (unless FreezeSolver) on its first attempts (reward:
//     their score) and, unless StopGradient, on its final answers (MLMT:
//     their score; SCoRe: r2 + α(r2 − r1)), as two GRPO groups per
//     prompt;
//   - the feedback policy (MLMT, Feedback.Train) on its feedback, rewarded
//     with the final score or its improvement over the first attempt,
//     one group per prompt.
//
// With PPO each policy's learner has its own value head, and every turn's
// response is a sequence of its own, as in single-turn PPO: the turn's
// reward above sits on its last token, GAE runs over that response with
// the critic's values of the turn's prompt and response, and nothing is
// bootstrapped across turns (turn 1's value target is its own score, not
// the episode's final one: the turns are trained as GRPO trains them,
// only the advantage estimator changes).
func (r *run) reinforceMultiTurn(ctx context.Context, first int) error {
	cfg := r.cfg
	trainFeedback := r.feedback != nil && cfg.Feedback.Train
	// Asynchronous runs play up to MaxStaleness steps' episodes ahead
	// while this one trains (multiturn_batch.go); synchronous ones play
	// each step's on the newest weights.
	async := cfg.MaxStaleness > 0
	pipe := newPipeline(ctx, r, r.startEpisodes)
	defer pipe.close()
	for k := first; k <= cfg.Steps; k++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("driver: step %d: %w", r.step+1, err)
		}
		t0 := time.Now()
		batch, err := pipe.next(ctx, k)
		if err != nil {
			return err
		}
		x, probs := batch.x, batch.x.probs
		gen := batch.genSeconds
		if !async {
			gen = time.Since(t0).Seconds()
		}
		lag, err := r.checkLag(batch.onPolicy, batch.lowestVersion())
		if err != nil {
			return err
		}

		var sb, fbb learner.Batch
		add := func(b *learner.Batch, res engine.Result, s engine.Sample, rw float64, group int64) {
			b.Prompts = append(b.Prompts, toInt32(res.PromptTokenIDs))
			b.Responses = append(b.Responses, toInt32(s.TokenIDs))
			b.SampleLogProbs = append(b.SampleLogProbs, append([]float32(nil), s.LogProbs...))
			b.Rewards = append(b.Rewards, rw)
			b.GroupIDs = append(b.GroupIDs, group)
		}
		var r1Sum, r2Sum, respLen float64
		var allRight, noneRight int
		n := cfg.GroupSize
		for i := range probs {
			g := int64(batch.firstGroup + i)
			for s, smp := range x.first[i].Samples {
				add(&sb, x.first[i], smp, x.r1[i*n+s], 2*g)
			}
			right := 0
			for s := range n {
				j := i*n + s
				r1Sum += x.r1[j]
				r2Sum += x.r2[j]
				respLen += float64(len(x.final[j].Samples[0].TokenIDs))
				if x.r2[j] == 1 {
					right++
				}
			}
			switch right {
			case n:
				allRight++
			case 0:
				noneRight++
			}
			if !cfg.StopGradient {
				for s := range n {
					j := i*n + s
					rw := x.r2[j]
					if cfg.Episode == EpisodeSCoRe {
						rw += cfg.ScoreAlpha * (x.r2[j] - x.r1[j])
					}
					add(&sb, x.final[j], x.final[j].Samples[0], rw, 2*g+1)
				}
			}
			if trainFeedback {
				for s := range n {
					j := i*n + s
					rw := x.r2[j]
					if cfg.FeedbackReward == FeedbackRewardImprovement {
						rw -= x.r1[j]
					}
					add(&fbb, x.fb[j], x.fb[j].Samples[0], rw, g)
				}
			}
		}
		t1 := time.Now()
		var st learner.Stats
		if cfg.FreezeSolver {
			r.step++ // the run's step, with no solver step in it
		} else if st, err = r.train(ctx, r.solver, sb); err != nil {
			return err
		}
		m := Metrics{Phase: "rl"}
		r.fill(&m, st)
		if cfg.FreezeSolver {
			m.ValueLoss, m.ValueClipFrac, m.ExplainedVar = nil, nil, nil
		}
		if trainFeedback {
			fst, err := r.train(ctx, r.feedback, fbb)
			if err != nil {
				return err
			}
			fillFeedback(&m, fst, cfg.Feedback.learnerConfig(cfg).Algorithm)
		}
		eps := float64(len(x.r2))
		final, turn1 := r2Sum/eps, r1Sum/eps
		m.RewardMean, m.Turn1RewardMean = &final, &turn1
		m.ResponseLenMean = respLen / eps
		m.SolvedAllFrac = float64(allRight) / float64(len(probs))
		m.SolvedNoneFrac = float64(noneRight) / float64(len(probs))
		m.GenSeconds, m.TrainSeconds = gen, time.Since(t1).Seconds()
		m.WeightLag = &lag
		if err := r.finishRLStep(ctx, &m, k); err != nil {
			return err
		}
	}
	return nil
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
	score := func(ctx context.Context, jobs []verifyJob) ([]verify.Result, error) {
		return verifyAll(ctx, v, cfg.verifyWorkers(), jobs)
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
	te, err := evalTurns(ctx, cfg, tpl, &policyEngine{Engine: solver, tok: solver.Tokenizer()}, fbe, src, probs, score)
	if err != nil {
		return TurnEval{}, fmt.Errorf("driver: evaluate %s: %w", dir, err)
	}
	return te, nil
}
