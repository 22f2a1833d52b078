package train

// A run's episodes: every episode type plays through rollout/episode, on
// the policies' engines (a rollout pool bound to the batch's step, vLLM
// servers or the native engine in this process), with the run's prompt
// formats, seeds and verifier. The turns they return are what the
// learners train on (trajectory.go).

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
	"github.com/rlnode/rlnode/weightsync"
)

// quoteLimits bound an answer quoted inside a later prompt: 256 bytes,
// cut without a mark.
var quoteLimits = episode.Limits{MaxAnswerBytes: episode.DefaultLimits.MaxAnswerBytes, MaxQuoteBytes: 256}

// prompter writes a run's prompts from its templates as plain text (no
// chat template), which each policy's tokenizer encodes.
type prompter struct{ tpl *compiled }

func text(s string) (episode.Prompt, error) { return episode.Prompt{Text: s}, nil }

func (p prompter) Solver(ex data.Example) (episode.Prompt, error) {
	return text(render(p.tpl.prompt, TemplateData{Question: ex.Prompt}))
}

func (p prompter) Feedback(ex data.Example, attempt string) (episode.Prompt, error) {
	return text(render(p.tpl.feedback, TemplateData{Question: ex.Prompt, Hint: ex.Hint, Attempt: attempt}))
}

func (p prompter) StaticFeedback(ex data.Example, attempt string) (string, error) {
	return render(p.tpl.staticFeedback, TemplateData{Question: ex.Prompt, Attempt: attempt}), nil
}

func (p prompter) Refine(ex data.Example, attempt, feedback string) (episode.Prompt, error) {
	return text(render(p.tpl.refine, TemplateData{Question: ex.Prompt, Attempt: attempt, Feedback: feedback}))
}

// Review is SCoRe's second prompt: the first prompt, the answer, the
// review instruction.
func (p prompter) Review(ex data.Example, attempt string) (episode.Prompt, error) {
	d := TemplateData{Question: ex.Prompt, Attempt: attempt}
	return text(render(p.tpl.prompt, d) + attempt + "\n" + render(p.tpl.review, d) + "\n")
}

func (p prompter) ToolSolver(ex data.Example) (episode.Prompt, error) {
	return text(render(p.tpl.prompt, TemplateData{Question: ex.Prompt}))
}

func (p prompter) ToolResponse(output string) (string, error) {
	return render(p.tpl.toolResponse, TemplateData{Output: output}), nil
}

// examplesOf are probs as episode examples, with their references from
// src.
func examplesOf(src problemSource, probs []task.Problem) []data.Example {
	out := make([]data.Example, len(probs))
	for i, p := range probs {
		out[i] = data.Example{ID: p.ID, Prompt: p.Question, Hint: p.Hint, Ref: src.reference(p)}
	}
	return out
}

// player is what plays a run's episodes: its config, templates,
// verifier and tools.
type player struct {
	cfg      *Config
	tpl      *compiled
	verifier verify.Verifier
	python   episode.PythonExecutor // tools with python; nil otherwise
}

func (r *run) player() player {
	return player{cfg: &r.cfg, tpl: r.tpl, verifier: r.verifier, python: r.python}
}

// runner is the runner of the run's episode type for the solver (and
// MLMT's feedback policy: nil plays static feedback).
func (e player) runner(solver episode.Policy, fb *episode.Policy) episode.Runner {
	cfg := e.cfg
	pr, workers := prompter{e.tpl}, cfg.verifyWorkers()
	switch cfg.Episode {
	case EpisodeMLMT:
		return &episode.MLMT{Solver: solver, Feedback: fb, Prompter: pr, Verifier: e.verifier, Workers: workers,
			Limits: quoteLimits, FeedbackImprovement: cfg.FeedbackReward == FeedbackRewardImprovement,
			ShapeRefine: cfg.ShapeRefine, Alpha: cfg.ScoreAlpha, Shared: cfg.SharedWeights}
	case EpisodeSCoRe:
		return &episode.SCoRe{Solver: solver, Prompter: pr, Verifier: e.verifier, Workers: workers, Limits: quoteLimits, Alpha: cfg.ScoreAlpha}
	case EpisodeAgent:
		return agentRunner(cfg, e.tpl, solver)
	case EpisodeTools:
		return &episode.ToolUse{Solver: solver, Prompter: pr, Verifier: e.verifier, Workers: workers, Python: e.python,
			Calculator: cfg.Calculator, MaxCalls: cfg.MaxToolCalls, Limits: episode.DefaultLimits}
	}
	return &episode.SingleTurn{Solver: solver, Prompter: pr, Verifier: e.verifier, Workers: workers, Limits: quoteLimits}
}

// episodePolicy is policy id generating on eng with params; nil when eng
// is.
func episodePolicy(id string, eng *policyEngine, params engine.SamplingParams) *episode.Policy {
	if eng == nil {
		return nil
	}
	return &episode.Policy{ID: id, Engine: eng, Params: params, Tokenizer: eng.Tokenizer(), Model: eng.model}
}

// turnSeed is the first sampling seed of stage t of the RL step whose
// problems end at the data cursor; request i of the stage gets turnSeed
// + i. The (seed, cursor, stage) triple is hashed so that the seed ranges
// of different steps and stages do not overlap in practice.
func turnSeed(seed uint64, cursor, stage int) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%d", seed, cursor, stage)
	return int64(h.Sum64() >> 2) // room for + i without overflow
}

