package train

// Evaluations on held-out problems, in a run and of a checkpoint: every
// episode type plays through the run's episode player (episodes.go).

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

// SingleEval is a single-turn evaluation on held-out problems.
type SingleEval struct {
	// Accuracy is the mean reward over Problems held-out problems (the
	// driver's eval_accuracy; sampled: over all their answers, mean@n);
	// Correct counts the answers with reward 1.
	Accuracy          float64
	Correct, Problems int
	// Sampled is a sampled evaluation's pass@k and maj@n (nil: greedy).
	Sampled *SampledEval
	// Agent is an agent evaluation's figures (nil: other episodes);
	// Accuracy is then the completion rate, Correct the episodes solved.
	Agent *AgentStats
	// Groups are the figures per value of each eval.group_by column (nil:
	// none).
	Groups []GroupEval
}

// EvaluateSingleCheckpoint evaluates the checkpoint in dir as the driver
// evaluates a single-turn run of cfg: greedy or sampled per
// cfg.EvalSampling (the same seeds), on the same held-out problems (the task's, or the dataset's eval file or held-out rows),
// scored by cfg's verifier (math, gsm8k, or code in the sandbox).
func EvaluateSingleCheckpoint(ctx context.Context, cfg Config, dir string) (SingleEval, error) {
	if cfg.multiTurn() {
		return SingleEval{}, fmt.Errorf("evaluate %s: episode %q is multi-turn (EvaluateCheckpoint)", dir, cfg.Episode)
	}
	cfg.Out = dir // validate wants a run directory; nothing is written
	tpl, err := cfg.validate()
	if err != nil {
		return SingleEval{}, err
	}
	if cfg.EvalProblems <= 0 {
		return SingleEval{}, fmt.Errorf("evaluate %s: eval_problems %d: want > 0", dir, cfg.EvalProblems)
	}
	cfg.EvalEvery = max(cfg.EvalEvery, 1) // the source holds out EvalProblems
	src, err := newSource(ctx, cfg)
	if err != nil {
		return SingleEval{}, err
	}
	probs, err := src.heldOut(cfg.EvalProblems)
	if err != nil {
		return SingleEval{}, fmt.Errorf("pick the evaluation problems: %w", err)
	}
	v, err := newVerifier(cfg)
	if err != nil {
		return SingleEval{}, err
	}
	py, err := newPython(cfg)
	if err != nil {
		return SingleEval{}, err
	}
	batch := cfg.EngineBatch
	if batch == 0 {
		batch = 256
	}
	eng, err := native.LoadContext(ctx, dir, native.Config{MaxBatch: batch, Device: cfg.EngineDevice})
	if err != nil {
		return SingleEval{}, fmt.Errorf("load model %s: %w", dir, err)
	}
	defer eng.Close()
	r := &run{cfg: cfg, tpl: tpl, src: src, verifier: v, python: py, eval: probs,
		solver: &policy{id: "solver", eng: &policyEngine{Engine: eng, tok: eng.Tokenizer(), model: dir}, tok: eng.Tokenizer()}}
	out, err := r.evaluate(ctx)
	if err != nil {
		return SingleEval{}, fmt.Errorf("evaluate %s: %w", dir, err)
	}
	return out, nil
}

