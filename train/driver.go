package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/shard"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
	"github.com/rlnode/rlnode/rollout/vllm"
	"github.com/rlnode/rlnode/weightsync"
)

// Metrics is one line of metrics.jsonl: one optimizer step of the
// learner. Steps count from the first warm-up step; RL steps follow the
// warm-up ones.
type Metrics struct {
	Step  int    `json:"step"`
	Phase string `json:"phase"` // "warmup" (SFT) or "rl"
	// RewardMean is the mean verifier reward of the step's samples; null
	// on warm-up steps, which sample nothing.
	RewardMean *float64 `json:"reward_mean"`
	// EvalAccuracy is the accuracy on held-out problems, at evaluation
	// steps only: greedy, or the mean over Config.EvalSampling's samples
	// (mean@n); for multi-turn episodes, of the final turn.
	EvalAccuracy *float64 `json:"eval_accuracy,omitempty"`
	// EvalSampled is a sampled evaluation's pass@k and maj@n, written
	// flat: eval_samples, eval_temperature, eval_pass_at_K, eval_maj_at_N
	// (evalsample.go).
	EvalSampled *SampledEval `json:"-"`
	// EvalGroups are the evaluation's figures per value of each
	// eval.group_by column (absent without group_by).
	EvalGroups []GroupEval `json:"eval_groups,omitempty"`
	// Turn metrics of multi-turn episodes at evaluation steps (on the
	// same held-out problems): see TurnEval.
	Turn1Accuracy       *float64 `json:"turn1_accuracy,omitempty"`
	Turn2Accuracy       *float64 `json:"turn2_accuracy,omitempty"` // score
	Turn3Accuracy       *float64 `json:"turn3_accuracy,omitempty"` // mlmt
	Turn3AccuracyStatic *float64 `json:"turn3_accuracy_static,omitempty"`
	Delta               *float64 `json:"delta,omitempty"`
	IncorrectToCorrect  *float64 `json:"incorrect_to_correct,omitempty"`
	CorrectToIncorrect  *float64 `json:"correct_to_incorrect,omitempty"`
	// Turn1RewardMean is the mean reward of the first attempts of
	// multi-turn RL steps (RewardMean is the final turn's).
	Turn1RewardMean *float64 `json:"turn1_reward_mean,omitempty"`
	// The feedback policy's learner step (mlmt with a trained feedback
	// policy).
	FeedbackLoss     *float64 `json:"feedback_loss,omitempty"`
	FeedbackGradNorm *float64 `json:"feedback_grad_norm,omitempty"`
	FeedbackEntropy  *float64 `json:"feedback_entropy,omitempty"`
	FeedbackLR       *float64 `json:"feedback_lr,omitempty"`
	// EntropyCoef and FeedbackEntropyCoef are the entropy coefficients the
	// solver's and the feedback policy's losses used at an RL step that
	// trained them, under entropy control (Config.EntropyControl): 0 while
	// the policy's entropy was above the target.
	EntropyCoef         *float64 `json:"entropy_coef,omitempty"`
	FeedbackEntropyCoef *float64 `json:"feedback_entropy_coef,omitempty"`
	// The feedback policy's critic (PPO): as ValueLoss, ExplainedVar.
	FeedbackValueLoss    *float64 `json:"feedback_value_loss,omitempty"`
	FeedbackExplainedVar *float64 `json:"feedback_explained_var,omitempty"`
	// ArCHer (Config.Archer): the critic's mean Q and V losses over the
	// step's updates, the replay buffer's turns, and the mean advantage
	// Q − V of the solver's turns (absent during the critic's warm-up).
	CriticQLoss         *float64 `json:"critic_q_loss,omitempty"`
	CriticVLoss         *float64 `json:"critic_v_loss,omitempty"`
	ReplaySize          *int     `json:"replay_size,omitempty"`
	CriticAdvantageMean *float64 `json:"critic_advantage_mean,omitempty"`

	Loss         float64 `json:"loss"`
	GradNorm     float64 `json:"grad_norm"`
	LR           float64 `json:"lr"`
	ClipFrac     float64 `json:"clip_frac"`
	ClipFracHigh float64 `json:"clip_frac_high"`
	ApproxKL     float64 `json:"approx_kl"`
	RefKL        float64 `json:"ref_kl"`
	Entropy      float64 `json:"entropy"`
	// KLPenalty is the mean per-token KL reward penalty (PPO with
	// Learner.KLInReward) at RL steps.
	KLPenalty *float64 `json:"kl_penalty,omitempty"`
	// PPO's critic at RL steps: the value loss (mean over the step's
	// optimizer steps), the fraction of value-clipped tokens, and the
	// explained variance of the returns by the values before the step.
	ValueLoss       *float64 `json:"value_loss,omitempty"`
	ValueClipFrac   *float64 `json:"value_clip_frac,omitempty"`
	ExplainedVar    *float64 `json:"explained_var,omitempty"`
	Tokens          int      `json:"tokens"`
	Seqs            int      `json:"seqs"` // sequences the solver trained on
	ResponseLenMean float64  `json:"response_len_mean,omitempty"`
	SolvedAllFrac   float64  `json:"groups_all_correct,omitempty"`
	SolvedNoneFrac  float64  `json:"groups_none_correct,omitempty"`
	WeightVersion   int64    `json:"weight_version"`
	// WeightLag is how many versions the oldest sample of the step lags
	// behind the version that would be on-policy for it (the learner's
	// step before this one): 0 in synchronous runs, ≤ max staleness in
	// asynchronous ones. RL steps only.
	WeightLag *int64 `json:"weight_lag,omitempty"`
	// ScoreStage is SCoRe's stage of an RL step (1 or 2) in a run with a
	// stage I (score_stage1_steps); absent otherwise.
	ScoreStage int `json:"score_stage,omitempty"`
	// ContextKL and ContextConfidence are the textual actor-critic's
	// measured terms, means over the RL step's episodes: the solver's
	// log π(y | x, c) − log π(y | x) (a one-sample KL estimate between its
	// answer distributions with and without the context) and its mean
	// per-token log-probability of the verified answer given the context.
	ContextKL         *float64 `json:"context_kl,omitempty"`
	ContextConfidence *float64 `json:"context_confidence,omitempty"`
	// Trained names the policies an alternating RL step trained
	// (update_ratio): "feedback" or "solver"; absent otherwise.
	Trained string `json:"trained,omitempty"`
	// RolloutRegenerated counts the generation chunks of the run so far
	// that ran again because their rollout actor was lost; RolloutLive
	// is the solver's live actors after the step, and RolloutReplaced the
	// actors started so far in place of lost ones (runs with rollout
	// actors).
	RolloutRegenerated *int64  `json:"rollout_regenerated,omitempty"`
	RolloutLive        *int    `json:"rollout_live,omitempty"`
	RolloutReplaced    *int64  `json:"rollout_replaced,omitempty"`
	GenSeconds         float64 `json:"gen_s,omitempty"`
	TrainSeconds       float64 `json:"train_s"`
	SyncSeconds        float64 `json:"sync_s"`
	EvalSeconds        float64 `json:"eval_s,omitempty"`
	ElapsedSeconds     float64 `json:"elapsed_s"`
	// Agent episodes (agent.go: AgentStats), over the RL step's episodes
	// and, eval_*, over the held-out ones at evaluation steps (where
	// eval_accuracy is the completion rate); episode_return is the mean
	// undiscounted sum of an episode's step rewards.
	CompletionRate        *float64           `json:"completion_rate,omitempty"`
	ActionsPerEpisode     *float64           `json:"actions_per_episode,omitempty"`
	InvalidActionRate     *float64           `json:"invalid_action_rate,omitempty"`
	EpisodeReturn         *float64           `json:"episode_return,omitempty"`
	ActionReward          map[string]float64 `json:"action_reward,omitempty"`
	ToolCalls             *int               `json:"tool_calls,omitempty"`
	ToolErrors            *int               `json:"tool_errors,omitempty"`
	EvalCompletionRate    *float64           `json:"eval_completion_rate,omitempty"`
	EvalActionsPerEpisode *float64           `json:"eval_actions_per_episode,omitempty"`
	EvalInvalidActionRate *float64           `json:"eval_invalid_action_rate,omitempty"`
	EvalEpisodeReturn     *float64           `json:"eval_episode_return,omitempty"`
	EvalActionReward      map[string]float64 `json:"eval_action_reward,omitempty"`
	EvalToolCalls         *int               `json:"eval_tool_calls,omitempty"`
	EvalToolErrors        *int               `json:"eval_tool_errors,omitempty"`
	// EnvErrors (EvalEnvErrors) are the steps the environment failed to
	// take, each ending its episode; absent when none failed.
	EnvErrors     *int `json:"env_errors,omitempty"`
	EvalEnvErrors *int `json:"eval_env_errors,omitempty"`
	// EnvSteps are the environment steps of the RL step's episodes and
	// EnvStepSeconds their mean wall time (the environment's Step call:
	// for env http, the request to the server).
	EnvSteps       *int64   `json:"env_steps,omitempty"`
	EnvStepSeconds *float64 `json:"env_step_s,omitempty"`
	// WarmupProbe is the greedy completion rate on training tasks that
	// ends the warm-up early (Config.WarmupUntil), on the warm-up steps
	// that measure it.
	WarmupProbe *float64 `json:"warmup_probe,omitempty"`
}

