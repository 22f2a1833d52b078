package rollout

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/mpcheck"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/verify"
	"github.com/rlnode/rlnode/rollout/weights"
	"github.com/vmihailenco/msgpack/v5"
)

// ActorKind is the kind name of the rollout actor: it hosts an engine on
// its node (and, for MLMT, optionally a second engine for the feedback
// policy), runs generation and episode jobs on it, and reports throughput,
// queue depth and the weight version it serves.
//
// Jobs are submitted (Submit), run in the background up to Concurrency at
// a time so the engine batches across them, and collected (Collect); the
// mailbox never waits on generation, so Stats answer at once. Episode
// results travel as Arrow IPC bytes (data.TrajectorySchema): inline in the
// reply, or as an explicit bulk offer when over BulkThreshold.
const ActorKind = "rollout"

// Texts of the rollout actor's answers that the pool acts on: they cross
// node boundaries as error text, so both sides share them here.
const (
	msgQueueFull    = "queue full"
	msgNoJob        = "no job"
	msgActorStopped = "rollout actor stopped"
)

// ActorConfig is the spawn argument of a rollout actor.
type ActorConfig struct {
	Engine         string // registered engine name ("native", or one a program registers)
	Model          string // what the engine loads (the native engine: a checkpoint directory)
	PolicyID       string // solver policy id recorded in trajectories; default "solver"
	FeedbackEngine string // optional engine of the MLMT feedback policy
	FeedbackModel  string
	FeedbackPolicy string // default "feedback"
	Verifier       string // registered verifier name: "math" (default), "gsm8k", "code"
	PythonTool     bool   // offer the python tool in tool episodes (code sandbox)
	Concurrency    int    // jobs run at once; default 4
	MaxQueue       int    // jobs waiting beyond those; default 256
	BulkThreshold  int    // Arrow replies over this many bytes go by bulk offer; default 16 MiB
	JobTTL         time.Duration
	// WeightVersion is the policy version the solver's Model holds (the
	// native engine starts serving it).
	WeightVersion int64
	// Device is where the "native" engine keeps its model, KV caches and
	// activations (native.Config.Device: cpu, cuda, cuda-bf16, cuda:N);
	// "" is the cpu. The driver's PushedNative engines take theirs from
	// their engine.json instead.
	Device string
	// ModelFiles stand in for Model's directory when Model is empty: the
	// small files of the model (config.json, tokenizer.json; an engine may
	// read more, as the driver's reads its engine.json) sent with the spawn.
	// The engine starts with no weights (version NoWeights) and refuses to
	// generate until its first push, a full one, which a Pool gets it from
	// its WeightSync when it registers (the weights kept, or the last
	// published version), so the actor reads nothing from the file system
	// of the node that started it. Needs WeightSync. The "native" and
	// NativeFromFiles engines take them (NewNativeFromFiles).
	ModelFiles map[string][]byte
	// WeightSync hosts the solver engine for weight pushes beside the
	// actor: an engine host (weights.Serve) named "<actor name>.weights"
	// on the same node, with its own mailbox, so a push never waits behind
	// job messages and jobs never wait behind a push. EngineHostRequest
	// returns its ref for a weight syncer to register (WeightSync.Register).
	// The engine must take weights (weights.HostedEngine: native does).
	WeightSync bool
}

// Episode kinds of EpisodeRequest.Kind.
const (
	EpisodeSingle = "single"
	EpisodeMLMT   = "mlmt"
	EpisodeSCoRe  = "score"
	EpisodeTools  = "tools"
)

// GenerateRequest asks for plain generation on the hosted engine.
type GenerateRequest struct {
	Requests []engine.Request
}

// EpisodeRequest asks for one batch of episodes.
type EpisodeRequest struct {
	Kind           string
	Examples       []data.Example
	N              int   // samples per example (GRPO group size)
	FirstGroupID   int64 // group id of Examples[0]
	Params         engine.SamplingParams
	FeedbackParams engine.SamplingParams // MLMT with a feedback engine
	StaticFeedback bool                  // MLMT: the static template instead of the feedback engine
	Templates      episode.Templates
	MaxToolCalls   int
	// Reward shaping: SCoRe's α (episode.SCoRe.Alpha); MLMT's feedback
	// credited with the improvement (episode.MLMT.FeedbackImprovement).
	ScoreAlpha          float64
	FeedbackImprovement bool
}