// rlSeeds are the sampling seeds of the RL batch whose first problem is
// at cursor first and whose last ends at cursor end: single-turn request i
// samples with seed·1,000,003 + its problem's cursor + 1; the stages of
// multi-turn episodes and the continuations after tool calls with
// turnSeed + i.
func rlSeeds(cfg *Config, first, end int) func(stage, i int) *int64 {
	return func(stage, i int) *int64 {
		var s int64
		if cfg.multiTurn() || stage != episode.StageFirst {
			s = turnSeed(cfg.Seed, end, stage) + int64(i)
		} else {
			s = int64(cfg.Seed)*1_000_003 + int64(first+i+1)
		}
		return &s
	}
}

// rlParams is how RL episodes sample.
func (c *Config) rlParams() engine.SamplingParams {
	return engine.SamplingParams{MaxTokens: c.MaxTokens, Temperature: c.Temperature, TopP: c.TopP}
}

// episodeBatch is one RL step's problems and, once done is closed, the
// turns of their episodes.
type episodeBatch struct {
	problemCount int
	firstGroup   int   // data cursor of the first problem: the groups' ids
	onPolicy     int64 // the weight version on-policy for this batch
	done         chan struct{}
	turns        []data.Turn
	err          error
	genSeconds   float64
	envClock     envClock     // agent episodes' environment steps
	context      contextStats // the textual actor-critic's measured terms
	offline      bool         // recorded traces' calls, not episodes played
}

func (b *episodeBatch) ready() <-chan struct{} { return b.done }
func (b *episodeBatch) failed() error          { return b.err }
func (b *episodeBatch) problems() int          { return b.problemCount }

// stepEngineOf is what a batch whose on-policy version is onPolicy
// generates with on policy p: its server bound to that version.
func stepEngineOf(p *policy, onPolicy int64) *policyEngine {
	if p == nil {
		return nil
	}
	return &policyEngine{Engine: weightsync.AtVersion(p.server, onPolicy), tok: p.tok, model: p.model}
}

// startEpisodes draws the next PromptsPerStep problems and their sampling
// seeds (here, so that the data cursor moves in step order and the seeds
// are those of a synchronous run) and plays their episodes in the
// background for the batch whose on-policy version is onPolicy, once after
// is closed (the batch drawn before it has played; nil: at once).
func (r *run) startEpisodes(ctx context.Context, onPolicy int64, after <-chan struct{}) (*episodeBatch, error) {
	cfg := r.cfg
	b := &episodeBatch{firstGroup: r.cursor, onPolicy: onPolicy, done: make(chan struct{}), problemCount: cfg.PromptsPerStep}
	probs, err := r.nextProblems(cfg.PromptsPerStep)
	if err != nil {
		return nil, err
	}
	batch := episode.Batch{Examples: examplesOf(r.src, probs), N: cfg.GroupSize, FirstGroupID: int64(b.firstGroup),
		Seeds: rlSeeds(&r.cfg, b.firstGroup, r.cursor)}
	params := cfg.rlParams()
	var fb *episode.Policy
	if r.feedback != nil {
		fb = episodePolicy(r.feedback.id, stepEngineOf(r.feedback, onPolicy), params)
	} else if cfg.SharedWeights {
		fb = episodePolicy(r.solver.id, stepEngineOf(r.solver, onPolicy), params)
	}
	run := r.player().runner(*episodePolicy(r.solver.id, stepEngineOf(r.solver, onPolicy), params), fb)
	if ag, ok := run.(*episode.Agent); ok {
		ag.NewEnv = b.envClock.timed(ag.NewEnv)
	}
	var scorer engine.Scorer
	if cfg.TextualAC != nil {
		sc, ok := r.solver.server.(engine.Scorer)
		if !ok {
			return nil, fmt.Errorf("textual_ac: the solver's engine (%T) cannot score answers: it must be the in-process native engine", r.solver.server)
		}
		scorer = sc
	}
	r.prefetched += len(probs)
	go func() {
		defer close(b.done)
		if b.err = waitTurn(ctx, after); b.err != nil {
			return
		}
		t0 := time.Now()
		defer func() { b.genSeconds = time.Since(t0).Seconds() }()
		if b.turns, b.err = run.Run(ctx, batch); b.err == nil {
			b.err = failedTurns(b.turns)
		}
		if b.err == nil && scorer != nil {
			b.context, b.err = r.contextRewards(ctx, scorer, b.turns, probs, b.firstGroup)
		}
	}()
	return b, nil
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

// failedTurns names the first turn whose request the engine failed.
func failedTurns(turns []data.Turn) error {
	for _, t := range turns {
		if t.FinishReason == "error" {
			return fmt.Errorf("episode %s turn %d: %s", t.EpisodeID, t.Turn, t.Note)
		}
	}
	return nil
}

// lowestVersion is the oldest weight version among the turns (the
// feedback policy's versions count the run's steps as the solver's do).
func lowestVersion(turns []data.Turn) int64 {
	if len(turns) == 0 {
		return 0
	}
	low := turns[0].WeightVersion
	for _, t := range turns[1:] {
		low = min(low, t.WeightVersion)
	}
	return low
}