// Result sums up a run.
type Result struct {
	Steps          int     // optimizer steps taken (warm-up and RL)
	PostWarmupEval float64 // eval accuracy right after warm-up (−1 when not evaluated)
	FinalEval      float64 // eval accuracy at the last step (−1 when not evaluated)
	// The turn metrics after warm-up and at the last evaluation
	// (multi-turn episodes; zero otherwise).
	PostWarmupTurns, FinalTurns TurnEval
	EvalProblems                int   // distinct held-out problems evaluated
	WeightVersion               int64 // version the engine serves at the end
	LastCheckpointDir           string
	// RolloutRegenerated counts generation chunks that ran again on
	// another rollout actor after theirs was lost (runs with Rollout).
	RolloutRegenerated int64
	// Stopped: the run ended early because Config.Stop was closed; its
	// last step is checkpointed (LastCheckpointDir).
	Stopped bool
	// TraceCalls are the recorded calls Config.Traces selected, of them
	// TraceRetokenized recorded without token ids (re-tokenized).
	TraceCalls, TraceRetokenized int
	// TraceRows are the rows those calls make: fewer where the calls of a
	// conversation merged (data.traces.merge_calls). TraceSplits are the
	// calls that could not join the row of their trace before them, by
	// reason, in the order of the reasons' names.
	TraceRows   int
	TraceSplits []TraceSplit
	// TracesRefused were left out (data.traces.skip_refused); the first's
	// reason.
	TracesRefused     int
	FirstTraceRefused string
}

// DriverStateFile is the driver's part of a checkpoint: where the data
// cursor and the step stand.
const DriverStateFile = "driver_state.json"

type driverState struct {
	Step          int    `json:"step"`
	TrainCursor   int    `json:"train_cursor"`
	WeightVersion int64  `json:"weight_version"`
	Seed          uint64 `json:"seed"`
	// WarmupSteps is the warm-up's length once a probe ended it early
	// (Config.WarmupUntil); absent otherwise.
	WarmupSteps *int `json:"warmup_steps,omitempty"`
	// EntropyControl is each controlled policy's entropy controller
	// (Config.EntropyControl), by policy id; absent without control.
	EntropyControl map[string]entropyState `json:"entropy_control,omitempty"`
}