// Submit queues a GenerateRequest or an EpisodeRequest (exactly one set).
type Submit struct {
	Generate *GenerateRequest
	Episode  *EpisodeRequest
}

// Ticket names a submitted job.
type Ticket struct {
	Job string
}

// Collect asks for a job's outcome; a finished job is forgotten once
// collected.
type Collect struct {
	Job string
}

// CancelJob gives submitted jobs up (told, not called): those still
// waiting for a slot never run, running ones' engine and episodes see
// their context end, and the jobs are forgotten, their outcomes never
// collected. The pool tells it for the jobs it stops waiting for (ctx's
// end, another chunk's failure), all of a replica's at once, so an early
// stop leaves no work on the replicas: a waiting job never takes the slot
// a cancelled running one frees.
type CancelJob struct {
	Jobs []string
}

// JobResult is a job's outcome. While the job runs, Done is false.
type JobResult struct {
	Job   string
	Done  bool
	Error string
	// Refusal says the engine refused a generation request as invalid
	// (refusedBadRequest) or as over the context (refusedContextFull), so
	// the caller's error wraps engine.ErrBadRequest or ErrContextFull as
	// the engine's did; empty otherwise.
	Refusal string `msgpack:",omitempty"`
	// Generation jobs.
	Results []engine.Result
	// Episode jobs: the turns as Arrow IPC file bytes, inline or offered.
	// Generation jobs whose results would not fit in a message have them
	// offered here instead, msgpack-encoded (FetchResults).
	Arrow         []byte
	Bulk          *actor.BulkRef
	Turns         int
	MeanReward    float64 // mean FinalReward over episodes
	WeightVersion int64
	Elapsed       time.Duration
}

// EngineHostRequest asks a rollout actor started with WeightSync for its
// engine host; it answers with an EngineHost.
type EngineHostRequest struct{}

// EngineHost is the engine host of a rollout actor's solver engine
// (weights.Serve): register Ref with a weight syncer and every publish
// reaches the engine the actor generates with.
type EngineHost struct {
	Ref     actor.Ref
	Version int64 // the version the engine serves now
}

// StatsRequest asks for an ActorStats.
type StatsRequest struct{}

// ActorStats is what a rollout actor reports.
type ActorStats struct {
	WeightVersion   int64
	QueueDepth      int // jobs waiting for a slot
	Running         int
	Completed       int64
	Failed          int64
	GeneratedTokens int64   // response tokens produced by finished jobs
	TokensPerSecond float64 // over the last finished jobs (a 30 s window)
	Episodes        int64
	// Started counts the jobs that took a slot and began; Cancelled those
	// given up by CancelJob, before they began or while they ran (counted
	// in neither Completed nor Failed).
	Started   int64
	Cancelled int64
}

func init() {
	actor.RegisterMessage(ActorConfig{}, GenerateRequest{}, EpisodeRequest{}, Submit{}, Ticket{}, Collect{}, CancelJob{},
		JobResult{}, StatsRequest{}, ActorStats{}, EngineHostRequest{}, EngineHost{})
	actor.RegisterKind(ActorKind, func(ctx *actor.Context, args any) (actor.Actor, error) {
		cfg, ok := args.(ActorConfig)
		if !ok {
			return nil, fmt.Errorf("rollout actor: spawn args are %T, want rollout.ActorConfig", args)
		}
		// An actor that holds GPUs runs its engine on the device its
		// node's ledger gave it.
		cfg.Device = cluster.DeviceFor(cfg.Device, cluster.ActorGPUs(ctx))
		return newRolloutActor(ctx, cfg)
	})
	RegisterEngine("native", func(ctx context.Context, cfg ActorConfig, model string) (engine.Engine, error) {
		if model == "" && cfg.ModelFiles != nil {
			return NewNativeFromFiles(cfg.ModelFiles, native.Config{Device: cfg.Device})
		}
		if model == "" {
			return nil, errors.New("native engine: no model directory")
		}
		return native.LoadContext(ctx, model, native.Config{WeightVersion: cfg.WeightVersion, Device: cfg.Device})
	})
	RegisterEngine(PushedNative, newPushedNative)
	RegisterVerifier("math", func() (verify.Verifier, error) { return verify.Math{}, nil })
	RegisterVerifier("gsm8k", func() (verify.Verifier, error) { return verify.GSM8K{}, nil })
	RegisterVerifier("code", func() (verify.Verifier, error) {
		sb, err := verify.NewSandbox(verify.SandboxConfig{})
		if err != nil {
			return nil, err
		}
		return verify.Code{Sandbox: sb}, nil
	})
}