// evaluate is the single-turn (and tool) evaluation on the held-out
// problems: accuracy (mean@n), and the sampled figures when it samples.
func (r *run) evaluate(ctx context.Context) (SingleEval, error) {
	n := r.cfg.EvalSampling.samples()
	eps := evalEpisodes(r.eval, n)
	b := episode.Batch{Examples: examplesOf(r.src, eps), N: 1, Seeds: r.cfg.evalSeeds(eps)}
	run := r.player().runner(*episodePolicy(r.solver.id, r.solver.eng, r.cfg.evalParams()), nil)
	if ag, ok := run.(*episode.Agent); ok && n > 1 {
		// Episode j plays held-out problem j/n: its n episodes share the
		// environment's seed.
		seed := int64(r.cfg.Seed)
		ag.EnvSeed = func(g int64) int64 { return seed + g/int64(n) }
	}
	turns, err := run.Run(ctx, b)
	if err == nil {
		err = failedTurns(turns)
	}
	if err != nil {
		return SingleEval{}, fmt.Errorf("evaluate at step %d: %w", r.step, err)
	}
	if r.cfg.Episode == EpisodeAgent {
		st := agentStats(turns, envActions(r.cfg.Agent.Env))
		out := SingleEval{Accuracy: st.CompletionRate, Correct: int(math.Round(st.CompletionRate * float64(st.Episodes))), Problems: len(r.eval), Agent: &st}
		if r.cfg.EvalSampling.sampled() {
			// pass@k over each problem's n episodes, solved counting as
			// correct; no maj@n (episodes have no final answer to vote on).
			out.Sampled = sampledFigures(r.cfg.EvalSampling, agentSolved(turns), nil, nil)
		}
		return out, nil
	}
	rewards, texts := make([]float64, len(turns)), make([]string, len(turns))
	for j, t := range turns {
		rewards[j], texts[j] = t.FinalReward, t.ResponseText
	}
	out := SingleEval{Problems: len(r.eval)}
	for _, x := range rewards {
		out.Accuracy += x
		if x == 1 {
			out.Correct++
		}
	}
	// Greedy: the sum over problems divided by their number, as always.
	out.Accuracy /= float64(len(rewards))
	if r.cfg.EvalSampling.sampled() {
		out.Sampled = sampledEval(r.cfg, rewards, texts)
	}
	if g := problemGroups(r.src, r.eval); g != nil {
		out.Groups = groupEvals(r.cfg.Dataset.GroupBy, g, rewards, nil, r.cfg.EvalSampling.samples(), r.cfg.evalPassK())
	}
	return out, nil
}

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
	// Groups are the turn-1 and final figures per value of each
	// eval.group_by column (nil: none).
	Groups []GroupEval `json:"groups,omitempty"`
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
	fbID := "feedback"
	if cfg.SharedWeights {
		fbID = "solver" // one model in both roles
	}
	run := player{cfg: &cfg, tpl: tpl, verifier: v}.runner(*episodePolicy("solver", solver, params), episodePolicy(fbID, fb, params))
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
	if g := problemGroups(src, probs); g != nil {
		final, first := make([]float64, len(played)), make([]float64, len(played))
		for i, e := range played {
			final[i], first[i] = e.final, e.first
		}
		te.Groups = groupEvals(cfg.Dataset.GroupBy, g, final, first, cfg.EvalSampling.samples(), cfg.evalPassK())
	}
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

// EvaluateCheckpoint evaluates the multi-turn episode of cfg greedily on
// its held-out problems (the EvalProblems the run evaluates on: the
// task's, or the dataset's eval file or held-out rows), scored by cfg's
// verifier, with the checkpoint in dir: the solver from dir, MLMT's feedback policy (when
// cfg.Feedback is set) from dir/feedback — the layout Run writes.
func EvaluateCheckpoint(ctx context.Context, cfg Config, dir string) (TurnEval, error) {
	if !cfg.multiTurn() {
		return TurnEval{}, fmt.Errorf("evaluate %s: episode %q is not multi-turn", dir, cfg.Episode)
	}
	cfg.Out = dir // validate wants a run directory; nothing is written
	tpl, err := cfg.validate()
	if err != nil {
		return TurnEval{}, err
	}
	if cfg.EvalProblems <= 0 {
		return TurnEval{}, fmt.Errorf("evaluate %s: eval_problems %d: want > 0", dir, cfg.EvalProblems)
	}
	cfg.EvalEvery = max(cfg.EvalEvery, 1) // a dataset source holds out EvalProblems
	src, err := newSource(ctx, cfg)
	if err != nil {
		return TurnEval{}, err
	}
	probs, err := src.heldOut(cfg.EvalProblems)
	if err != nil {
		return TurnEval{}, fmt.Errorf("pick the evaluation problems: %w", err)
	}
	v, err := newVerifier(cfg)
	if err != nil {
		return TurnEval{}, err
	}
	batch := cfg.EngineBatch
	if batch == 0 {
		batch = 256
	}
	solver, err := native.LoadContext(ctx, dir, native.Config{MaxBatch: batch, MaxStepTokens: 4096, Device: cfg.EngineDevice})
	if err != nil {
		return TurnEval{}, fmt.Errorf("load solver %s: %w", dir, err)
	}
	defer solver.Close()
	var fb *native.Engine
	if cfg.Feedback != nil && !cfg.SharedWeights {
		fdir := filepath.Join(dir, FeedbackDir)
		if _, err := os.Stat(fdir); err != nil {
			return TurnEval{}, fmt.Errorf("the recipe has a feedback policy, but %s has none: %w", dir, err)
		}
		if fb, err = native.LoadContext(ctx, fdir, native.Config{MaxBatch: batch, MaxStepTokens: 4096, Device: cfg.EngineDevice}); err != nil {
			return TurnEval{}, fmt.Errorf("load feedback policy %s: %w", fdir, err)
		}
		defer fb.Close()
	}
	se := &policyEngine{Engine: solver, tok: solver.Tokenizer(), model: dir}
	var fbe *policyEngine
	switch {
	case fb != nil:
		fbe = &policyEngine{Engine: fb, tok: fb.Tokenizer(), model: filepath.Join(dir, FeedbackDir)}
	case cfg.SharedWeights:
		fbe = se
	}
	te, err := evalTurns(ctx, cfg, tpl, se, fbe, src, probs, v)
	if err != nil {
		return TurnEval{}, fmt.Errorf("evaluate %s: %w", dir, err)
	}
	return te, nil
}