// policy is one trained policy: its learner (one actor or a shard
// group) and the server its engines generate behind (the native engine
// in this process, rollout actors, or vLLM servers: startEngine).
type policy struct {
	id      string
	learner *shard.PlacedGroup
	l       learner.Config // as started: a learner restart starts the engine anew from it
	ro      *Rollout       // rollout actors' settings; nil: the engine is local or vLLM
	server  weightsync.PolicyServer
	eng     *policyEngine // server with the policy's tokenizer
	tok     *tokenizer.Tokenizer
	model   string // the model's name in traces (modelName)
	// launched are the vLLM servers the run started for the policy
	// (VLLM.Launch), stopped with it.
	launched *vllm.Launched
	// regenerated counts the chunks that rollout servers replaced by a
	// learner restart ran again.
	regenerated int64
}

// policyEngine is what episodes generate with: a policy's engine and its
// tokenizer, and the model's name for traces (modelName).
type policyEngine struct {
	engine.Engine
	tok   *tokenizer.Tokenizer
	model string
}

func (e *policyEngine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// run is one training run in progress.
type run struct {
	cfg      Config
	tpl      *compiled
	log      *slog.Logger
	node     *cluster.Node
	solver   *policy
	feedback *policy // mlmt with a feedback policy; nil otherwise
	src      problemSource
	verifier verify.Verifier
	python   episode.PythonExecutor // tool episodes with the python tool
	eval     []task.Problem
	metrics  *os.File
	start    time.Time
	step     int
	logged   int // the last step in metrics.jsonl
	cursor   int
	// prefetched is the problems drawn for batches not trained yet (the
	// asynchronous run's next batch): a checkpoint's cursor leaves them
	// out, so a resumed run draws them again.
	prefetched int
	version    int64
	res        Result
	// rolloutShort: the solver's live rollout actors were fewer than the
	// recipe's at the last step (said once in the log).
	rolloutShort bool
	// traces are the recorded calls the run trains on (Config.Traces);
	// traceDrawn counts the offline RL batches drawn from them.
	traces     *loadedTraces
	traceDrawn int
	// critic is ArCHer's (Config.Archer), built at the first RL step.
	critic *critic
	// warmupPlanned is the configured warm-up length; warmupEnded the
	// step a probe (Config.WarmupUntil) ended the warm-up at, nil until
	// one did (cfg.WarmupSteps is then that step).
	warmupPlanned int
	warmupEnded   *int
	// entropy is the entropy controller's state of each policy it adapts
	// (Config.EntropyControl), by policy id; nil without control.
	entropy map[string]entropyState
	// folders serves the learners whose nodes do not see the run folder
	// what they load (learner.Folders); probe is the name of the file
	// that tells them apart (placeLearners); vllmProbe is the file that
	// tells launched vLLM servers apart, in the run folder while the run
	// lasts (a server restarted on another node looks for it then).
	folders     *learner.FolderServer
	probe       string
	vllmProbe   string
	pulledBytes int64 // of checkpoint files pulled from such learners, in all
}

// Run trains per cfg: it places the learner actor on the cluster, starts
// the native engine in this process, runs the SFT warm-up and the RL loop,
// and returns when the last step is done or ctx ends.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	tpl, err := cfg.validate()
	if err != nil {
		return Result{}, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.EngineBatch == 0 {
		cfg.EngineBatch = 256
	}
	if cfg.LearnerResources == nil {
		cfg.LearnerResources = cluster.Resources{cluster.CPU: 1}
	}
	// Until the first step begins there is no step for a Stop to finish:
	// it cancels the start (placing the learners, building their models,
	// starting the engines) at once.
	ctx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	var startMu sync.Mutex
	starting := true
	beginSteps := func() {
		startMu.Lock()
		starting = false
		startMu.Unlock()
	}
	if cfg.Stop != nil {
		go func() {
			select {
			case <-cfg.Stop:
				startMu.Lock()
				if starting {
					cancelStart()
				}
				startMu.Unlock()
			case <-ctx.Done():
			}
		}()
	}
	defer func() {
		startMu.Lock()
		defer startMu.Unlock()
		if err != nil && starting && ctx.Err() != nil {
			// Whatever failed first (a spawn, a model's init) failed
			// because the start was cancelled.
			err = fmt.Errorf("stopped while starting (%v): %w", err, context.Canceled)
		}
	}()
	r := &run{cfg: cfg, tpl: tpl, log: cfg.Logger, start: time.Now(), res: Result{PostWarmupEval: -1, FinalEval: -1}, warmupPlanned: cfg.WarmupSteps}
	if r.src, err = newSource(ctx, cfg); err != nil {
		return Result{}, err
	}
	if r.verifier, err = newVerifier(cfg); err != nil {
		return Result{}, err
	}
	if r.python, err = newPython(cfg); err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return Result{}, fmt.Errorf("create the run folder: %w", err)
	}
	r.startEntropyControl()
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if cfg.Resume != "" {
		if !cfg.ResumeVerified {
			if err := r.verifyCheckpoint(ctx, cfg.Resume); err != nil {
				return Result{}, fmt.Errorf("resume: %w", err)
			}
		}
		if err := r.readResumeState(); err != nil {
			return Result{}, err
		}
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	if r.metrics, err = os.OpenFile(filepath.Join(cfg.Out, "metrics.jsonl"), flags, 0o644); err != nil {
		return Result{}, fmt.Errorf("metrics: %w", err)
	}
	defer func() {
		if cerr := r.metrics.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("metrics: %w", cerr)
		}
	}()
	if cfg.Resume != "" {
		// Steps after the checkpoint (a run that went on past it) are redone.
		if err := r.cutMetrics(r.step); err != nil {
			return Result{}, fmt.Errorf("resume: %w", err)
		}
	}

	r.node = cfg.Node
	if r.node == nil {
		ncfg := cluster.Config{CPUs: embeddedCPUs(cfg), Memory: cfg.EmbeddedMemory, Logger: actor.DiscardLogger()}
		if cfg.launchesVLLM() {
			// The run's own node starts the vLLM servers, on this host's
			// GPUs, with $RLNODE_VLLM_COMMAND or vllm serve.
			if err := vllm.OfferServers(vllm.DefaultCommand()); err != nil {
				return Result{}, fmt.Errorf("launch vLLM servers: %w", err)
			}
			ncfg.GPUs, ncfg.Labels = -1, map[string]string{vllm.LaunchLabel: "on"}
		}
		if r.node, err = cluster.Start(ctx, ncfg); err != nil {
			return Result{}, fmt.Errorf("embedded cluster: %w", err)
		}
		defer r.node.Stop()
	}
	if cfg.VerifyOn == VerifyOnCluster && cfg.Node != nil {
		r.verifier = &clusterVerifier{node: r.node, mode: cfg.SandboxMode}
		if r.cfg.VerifyWorkers == 0 {
			// As many in flight as the cluster has CPUs; those held by
			// actors make the rest wait their turn.
			var cpus float64
			for _, v := range r.node.Views() {
				cpus += v.Total[cluster.CPU]
			}
			r.cfg.VerifyWorkers = max(1, int(cpus))
		}
	}
	if err := r.serveFolders(); err != nil {
		return Result{}, err
	}
	defer r.closeFolders()
	solverLearner := cfg.Learner
	solverLearner.Model, solverLearner.ModelDir, solverLearner.Seed = cfg.Model, cfg.ModelDir, cfg.Seed
	if cfg.Node == nil {
		if err := r.checkEmbeddedMemory(solverLearner); err != nil {
			return Result{}, err
		}
	}
	if r.solver, err = r.startPolicy(ctx, "solver", solverLearner, cfg.Resume, cfg.Rollout); err != nil {
		return Result{}, err
	}
	defer r.solver.stop()
	if fb := cfg.Feedback; fb != nil && !cfg.SharedWeights {
		resume := ""
		if cfg.Resume != "" {
			resume = filepath.Join(cfg.Resume, FeedbackDir)
		}
		if r.feedback, err = r.startPolicy(ctx, "feedback", fb.learnerConfig(cfg), resume, cfg.FeedbackRollout); err != nil {
			return Result{}, err
		}
		defer r.feedback.stop()
	}
	if d := cfg.Traces; d != nil {
		pc, err := contextOf(r.solver.l, "models.policy")
		if err != nil {
			return Result{}, fmt.Errorf("data.traces: %w", err)
		}
		if r.traces, err = loadTraces(d, r.solver.tok, pc, cfg.Seed, cfg.WarmupSteps > 0, cfg.GroupSize, cfg.PromptsPerStep); err != nil {
			return Result{}, fmt.Errorf("%s: %w", traceField(err), err)
		}
		r.res.TraceCalls, r.res.TraceRetokenized, r.res.TraceRows = r.traces.calls, r.traces.retokenized, r.traces.rows
		r.res.TraceSplits = r.traces.splits
		r.log.Info("data.traces: rows", "calls", r.traces.calls, "rows", r.traces.rows, "per_call", d.PerCall)
		for _, sp := range r.res.TraceSplits {
			r.log.Info("data.traces: calls that start a row of their own", "reason", sp.Reason, "calls", sp.Calls, "first", sp.First)
		}
		r.res.TracesRefused, r.res.FirstTraceRefused = r.traces.refused, r.traces.firstRefused
		if r.traces.refused > 0 {
			r.log.Warn("data.traces: traces refused and left out (skip_refused)", "traces", r.traces.refused, "first", r.traces.firstRefused)
		}
	}
	// The engines start from the learners' weights, whatever the init.
	if err := r.syncAll(ctx); err != nil {
		return Result{}, err
	}
	if cfg.EvalEvery > 0 {
		if err := r.pickEvalProblems(); err != nil {
			return Result{}, err
		}
	}
	beginSteps()
	if err := r.trainLoop(ctx); err != nil {
		return r.res, err
	}
	r.res.Steps, r.res.WeightVersion = r.step, r.solver.eng.WeightVersion()
	r.res.RolloutRegenerated = r.regenerated()
	return r.res, nil
}