// logSandbox says in the node's log which sandbox runs the actor's
// generated code (auto picks bwrap or namespaces by what works there).
func logSandbox(ctx *actor.Context, use string, sb *verify.Sandbox) {
	ctx.Logger().Info("code sandbox", "for", use, "mode", sb.Mode(), "isolation", sb.Isolation(), "memory", sb.RunBound())
}

// EngineFactory builds the engine a rollout actor hosts; model is
// ActorConfig.Model or FeedbackModel. ctx ends when the actor's spawn is
// given up (its node stops): a factory that loads weights checks it and
// returns an error wrapping ctx's, with what it allocated given back.
type EngineFactory func(ctx context.Context, cfg ActorConfig, model string) (engine.Engine, error)

var registry = struct {
	sync.RWMutex
	engines   map[string]EngineFactory
	verifiers map[string]func() (verify.Verifier, error)
}{engines: map[string]EngineFactory{}, verifiers: map[string]func() (verify.Verifier, error){}}

// RegisterEngine makes an engine available to rollout actors by name.
// Every node must register the same names (from init).
func RegisterEngine(name string, f EngineFactory) {
	registry.Lock()
	registry.engines[name] = f
	registry.Unlock()
}

// RegisterVerifier makes a verifier available to rollout actors by name.
func RegisterVerifier(name string, f func() (verify.Verifier, error)) {
	registry.Lock()
	registry.verifiers[name] = f
	registry.Unlock()
}

func names[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func buildEngine(ctx context.Context, cfg ActorConfig, name, model string) (engine.Engine, error) {
	registry.RLock()
	f, ok := registry.engines[name]
	known := names(registry.engines)
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("rollout actor: unknown engine %q (registered: %v)", name, known)
	}
	e, err := f(ctx, cfg, model)
	if err != nil {
		return nil, fmt.Errorf("rollout actor: engine %q: %w", name, err)
	}
	return e, nil
}

type job struct {
	id     string
	submit Submit
	done   bool
	result JobResult
	ended  time.Time
	// ctx is the job's, under the actor's; cancel ends it (CancelJob),
	// and a cancelled job is forgotten once it ends.
	ctx       context.Context
	cancel    context.CancelFunc
	cancelled bool
}

type rolloutActor struct {
	cfg      ActorConfig
	sys      *actor.System
	solver   engine.Engine
	feedback engine.Engine
	verifier verify.Verifier
	python   episode.PythonExecutor
	host     actor.Ref // engine host for weight pushes (WeightSync)

	slots chan struct{}
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup

	mu      sync.Mutex
	jobs    map[string]*job
	next    int64
	waiting int
	running int
	window  []tokenMark

	completed, failed, tokens, episodeCount, started, cancelled atomic.Int64
}

type tokenMark struct {
	at     time.Time
	tokens int
	took   time.Duration
}

func newRolloutActor(ctx *actor.Context, cfg ActorConfig) (*rolloutActor, error) {
	if cfg.PolicyID == "" {
		cfg.PolicyID = "solver"
	}
	if cfg.FeedbackPolicy == "" {
		cfg.FeedbackPolicy = "feedback"
	}
	if cfg.Verifier == "" {
		cfg.Verifier = "math"
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 256
	}
	if cfg.BulkThreshold <= 0 {
		cfg.BulkThreshold = 16 << 20
	}
	if cfg.JobTTL <= 0 {
		cfg.JobTTL = 10 * time.Minute
	}
	registry.RLock()
	vf, ok := registry.verifiers[cfg.Verifier]
	known := names(registry.verifiers)
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("rollout actor: unknown verifier %q (registered: %v)", cfg.Verifier, known)
	}
	v, err := vf()
	if err != nil {
		return nil, fmt.Errorf("rollout actor: verifier %q: %w", cfg.Verifier, err)
	}
	if c, ok := v.(verify.Code); ok && c.Sandbox != nil {
		logSandbox(ctx, "code verifier", c.Sandbox)
	}
	if cfg.ModelFiles != nil && (cfg.Model != "" || !cfg.WeightSync) {
		return nil, fmt.Errorf("rollout actor: ModelFiles (an engine that starts with no weights) need an empty Model (have %q) and WeightSync (have %v)", cfg.Model, cfg.WeightSync)
	}
	a := &rolloutActor{cfg: cfg, sys: ctx.System(), verifier: v, jobs: map[string]*job{}, slots: make(chan struct{}, cfg.Concurrency)}
	if a.solver, err = buildEngine(ctx.Context(), cfg, cfg.Engine, cfg.Model); err != nil {
		return nil, err
	}
	if cfg.FeedbackEngine != "" {
		fcfg := cfg
		fcfg.ModelFiles = nil // the solver's
		if a.feedback, err = buildEngine(ctx.Context(), fcfg, cfg.FeedbackEngine, cfg.FeedbackModel); err != nil {
			a.solver.Close()
			return nil, err
		}
	}
	if cfg.PythonTool {
		sb, err := verify.NewSandbox(verify.SandboxConfig{})
		if err != nil {
			a.closeEngines()
			return nil, fmt.Errorf("rollout actor: python tool: %w", err)
		}
		logSandbox(ctx, "python tool", sb)
		a.python = episode.SandboxPython{Sandbox: sb}
	}
	if cfg.WeightSync {
		he, ok := a.solver.(weights.HostedEngine)
		if !ok {
			a.closeEngines()
			return nil, fmt.Errorf("rollout actor: WeightSync: engine %q (%T) does not take weight pushes (no SetWeights)", cfg.Engine, a.solver)
		}
		// LoRA adapters merge onto the base: the checkpoint's, or for an
		// engine started from ModelFiles the weights of the last full push
		// (the Receiver keeps them), which always comes first.
		base := func(_ context.Context, names []string) (map[string][]float32, error) {
			return nil, fmt.Errorf("lora: no full weights pushed yet to merge %d adapted projections onto (the engine started from model files alone)", len(names))
		}
		if cfg.Model != "" {
			base = weights.CheckpointBase(cfg.Model)
		}
		if a.host, err = weights.Serve(a.sys, ctx.Self().Name+".weights", he, base); err != nil {
			a.closeEngines()
			return nil, fmt.Errorf("rollout actor: WeightSync: %w", err)
		}
	}
	a.ctx, a.stop = context.WithCancel(context.Background())
	return a, nil
}

func (a *rolloutActor) closeEngines() {
	a.solver.Close()
	if a.feedback != nil {
		a.feedback.Close()
	}
}

// Stopped cancels running jobs, waits for them and closes the engines.
func (a *rolloutActor) Stopped(*actor.Context) {
	a.stop()
	a.wg.Wait()
	if !a.host.IsZero() {
		_ = a.sys.StopLocal(a.host.Name, msgActorStopped)
	}
	a.closeEngines()
}

// Receive implements actor.Actor.
func (a *rolloutActor) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case Submit:
		return a.submit(m)
	case Collect:
		return a.collect(m.Job)
	case CancelJob:
		a.cancelJobs(m.Jobs)
		return nil, nil
	case StatsRequest:
		return a.stats(), nil
	case EngineHostRequest:
		if a.host.IsZero() {
			return nil, fmt.Errorf("rollout actor %s: no engine host: spawn it with ActorConfig.WeightSync", ctx.Self().Name)
		}
		return EngineHost{Ref: a.host, Version: a.solver.WeightVersion()}, nil
	}
	return nil, fmt.Errorf("rollout actor: unexpected message %T", msg)
}