// startPolicy places the learner of one policy (placeLearners) and
// starts its engine (startEngine).
func (r *run) startPolicy(ctx context.Context, id string, l learner.Config, resume string, ro *Rollout) (*policy, error) {
	r.log.Info("starting the learner", "policy", id)
	ls, err := r.placeLearners(ctx, id, l, resume)
	if err != nil {
		return nil, err
	}
	p := &policy{id: id, learner: ls, l: l, ro: ro}
	if err := r.startEngine(ctx, p); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// startEngine starts p's policy server: rollout actors (Config.Rollout),
// vLLM servers (Config.VLLM) or a native engine in this process.
func (r *run) startEngine(ctx context.Context, p *policy) error {
	var err error
	switch {
	case p.ro != nil:
		err = r.startRollout(ctx, p)
	case r.vllmConfig(p) != nil:
		err = r.startVLLM(ctx, p)
	default:
		var es *weightsync.EngineServer
		if es, err = weightsync.StartEngine(ctx, p.l.Model, p.l.ModelDir, native.Config{MaxBatch: r.cfg.EngineBatch, Device: r.cfg.EngineDevice}); err == nil {
			p.server, p.tok = es, es.Tokenizer()
		}
	}
	if err != nil {
		return fmt.Errorf("%s policy: %w", p.id, err)
	}
	p.model = r.modelName(p)
	p.eng = &policyEngine{Engine: p.server, tok: p.tok, model: p.model}
	return nil
}

// modelName names p's model in its turns' traces: the vLLM servers'
// model, the checkpoint it started from (a Hugging Face cache snapshot by
// its hub id), or, trained from scratch, "scratch:", its architecture and
// the policy ("scratch:Qwen2ForCausalLM/feedback": MLMT's two policies
// are two models).
func (r *run) modelName(p *policy) string {
	switch v := r.vllmConfig(p); {
	case v != nil && v.Model != "":
		return v.Model
	case p.l.ModelDir != "":
		return checkpointName(p.l.ModelDir)
	case p.l.Model != nil:
		return "scratch:" + p.l.Model.Architecture + "/" + p.id
	}
	return p.id
}

// checkpointName is dir, or ORG/NAME for a snapshot of the Hugging Face
// cache (…/models--ORG--NAME/snapshots/REVISION), as the recipe named it.
func checkpointName(dir string) string {
	rev := filepath.Clean(dir)
	snaps := filepath.Dir(rev)
	repo := filepath.Base(filepath.Dir(snaps))
	if filepath.Base(snaps) != "snapshots" || !strings.HasPrefix(repo, "models--") {
		return dir
	}
	org, name, ok := strings.Cut(strings.TrimPrefix(repo, "models--"), "--")
	if !ok || org == "" || name == "" {
		return dir
	}
	return org + "/" + name
}

// stopEngine closes p's policy server.
func (p *policy) stopEngine() {
	if p.server == nil {
		return
	}
	if rs := p.server.Status().Replicas; rs != nil {
		p.regenerated += rs.Regenerated
	}
	p.server.Close()
	p.server, p.eng = nil, nil
}

func (p *policy) stop() {
	p.stopEngine()
	p.launched.Stop(context.Background())
	p.learner.Stop()
}

// syncAll pushes every policy's weights to its engine.
func (r *run) syncAll(ctx context.Context) error {
	if err := r.syncWeights(ctx, r.solver); err != nil {
		return err
	}
	if r.feedback != nil {
		return r.syncWeights(ctx, r.feedback)
	}
	return nil
}

// syncWeights publishes a learner's weights to its server as the version
// of the run's step (one Train call; a learner with mini-batches takes
// more optimizer steps than that).
func (r *run) syncWeights(ctx context.Context, p *policy) error {
	version := int64(r.step)
	if err := p.server.Publish(ctx, version, r.source(p)); err != nil {
		if errors.Is(err, safetensors.ErrNotFinite) {
			// A diverged step: the run stops; the engines serve the
			// version before, and no checkpoint of it is written.
			return fmt.Errorf("%s weights of step %d are not finite (the learner's step diverged; the engines keep the version before): %w", p.id, version, err)
		}
		return fmt.Errorf("%s version %d: %w", p.id, version, err)
	}
	if p == r.solver {
		r.version = version
		if r.cfg.OnWeights != nil {
			r.cfg.OnWeights(r.version, p.server)
		}
	}
	return nil
}

// pickEvalProblems takes up to EvalProblems distinct held-out problems.
func (r *run) pickEvalProblems() error {
	probs, err := r.src.heldOut(r.cfg.EvalProblems)
	if err != nil {
		return fmt.Errorf("pick the evaluation problems: %w", err)
	}
	r.eval = probs
	r.res.EvalProblems = len(r.eval)
	return nil
}

func (r *run) prompt(p task.Problem) []int {
	return r.solver.tok.Encode(render(r.tpl.prompt, TemplateData{Question: p.Question}))
}

func (r *run) nextTrain() (task.Problem, error) {
	p, err := r.src.train(r.cursor)
	if err != nil {
		return p, fmt.Errorf("train problem %d: %w", r.cursor, err)
	}
	r.cursor++
	return p, nil
}

func (r *run) setAlgorithm(ctx context.Context, name string, lr float64) error {
	for _, p := range []*policy{r.solver, r.feedback} {
		if p == nil {
			continue
		}
		if err := p.learner.SetAlgorithm(ctx, name, lr); err != nil {
			return fmt.Errorf("set the %s algorithm %s: %w", p.id, name, err)
		}
	}
	return nil
}

// endOfText is tok's end-of-text id, which ends every SFT target and
// every answer the run scores.
func endOfText(tok *tokenizer.Tokenizer) (int, error) {
	eos, ok := tok.TokenID(tokenizer.EndOfText)
	if !ok {
		return 0, fmt.Errorf("the tokenizer has no %s token to end answers with", tokenizer.EndOfText)
	}
	return eos, nil
}

// warmupStep is one step of plain SFT on drawn problems with their
// worked answers, so the policy's reward starts above zero.
func (r *run) warmupStep(ctx context.Context) (Metrics, error) {
	cfg := r.cfg
	eos, err := endOfText(r.solver.tok)
	if err != nil {
		return Metrics{}, err
	}
	t0 := time.Now()
	var b learner.Batch
	drawn := cfg.WarmupBatch // problems drawn, with worked answers
	if r.traces != nil {
		var err error
		if b, err = warmupBatchFromTraces(r.traces.warmup, r.step, cfg.WarmupBatch, cfg.Traces); err != nil {
			return Metrics{}, err
		}
		drawn = 0
	}
	for range drawn {
		p, err := r.nextTrain()
		if err != nil {
			return Metrics{}, err
		}
		ans := r.solver.tok.Encode(render(r.tpl.answer, TemplateData{Question: p.Question, Answer: p.Answer}))
		b.Prompts = append(b.Prompts, toInt32(r.prompt(p)))
		b.Responses = append(b.Responses, append(toInt32(ans), int32(eos)))
	}
	return r.warmupTrain(ctx, b, t0)
}

// warmupTrain trains the solver on warm-up batch b, begun at t0, and
// reports the step's metrics.
func (r *run) warmupTrain(ctx context.Context, b learner.Batch, t0 time.Time) (Metrics, error) {
	st, err := r.train(ctx, r.solver, b)
	if err != nil {
		return Metrics{}, err
	}
	m := Metrics{Phase: "warmup"}
	r.fill(&m, st)
	m.TrainSeconds = time.Since(t0).Seconds()
	return m, nil
}

// train sends one batch to a policy's learner; the solver's steps are the
// run's.
func (r *run) train(ctx context.Context, p *policy, b learner.Batch) (learner.Stats, error) {
	b.PolicyID = p.id
	if testTrainBatch != nil {
		testTrainBatch(p.id, r.step, b)
	}
	st, err := p.learner.Train(ctx, b)
	if err != nil {
		step := r.step + 1
		if p != r.solver && r.cfg.BiLevel == nil {
			step = r.step // the solver trained on this step first
		}
		return st, fmt.Errorf("train the %s at step %d: %w", p.id, step, err)
	}
	if p == r.solver {
		// A run's step is one Train call, whatever the optimizer steps
		// inside it (algorithm.mini_batches, epochs).
		r.step++
	}
	return st, nil
}

// testTrainBatch, when set by a test, sees every batch a policy trains
// on: policy, the run's step before it, the batch.
var testTrainBatch func(policy string, step int, b learner.Batch)

// fill copies the solver's Stats of the run's current step into m.
func (r *run) fill(m *Metrics, st learner.Stats) {
	m.Step = r.step
	m.Loss, m.GradNorm, m.LR = st.Loss, st.GradNorm, st.LR
	m.ClipFrac, m.ClipFracHigh, m.ApproxKL, m.RefKL, m.Entropy = st.ClipFrac, st.ClipFracHigh, st.ApproxKL, st.RefKL, st.Entropy
	m.Tokens, m.Seqs = st.Tokens, st.Seqs
	if m.Phase == "rl" && r.cfg.Learner.Algorithm == learner.PPO {
		m.ValueLoss, m.ValueClipFrac, m.ExplainedVar = &st.ValueLoss, &st.ValueClipFrac, &st.ExplainedVar
		if r.cfg.Learner.KLInReward {
			m.KLPenalty = &st.KLPenalty
		}
	}
}

// finishStep carries out what plan p says follows a step's training:
// the weight push, the evaluation and the checkpoint; then it writes the
// metrics line. Where stoppable (not the run's last step), a stop asked
// before the checkpoint makes this step the run's last, checkpointed.
func (r *run) finishStep(ctx context.Context, m *Metrics, p *StepPlan, stoppable bool) error {
	if r.cfg.finishBegins != nil {
		r.cfg.finishBegins(r.step)
	}
	t0 := time.Now()
	st := r.solver.server.Status()
	if p.Push {
		if err := r.syncAll(ctx); err != nil {
			return r.saveBeforeFailing(ctx, m, err)
		}
	}
	m.SyncSeconds = time.Since(t0).Seconds()
	m.WeightVersion = r.solver.eng.WeightVersion()
	if st.Replicas != nil {
		regen, live, replaced := r.regenerated(), r.liveReplicas(), r.replacedReplicas()
		m.RolloutRegenerated, m.RolloutLive, m.RolloutReplaced = &regen, &live, &replaced
	}
	if p.Probe {
		if err := r.probeWarmup(ctx, m, p); err != nil {
			return r.saveBeforeFailing(ctx, m, err)
		}
	}
	if p.Eval {
		t0 = time.Now()
		if r.cfg.multiTurn() {
			te, err := evalTurns(ctx, r.cfg, r.tpl, r.solver.eng, r.feedbackEngine(), r.src, r.eval, r.verifier)
			if err == nil {
				err = verifierFailure(r.verifier)
			}
			if err != nil {
				return r.saveBeforeFailing(ctx, m, fmt.Errorf("evaluate at step %d: %w", r.step, err))
			}
			te.fill(m)
			m.EvalGroups = te.Groups
			r.res.FinalTurns = te
		} else {
			se, err := r.evaluate(ctx)
			if err != nil {
				return r.saveBeforeFailing(ctx, m, err)
			}
			if err := verifierFailure(r.verifier); err != nil {
				return r.saveBeforeFailing(ctx, m, fmt.Errorf("evaluate at step %d: %w", r.step, err))
			}
			m.EvalAccuracy, m.EvalSampled, m.EvalGroups = &se.Accuracy, se.Sampled, se.Groups
			if se.Agent != nil {
				se.Agent.fillEval(m)
			}
		}
		m.EvalSeconds = time.Since(t0).Seconds()
		r.res.FinalEval = *m.EvalAccuracy
		if p.PostWarmup {
			r.res.PostWarmupEval = *m.EvalAccuracy
			r.res.PostWarmupTurns = r.res.FinalTurns
		}
	}
	if stoppable && !p.Stop && r.stopAsked() {
		// Asked during the push, the probe or the evaluation: this step
		// is checkpointed and ends the run, as one asked during the step.
		*p = StopAfter(*p)
	}
	if p.Checkpoint {
		dir := filepath.Join(r.cfg.Out, "checkpoints", fmt.Sprintf("step-%d", r.step))
		if err := r.checkpoint(ctx, dir); err != nil {
			return err
		}
		r.res.LastCheckpointDir = dir
	}
	if err := r.writeMetrics(m); err != nil {
		return err
	}
	r.logged = m.Step
	r.log.Info("step", "step", m.Step, "phase", m.Phase, "reward", m.RewardMean, "eval", m.EvalAccuracy, "loss", m.Loss)
	if r.cfg.Progress != nil {
		r.cfg.Progress(*m)
	}
	return nil
}

// writeMetrics appends m, the step's line, to metrics.jsonl.
func (r *run) writeMetrics(m *Metrics) error {
	m.ElapsedSeconds = time.Since(r.start).Seconds()
	js, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if _, err := r.metrics.Write(append(js, '\n')); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// saveBeforeFailing is err, the failure of what follows a step's
// training (the weight push, the warm-up probe, the evaluation: an
// engine or a verifier failing), after the step is checkpointed with its
// metrics line, as a step during which a stop was asked is: its
// training, and every step since the last planned checkpoint, would be
// lost otherwise, and --resume goes on from it. A learner's failure
// (its restart redoes the step), a cancelled run and a run that cannot
// resume are left as they are.
func (r *run) saveBeforeFailing(ctx context.Context, m *Metrics, err error) error {
	if ctx.Err() != nil || !r.cfg.Resumable() {
		return err
	}
	if _, ok := errors.AsType[*shard.Failure](err); ok {
		return err
	}
	if errors.Is(err, safetensors.ErrNotFinite) {
		return err // the weights diverged: a checkpoint of them would resume nothing
	}
	dir := filepath.Join(r.cfg.Out, "checkpoints", fmt.Sprintf("step-%d", r.step))
	if cerr := r.checkpoint(ctx, dir); cerr != nil {
		return fmt.Errorf("%w (checkpointing step %d, trained before it, failed too: %v)", err, r.step, cerr)
	}
	r.res.LastCheckpointDir = dir
	if werr := r.writeMetrics(m); werr == nil {
		r.logged = m.Step
	}
	return fmt.Errorf("%w (step %d, trained before it, is checkpointed in %s)", err, r.step, dir)
}

// rlStep is one RL step: take the step's batch of episodes from the
// pipeline (drawn and played per the plan, episodes.go) and train every
// policy on its turns of them. Each step trains:
//   - the solver (unless FreezeSolver) on its turns: single-turn and tool
//     episodes' one, the first attempts of MLMT and SCoRe and, unless
//     StopGradient, their final answers (MLMT: their score; SCoRe: r2 +
//     α(r2 − r1)), one GRPO group per prompt and turn;
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
func (r *run) rlStep(ctx context.Context, pipe *pipeline, p StepPlan) (Metrics, error) {
	cfg := r.cfg
	trainFeedback := r.feedback != nil && cfg.Feedback.Train && p.TrainHigh
	trainSolver := !cfg.FreezeSolver && (p.TrainLow || cfg.SharedWeights)
	t0 := time.Now()
	batch, err := pipe.next(ctx, p)
	if err != nil {
		return Metrics{}, err
	}
	if err := verifierFailure(r.verifier); err != nil {
		return Metrics{}, fmt.Errorf("step %d: %w", r.step+1, err)
	}
	gen := batch.genSeconds
	if cfg.MaxStaleness == 0 {
		gen = time.Since(t0).Seconds()
	}
	lag, err := r.checkLag(batch.onPolicy, lowestVersion(batch.turns))
	if err != nil {
		return Metrics{}, err
	}
	solverTurns := func(t data.Turn) bool { return !cfg.StopGradient || t.Turn == 0 }
	if cfg.SharedWeights { // one learner: the feedback role's turns are the solver's rows
		solverTurns = func(t data.Turn) bool {
			if t.Turn == 1 {
				return p.TrainHigh
			}
			return p.TrainLow && (!cfg.StopGradient || t.Turn == 0)
		}
	}
	trainTurns := batch.turns
	if cfg.Episode == EpisodeAgent {
		if trainTurns, err = agentTraining(batch.turns, cfg.Learner.Algorithm, cfg.Agent); err != nil {
			return Metrics{}, fmt.Errorf("step %d: %w", r.step+1, err)
		}
	}
	sb, err := BatchFromTrajectories(r.solver.id, trainTurns, solverTurns)
	if err != nil {
		return Metrics{}, fmt.Errorf("step %d: %w", r.step+1, err)
	}
	if cfg.RWGroupFilter {
		rows, _, err := trajectoryRows(r.solver.id, trainTurns, solverTurns)
		if err != nil {
			return Metrics{}, fmt.Errorf("step %d: %w", r.step+1, err)
		}
		sb.Weights = groupFilterWeights(trainTurns, rows, cfg.Learner.RWThreshold)
	}
	if p.Stage1 {
		second := int32(1)
		if cfg.Episode == EpisodeMLMT {
			second = 2 // RL-guided SCoRe: the refine turn
		}
		if err := scoreStage1(&sb, trainTurns, r.solver.id, solverTurns, second, cfg.Learner.Loss.KLCoef, cfg.ScoreStage1KLCoef); err != nil {
			return Metrics{}, fmt.Errorf("step %d: %w", r.step+1, err)
		}
	}
	var fbb learner.Batch
	if trainFeedback {
		if fbb, err = BatchFromTrajectories(r.feedback.id, batch.turns, nil); err != nil {
			return Metrics{}, fmt.Errorf("step %d: %w", r.step+1, err)
		}
	}
	t1 := time.Now()
	// Bi-level MLMT trains the feedback policy first: its value of each
	// episode before the step is the solver's baseline.
	var fst learner.Stats
	var solverCoef, feedbackCoef *float64 // under entropy control
	if cfg.BiLevel != nil {
		if fst, feedbackCoef, err = r.trainRL(ctx, r.feedback, fbb); err != nil {
			return Metrics{}, err
		}
		if err := biLevelAdvantages(&sb, batch.turns, r.solver.id, r.feedback.id, solverTurns, fst.Values); err != nil {
			return Metrics{}, fmt.Errorf("step %d: %w", r.step+1, err)
		}
	}
	var cm Metrics
	if cfg.Archer != nil {
		actor, err := r.archerStep(ctx, &sb, batch.turns, &cm)
		if err != nil {
			return Metrics{}, fmt.Errorf("step %d: %w", r.step+1, err)
		}
		trainSolver = trainSolver && actor
	}
	var st learner.Stats
	if !trainSolver {
		r.step++ // the run's step, with no solver step in it
	} else if st, solverCoef, err = r.trainRL(ctx, r.solver, sb); err != nil {
		return Metrics{}, err
	}
	m := Metrics{Phase: "rl", EntropyCoef: solverCoef}
	r.fill(&m, st)
	if !trainSolver {
		m.ValueLoss, m.ValueClipFrac, m.ExplainedVar = nil, nil, nil
	}
	m.CriticQLoss, m.CriticVLoss, m.ReplaySize, m.CriticAdvantageMean = cm.CriticQLoss, cm.CriticVLoss, cm.ReplaySize, cm.CriticAdvantageMean
	if trainFeedback && cfg.BiLevel == nil {
		if fst, feedbackCoef, err = r.trainRL(ctx, r.feedback, fbb); err != nil {
			return Metrics{}, err
		}
	}
	m.FeedbackEntropyCoef = feedbackCoef
	if trainFeedback {
		fillFeedback(&m, fst, cfg.Feedback.learnerConfig(cfg).Algorithm)
		if cfg.BiLevel != nil {
			m.FeedbackValueLoss = &fst.ValueLoss
		}
	}
	if cfg.Episodes != nil && !batch.offline {
		cfg.Episodes(r.step, batch.turns)
	}
	final, turn1 := rlStepMetrics(&m, outcomes(batch.turns, r.solver.id), cfg.GroupSize)
	switch {
	case cfg.multiTurn():
		m.RewardMean, m.Turn1RewardMean = &final, &turn1
	case cfg.Episode == EpisodeAgent:
		m.RewardMean = &final // the mean episode total
		agentStats(batch.turns, envActions(cfg.Agent.Env)).fillRL(&m)
		m.EnvSteps, m.EnvStepSeconds = batch.envClock.figures()
	default:
		reward := st.RewardMean
		m.RewardMean = &reward
	}
	m.GenSeconds, m.TrainSeconds = gen, time.Since(t1).Seconds()
	m.WeightLag = &lag
	if cfg.TextualAC != nil && batch.context.n > 0 {
		c := batch.context
		m.ContextKL, m.ContextConfidence = &c.dependence, &c.confidence
	}
	if cfg.UpdateRatio[0] > 0 {
		m.Trained = "solver"
		if p.TrainHigh {
			m.Trained = "feedback"
		}
	}
	if cfg.ScoreStage1Steps > 0 {
		m.ScoreStage = 2
		if p.Stage1 {
			m.ScoreStage = 1
		}
	}
	return m, nil
}

// FeedbackDir is where an MLMT checkpoint keeps the feedback policy:
// step-N/ holds the solver (so it loads as a model like a single-turn
// checkpoint), step-N/feedback/ the feedback policy in the same layout.
const FeedbackDir = "feedback"

// checkpoint writes the learner's checkpoint (weights, optimizer,
// reference, step), the tokenizer (so the directory loads as a model for
// the native engine) and the driver's cursor into dir; the feedback
// policy's, if any, into dir/feedback; last, the checksum manifest of
// all of it (WriteManifest).
//
// A learner whose save fails on its own (Failure.Answered: a full disk, a
// read-only folder) is not restarted: it is whole, and redoing the steps
// since the last checkpoint would end at the same save. The run stops
// with the error, and the partial dir is removed (it would hold the
// space a full disk needs and count as this step's checkpoint).
func (r *run) checkpoint(ctx context.Context, dir string) (err error) {
	defer func() {
		if err == nil || ctx.Err() != nil {
			return
		}
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = fmt.Errorf("%w (removing the partial checkpoint: %v)", err, rerr)
			return
		}
		err = fmt.Errorf("%w (the partial %s is removed; %s)", err, filepath.Base(dir), r.newestCheckpoint())
	}()
	save := func(p *policy, dir string) error {
		t0, pulled := time.Now(), r.pulledBytes
		if _, err := p.learner.Save(ctx, dir); err != nil {
			if f, ok := errors.AsType[*shard.Failure](err); ok && f.Answered {
				// Left out of the chain, so trainLoop does not restart.
				return fmt.Errorf("checkpoint %s: %s learner (not restarted: its own save failed): %w", dir, f.Policy, f.Err)
			}
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		if n := r.pulledBytes - pulled; n > 0 {
			r.log.Info("checkpoint saved by learners that do not see the run folder and pulled here", "policy", p.id, "checkpoint", dir, "pulled_bytes", n, "seconds", time.Since(t0).Seconds())
		}
		if err := r.checkSavedVisible(ctx, p, dir); err != nil {
			return err
		}
		if err := p.tok.Save(filepath.Join(dir, "tokenizer.json")); err != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		return nil
	}
	if err := save(r.solver, dir); err != nil {
		return err
	}
	if r.feedback != nil {
		if err := save(r.feedback, filepath.Join(dir, FeedbackDir)); err != nil {
			return err
		}
	}
	js, err := json.MarshalIndent(driverState{Step: r.step, TrainCursor: r.cursor - r.prefetched, WeightVersion: r.version, Seed: r.cfg.Seed, WarmupSteps: r.warmupEnded, EntropyControl: r.entropy}, "", "  ")
	if err != nil {
		return err
	}
	// Written whole or not at all (a kill mid-write must not leave a
	// truncated file that --resume takes for a complete checkpoint).
	tmp := filepath.Join(dir, DriverStateFile+".tmp")
	if err := os.WriteFile(tmp, append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, DriverStateFile)); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := WriteManifestContext(ctx, dir); err != nil {
		return fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return nil
}

// verifyCheckpoint checks the checkpoint to load against its manifest
// (VerifyCheckpoint): one that fails is never trained on; one without a
// manifest (older) is loaded with a warning.
func (r *run) verifyCheckpoint(ctx context.Context, dir string) error {
	err := VerifyCheckpointContext(ctx, dir)
	if errors.Is(err, ErrNoManifest) {
		r.log.Warn("checkpoint has no checksum manifest: its files are not verified", "checkpoint", dir)
		return nil
	}
	return err
}

// readResumeState reads the driver's state from the checkpoint to resume
// from; the learner actor loads its own part at spawn.
func (r *run) readResumeState() error {
	path := filepath.Join(r.cfg.Resume, DriverStateFile)
	js, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	var ds driverState
	if err := json.Unmarshal(js, &ds); err != nil {
		return fmt.Errorf("resume: %s: %w", path, err)
	}
	switch {
	case ds.Seed != r.cfg.Seed:
		return fmt.Errorf("resume: %s: seed %d, the config's %d", path, ds.Seed, r.cfg.Seed)
	case ds.Step < 0 || ds.TrainCursor < 0:
		return fmt.Errorf("resume: %s: step %d, cursor %d: want ≥ 0", path, ds.Step, ds.TrainCursor)
	}
	r.step, r.cursor = ds.Step, ds.TrainCursor
	if err := r.resumeEntropyControl(ds, path); err != nil {
		return err
	}
	return r.resumeWarmupEnd(ds, path)
}

func toInt32(x []int) []int32 {
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32(v)
	}
	return out
}