func (a *rolloutActor) submit(s Submit) (Ticket, error) {
	if (s.Generate == nil) == (s.Episode == nil) {
		return Ticket{}, errors.New("rollout actor: submit exactly one of Generate and Episode")
	}
	if s.Generate != nil && len(s.Generate.Requests) == 0 {
		return Ticket{}, errors.New("rollout actor: generate: no requests")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire()
	if a.waiting >= a.cfg.MaxQueue {
		return Ticket{}, fmt.Errorf("rollout actor: %s (%d jobs waiting)", msgQueueFull, a.waiting)
	}
	a.next++
	j := &job{id: fmt.Sprintf("job-%d", a.next), submit: s}
	j.ctx, j.cancel = context.WithCancel(a.ctx)
	a.jobs[j.id] = j
	a.waiting++
	a.wg.Add(1)
	go a.run(j)
	return Ticket{Job: j.id}, nil
}

// expire forgets finished jobs nobody collected within JobTTL.
func (a *rolloutActor) expire() {
	for id, j := range a.jobs {
		if j.done && time.Since(j.ended) > a.cfg.JobTTL {
			if j.result.Bulk != nil {
				a.sys.Bulk().Release(*j.result.Bulk)
			}
			delete(a.jobs, id)
		}
	}
}

func (a *rolloutActor) collect(id string) (JobResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	j, ok := a.jobs[id]
	if !ok {
		return JobResult{}, fmt.Errorf("rollout actor: %s %q (never submitted, or already collected)", msgNoJob, id)
	}
	if !j.done {
		return JobResult{Job: id}, nil
	}
	delete(a.jobs, id)
	return j.result, nil
}

// cancelJobs gives jobs up (CancelJob): each is forgotten at once when
// done, else its context ends and run forgets it when it returns.
func (a *rolloutActor) cancelJobs(ids []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		j, ok := a.jobs[id]
		switch {
		case !ok:
		case j.done:
			a.forget(j)
		default:
			j.cancelled = true
			j.cancel()
		}
	}
}

// forget drops a job and what it offered; a.mu held.
func (a *rolloutActor) forget(j *job) {
	if j.result.Bulk != nil {
		a.sys.Bulk().Release(*j.result.Bulk)
	}
	delete(a.jobs, j.id)
}

func (a *rolloutActor) run(j *job) {
	defer a.wg.Done()
	defer j.cancel()
	got := false
	select {
	case a.slots <- struct{}{}:
		got = true
	case <-a.ctx.Done():
	case <-j.ctx.Done():
	}
	if got && j.ctx.Err() != nil && a.ctx.Err() == nil {
		// Cancelled as the slot freed: it does not begin either.
		<-a.slots
		got = false
	}
	if !got && a.ctx.Err() == nil {
		// Cancelled while it waited: it never runs.
		a.cancelled.Add(1)
		a.mu.Lock()
		a.waiting--
		a.forget(j)
		a.mu.Unlock()
		return
	}
	a.mu.Lock()
	a.waiting--
	a.running++
	a.mu.Unlock()
	if got {
		a.started.Add(1)
	}
	start := time.Now()
	res, tokens := a.work(j.ctx, j.submit)
	if got {
		<-a.slots
	}
	res.Job, res.Done, res.Elapsed = j.id, true, time.Since(start)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.running--
	switch {
	case j.cancelled:
		a.cancelled.Add(1)
		j.result = res
		a.forget(j)
		return
	case res.Error != "":
		a.failed.Add(1)
	default:
		a.completed.Add(1)
		a.tokens.Add(int64(tokens))
	}
	j.done, j.result, j.ended = true, res, time.Now()
	a.window = append(a.window, tokenMark{at: time.Now(), tokens: tokens, took: res.Elapsed})
}

// The Refusal kinds of a JobResult.
const (
	refusedBadRequest  = "bad_request"
	refusedContextFull = "context_full"
)

// refusalOf classifies an engine error for JobResult.Refusal.
func refusalOf(err error) string {
	switch {
	case errors.Is(err, engine.ErrContextFull):
		return refusedContextFull
	case errors.Is(err, engine.ErrBadRequest):
		return refusedBadRequest
	}
	return ""
}

// refusalError is a job's error text wrapping the sentinel its Refusal
// names, so that callers tell a refused request from a failed engine.
func refusalError(err error, refusal string) error {
	switch refusal {
	case refusedContextFull:
		return fmt.Errorf("%w (%w)", err, engine.ErrContextFull)
	case refusedBadRequest:
		return fmt.Errorf("%w (%w)", err, engine.ErrBadRequest)
	}
	return err
}

// work runs one job; a panic in an engine or verifier fails the job, not
// the node.
func (a *rolloutActor) work(ctx context.Context, s Submit) (res JobResult, tokens int) {
	defer func() {
		if p := recover(); p != nil {
			res, tokens = JobResult{Error: fmt.Sprintf("panic: %v", p)}, 0
		}
	}()
	if a.ctx.Err() != nil {
		return JobResult{Error: msgActorStopped}, 0
	}
	if s.Generate != nil {
		out, err := a.solver.Generate(ctx, s.Generate.Requests)
		if err != nil {
			return JobResult{Error: err.Error(), Refusal: refusalOf(err)}, 0
		}
		for _, r := range out {
			for _, smp := range r.Samples {
				tokens += len(smp.TokenIDs)
			}
		}
		res := JobResult{Results: out, WeightVersion: a.solver.WeightVersion()}
		if limit := min(a.cfg.BulkThreshold, a.sys.MaxMessageSize()/2); resultTokenBytes*tokens > limit {
			b, err := msgpack.Marshal(out)
			if err != nil {
				return JobResult{Error: err.Error()}, 0
			}
			if len(b) > limit {
				ref := a.sys.Bulk().Offer(b, 1, a.cfg.JobTTL)
				res.Results, res.Bulk = nil, &ref
			}
		}
		return res, tokens
	}
	turns, err := a.episodes(ctx, *s.Episode)
	if err != nil {
		return JobResult{Error: err.Error()}, 0
	}
	eps := map[string]float64{}
	for _, t := range turns {
		for _, m := range t.LossMask {
			if m != 0 {
				tokens++
			}
		}
		eps[t.EpisodeID] = t.FinalReward
	}
	var sum float64
	for _, r := range eps {
		sum += r
	}
	a.episodeCount.Add(int64(len(eps)))
	b, err := data.MarshalTrajectories(turns)
	if err != nil {
		return JobResult{Error: err.Error()}, 0
	}
	res = JobResult{Turns: len(turns), WeightVersion: a.solver.WeightVersion()}
	if len(eps) > 0 {
		res.MeanReward = sum / float64(len(eps))
	}
	if len(b) > a.cfg.BulkThreshold {
		ref := a.sys.Bulk().Offer(b, 1, a.cfg.JobTTL)
		res.Bulk = &ref
	} else {
		res.Arrow = b
	}
	return res, tokens
}

func (a *rolloutActor) episodes(ctx context.Context, r EpisodeRequest) ([]data.Turn, error) {
	solver := episode.Policy{ID: a.cfg.PolicyID, Engine: a.solver, Params: r.Params, Model: a.cfg.Model}
	lim := episode.Limits{}
	var run episode.Runner
	var err error
	switch r.Kind {
	case EpisodeSingle:
		run, err = episode.NewSingleTurn(solver, a.verifier, r.Templates, lim)
	case EpisodeSCoRe:
		var sc *episode.SCoRe
		if sc, err = episode.NewSCoRe(solver, a.verifier, r.Templates, lim); err == nil {
			sc.Alpha = r.ScoreAlpha
		}
		run = sc
	case EpisodeMLMT:
		var fb *episode.Policy
		if !r.StaticFeedback {
			if a.feedback == nil {
				return nil, errors.New("mlmt episode: this actor hosts no feedback engine (set FeedbackEngine, or ask for StaticFeedback)")
			}
			fb = &episode.Policy{ID: a.cfg.FeedbackPolicy, Engine: a.feedback, Params: r.FeedbackParams, Model: a.cfg.FeedbackModel}
		}
		var m *episode.MLMT
		if m, err = episode.NewMLMT(solver, fb, a.verifier, r.Templates, lim); err == nil {
			m.FeedbackImprovement = r.FeedbackImprovement
		}
		run = m
	case EpisodeTools:
		tk, ok := a.solver.(interface{ Tokenizer() *tokenizer.Tokenizer })
		if !ok {
			return nil, fmt.Errorf("tool episode: engine %q does not expose its tokenizer", a.cfg.Engine)
		}
		var tu *episode.ToolUse
		tu, err = episode.NewToolUse(solver, a.verifier, tk.Tokenizer(), a.python, r.Templates, lim)
		if err == nil && r.MaxToolCalls > 0 {
			tu.MaxCalls = r.MaxToolCalls
		}
		run = tu
	default:
		return nil, fmt.Errorf("unknown episode kind %q (want %s, %s, %s or %s)", r.Kind, EpisodeSingle, EpisodeMLMT, EpisodeSCoRe, EpisodeTools)
	}
	if err != nil {
		return nil, err
	}
	return run.Run(ctx, episode.Batch{Examples: r.Examples, N: r.N, FirstGroupID: r.FirstGroupID})
}

func (a *rolloutActor) stats() ActorStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	cut := time.Now().Add(-30 * time.Second)
	k := 0
	for k < len(a.window) && a.window[k].at.Before(cut) {
		k++
	}
	a.window = a.window[k:]
	var tokens int
	var first time.Time
	for i, m := range a.window {
		tokens += m.tokens
		if s := m.at.Add(-m.took); i == 0 || s.Before(first) {
			first = s
		}
	}
	st := ActorStats{
		WeightVersion: a.solver.WeightVersion(), QueueDepth: a.waiting, Running: a.running,
		Completed: a.completed.Load(), Failed: a.failed.Load(), GeneratedTokens: a.tokens.Load(), Episodes: a.episodeCount.Load(),
		Started: a.started.Load(), Cancelled: a.cancelled.Load(),
	}
	if len(a.window) > 0 {
		if span := time.Since(first).Seconds(); span > 0 {
			st.TokensPerSecond = float64(tokens) / span
		}
	}
	return st
}

// Caller is what the client helpers call through: *cluster.Handle (and a
// cluster.Pool) satisfy it.
type Caller interface {
	Call(ctx context.Context, msg any) (any, error)
}

// pollEvery bounds how often Await asks whether a job is done.
const (
	pollFirst = time.Millisecond
	pollMax   = 50 * time.Millisecond
)

// Await submits s to a rollout actor and waits for its result (bounded by
// ctx), polling with backoff.
func Await(ctx context.Context, c Caller, s Submit) (JobResult, error) {
	v, err := c.Call(ctx, s)
	if err != nil {
		return JobResult{}, err
	}
	t, ok := v.(Ticket)
	if !ok {
		return JobResult{}, fmt.Errorf("rollout actor: submit answered %T, want Ticket", v)
	}
	wait := pollFirst
	for {
		v, err := c.Call(ctx, Collect{Job: t.Job})
		if err != nil {
			return JobResult{}, err
		}
		r, ok := v.(JobResult)
		if !ok {
			return JobResult{}, fmt.Errorf("rollout actor: collect answered %T, want JobResult", v)
		}
		if r.Done {
			if r.Error != "" {
				return r, refusalError(fmt.Errorf("rollout job %s: %s", t.Job, r.Error), r.Refusal)
			}
			return r, nil
		}
		select {
		case <-ctx.Done():
			return JobResult{}, fmt.Errorf("rollout job %s: %w", t.Job, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, pollMax)
	}
}

// Generate runs plain generation on a rollout actor; results too large
// for a message are fetched over the bulk path of sys.
func Generate(ctx context.Context, c Caller, sys *actor.System, reqs []engine.Request) ([]engine.Result, int64, error) {
	r, err := Await(ctx, c, Submit{Generate: &GenerateRequest{Requests: reqs}})
	if err != nil {
		return nil, 0, err
	}
	out, err := FetchResults(ctx, sys, r)
	return out, r.WeightVersion, err
}

// FetchResults is a finished generation job's results: inline, or fetched
// over the bulk path of sys when the actor offered them (too large for a
// message).
func FetchResults(ctx context.Context, sys *actor.System, r JobResult) ([]engine.Result, error) {
	if r.Bulk == nil {
		return r.Results, nil
	}
	b, err := sys.Bulk().Fetch(ctx, *r.Bulk)
	if err != nil {
		return nil, fmt.Errorf("rollout job %s: fetch results: %w", r.Job, err)
	}
	var out []engine.Result
	if err := mpcheck.Check(b); err != nil {
		return nil, fmt.Errorf("rollout job %s: results: %w", r.Job, err)
	}
	if err := msgpack.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("rollout job %s: results: %w", r.Job, err)
	}
	return out, nil
}

// RunEpisodes runs a batch of episodes on a rollout actor and returns the
// turns, fetching them over the bulk path of sys when they were offered.
func RunEpisodes(ctx context.Context, c Caller, sys *actor.System, req EpisodeRequest) ([]data.Turn, JobResult, error) {
	r, err := Await(ctx, c, Submit{Episode: &req})
	if err != nil {
		return nil, r, err
	}
	b := r.Arrow
	if r.Bulk != nil {
		if b, err = sys.Bulk().Fetch(ctx, *r.Bulk); err != nil {
			return nil, r, fmt.Errorf("rollout job %s: fetch trajectories: %w", r.Job, err)
		}
	}
	turns, err := data.UnmarshalTrajectories("rollout job "+r.Job, b)
	if err != nil {
		return nil, r, err
	}
	return turns, r, nil
}
