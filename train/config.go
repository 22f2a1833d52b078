package train

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/tmpl"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

// Config is everything the training loop needs. Recipes map onto it;
// Quickstart is the tuned preset. Zero fields are errors unless their
// comment gives a default.
type Config struct {
	// Out is the run directory: metrics.jsonl, checkpoints/step-N/.
	Out string
	// Seed drives model init, data order and sampling.
	Seed uint64

	// Model is the architecture of a policy trained from scratch (random
	// init with Seed); ModelDir a checkpoint to start from instead
	// (config.json, safetensors, tokenizer.json). Exactly one is set. From
	// scratch, the tokenizer is tokenizer.BuiltinSized(Model.VocabSize).
	Model    *model.Config
	ModelDir string

	// Learner configures the RL phase: algorithm, optimizer, loss,
	// micro-batching. Its Model/ModelDir/Seed are filled from the fields
	// above.
	Learner learner.Config

	// Task generates the problems (train split for training, held-out
	// split for evaluation).
	Task task.Config
	// Dataset, when set, is the problem source instead of Task: train and
	// held-out rows from files (data.go); MLMT's .Hint is then a column
	// (Dataset.HintColumn).
	Dataset *Dataset
	// Verifier scores answers, every turn's: VerifierMath (also ""),
	// VerifierGSM8K or VerifierCode (sandboxed Python tests; verify.go).
	Verifier string
	// VerifyWorkers bounds the verifications running at once (default:
	// the cores for code, 1 for math and gsm8k); with code verified in the
	// driver, at most verify.MaxConcurrency.
	VerifyWorkers int
	// VerifyOn is where code verifications run: VerifyOnDriver (also "":
	// in this process, VerifyWorkers at once) or VerifyOnCluster (as
	// cluster tasks of one CPU on any node with one free, VerifyWorkers
	// in flight; a run without a cluster, Node nil, verifies here).
	VerifyOn string
	// SandboxMode is the code sandbox's mode: "" (bwrap where it works,
	// else namespaces), "bwrap", "namespaces" or "rlimit-only-trusted-code".
	SandboxMode string
	// PromptTemplate renders a problem into the prompt text (Go
	// text/template over .Question); short prompts keep tiny models fast.
	PromptTemplate string
	// AnswerTemplate renders the worked answer that SFT warm-up trains on
	// (over .Question and .Answer); it must pass the run's verifier (with
	// code, .Answer is the dataset's reference program).
	AnswerTemplate string

	// Episode is the episode kind: EpisodeSingle (also ""), EpisodeMLMT,
	// EpisodeSCoRe or EpisodeTools. Prompts are plain text (no chat
	// template): each later turn's prompt is rendered from its template.
	Episode string
	// MLMT: FeedbackTemplate is the feedback policy's prompt (over
	// .Question, .Hint — what only the feedback policy sees, from the
	// task or the dataset's hint column — and .Attempt, the solver's first
	// answer);
	// FeedbackAnswerTemplate the feedback its SFT warm-up trains on (over
	// .Question, .Hint, .AnyHint, .Answer, .Attempt);
	// RefineFeedbackTemplate the feedback the solver's warm-up refine
	// prompts show (same fields; empty: FeedbackAnswerTemplate's text), so
	// the solver can learn to use feedback that names the hint while the
	// feedback policy's own target names any position (.AnyHint) and what
	// to say is left to RL; StaticFeedbackTemplate the
	// feedback text without a feedback policy (over .Question, .Attempt);
	// RefineTemplate the solver's third-turn prompt (over .Question,
	// .Attempt, .Feedback).
	FeedbackTemplate, FeedbackAnswerTemplate, StaticFeedbackTemplate, RefineTemplate string
	RefineFeedbackTemplate                                                           string
	// Feedback is MLMT's feedback policy; nil is static feedback (the
	// baseline): StaticFeedbackTemplate is the feedback.
	Feedback *FeedbackPolicy
	// StopGradient (MLMT) is the stop-gradient variant: the solver's
	// refine turn gets no gradient (the solver trains on its first
	// attempts only) while the feedback policy learns from the refined
	// answer's reward.
	StopGradient bool
	// FreezeSolver (MLMT) trains the feedback policy alone in RL: the
	// solver, warmed up like the feedback policy, plays its turns but
	// takes no RL step (the recipe's algorithm.mlmt.train: [feedback]).
	FreezeSolver bool
	// BiLevel (MLMT with a feedback policy) is bi-level MLMT-RL: the
	// feedback learner's value V_L is the solver's baseline (bilevel.go).
	// Nil: off.
	BiLevel *BiLevel
	// EntropyControl adapts each trained policy's entropy coefficient
	// toward a target entropy (entropy.go); nil: Learner.Loss.EntropyCoef
	// is a fixed bonus.
	EntropyControl *EntropyControl
	// Archer trains the solver with ArCHer (archer.go): an utterance-level
	// critic in the driver gives every solver turn the advantage
	// Q(s, a) − V(s). Nil: off.
	Archer *Archer
	// ShapeRefine (MLMT) gives the refine turn SCoRe's shaped reward r2 +
	// ScoreAlpha·(r2 − r1) (RL-guided SCoRe) instead of r2.
	ShapeRefine bool
	// FeedbackReward (MLMT) is what the feedback turn is rewarded with:
	// FeedbackRewardFinal (also "": the refined answer's reward) or
	// FeedbackRewardImprovement (refined minus first).
	FeedbackReward string
	// SCoRe: ReviewTemplate is the self-correction instruction; the second
	// turn's prompt is the first prompt, the first answer, a newline, the
	// instruction (over .Question, .Attempt) and a newline. ScoreAlpha is
	// the reward shaping of the second turn, r2 + α(r2 − r1) (SCoRe's
	// stage II); ≥ 0.
	ReviewTemplate string
	ScoreAlpha     float64
	// ScoreStage1Steps > 0 runs SCoRe's stage I (score.go) for the first
	// that many RL steps (all of them when Steps is fewer): the second turn trains on r2 (no ScoreAlpha),
	// the first on the KL alone at ScoreStage1KLCoef (Learner.Loss.KLCoef,
	// > 0, is stage II's and the second turn's). 0: stage II only.
	ScoreStage1Steps  int
	ScoreStage1KLCoef float64
	// TextualAC (MLMT with a feedback policy) makes the feedback policy
	// a context generator (textual_ac.go): its template and the refine
	// template do not use .Attempt, so the solver's second answer sees
	// the problem and the context only, and the first answer is the one
	// without context; the generator's turn is rewarded by
	// rl.ContextRewards. The solver's engine must be in process (it
	// scores answers). Nil: off.
	TextualAC *rl.ContextRewardConfig
	// UpdateRatio [high, low] alternates MLMT's updates: of every
	// high + low RL steps the first high train the feedback policy only,
	// the rest the solver only. Zero: both every step.
	UpdateRatio [2]int
	// SharedWeights (MLMT with Feedback) plays the feedback role with
	// the solver's model: one learner, one engine, one set of weights,
	// the two roles told apart by their prompts. Feedback's model is
	// then unused, its algorithm and learning rate the solver's.
	SharedWeights bool
	// Tools: the solver's answer is one sequence in which each
	// <tool_call>{"name": ..., "arguments": ...}</tool_call> it ends a
	// segment with is answered by the tool's output in
	// ToolResponseTemplate (over .Output), up to MaxToolCalls calls (0:
	// 4); the output is masked out of the loss. Tools: with Calculator
	// the calculator, with PythonTool Python in the code verifier's
	// sandbox. The first prompt is PromptTemplate.
	ToolResponseTemplate   string
	MaxToolCalls           int
	Calculator, PythonTool bool
	// Agent: the policy acts in a built-in environment (agent.go).
	Agent *AgentConfig

	// SFT warm-up: WarmupSteps optimizer steps of plain SFT on
	// WarmupBatch generated problems each, at WarmupLR. 0 steps skips it.
	WarmupSteps, WarmupBatch int
	WarmupLR                 float64
	// RWGroupFilter: agent runs with rw_sft filter weights; a turn of an
	// episode at the threshold weighs n/k instead of 1, n the episodes of
	// its group and k those at the threshold (groupFilterWeights).
	RWGroupFilter bool
	// WarmupUntil, when set, ends the warm-up of an agent run before
	// WarmupSteps (agent_until.go).
	WarmupUntil *WarmupUntil
	// Traces, when set, makes the warm-up train on recorded model calls
	// instead, and with Traces.RL the RL steps too (traces.go).
	Traces *TraceData
	// WarmupTrajectories, when set, is the warm-up's data instead of
	// generated problems (the solver alone trains on it).
	WarmupTrajectories *WarmupTrajectories

	// RL: Steps steps of PromptsPerStep prompts × GroupSize samples.
	Steps, PromptsPerStep, GroupSize int
	// Sampling of the RL rollouts.
	Temperature float64
	TopP        float64 // 0: off
	MaxTokens   int     // response tokens at most

	// EvalEvery k steps (warm-up and RL; and after warm-up, and at the
	// last step), the
	// accuracy on EvalProblems distinct held-out problems (greedy, or
	// per EvalSampling) is logged as eval_accuracy. 0 turns evaluation off.
	EvalEvery, EvalProblems int
	// EvalSampling samples evaluations (n seeded answers per problem at
	// a temperature: mean accuracy, pass@k, maj@n; evalsample.go); the
	// zero value is greedy.
	EvalSampling EvalSampling
	// CheckpointEvery c steps of each phase (every c-th warm-up step and
	// every c-th RL step) a checkpoint is written to
	// Out/checkpoints/step-N/; the warm-up's last step and the run's last
	// are written either way. 0 writes only those.
	CheckpointEvery int

	// Resume is a checkpoint directory of an earlier run of this config
	// (Out/checkpoints/step-N): the learner loads it, the data cursor and
	// step continue from it, and metrics.jsonl is appended to.
	Resume string
	// ResumeVerified says the caller has just checked Resume against its
	// manifest (NewestIntact, as rlnode run --resume does), so the run
	// does not read every file of it once more before loading (minutes on
	// a large model). A checkpoint reloaded after a learner fails is
	// checked all the same.
	ResumeVerified bool

	// Node is the cluster to place the learner on; nil starts an embedded
	// single-node cluster for the run.
	Node *cluster.Node
	// EmbeddedMemory is the memory, in bytes, the embedded node offers
	// (Node nil): 0 the host's (cluster.DetectMemory). A run whose learner
	// ranks and rollout actors reserve more is refused before any model is
	// built.
	EmbeddedMemory int64
	// LearnerResources are what the learner actor holds (default 1 CPU);
	// with Learner.Shards > 1, what each rank holds.
	LearnerResources cluster.Resources
	// LearnerTimeout bounds every collective of a sharded learner
	// (Learner.Shards > 1; learner/shard.Options.Timeout): a lost rank
	// fails the step within it (default 60 s).
	LearnerTimeout time.Duration
	// EngineBatch is the native engine's decode batch (default 256).
	EngineBatch int
	// EngineDevice is where native engines keep their models (this
	// process's, the rollout actors', evaluation's): "" (cpu), or a
	// learner device value (cuda, cuda-bf16, with an index: cuda:1).
	EngineDevice string

	// Rollout, when set, generates the solver's samples (training and
	// evaluation) on rollout actors on the cluster (a rollout.Pool of
	// native engines) instead of the native engine in this process; each
	// learner step's weights reach them through a weightsync.Syncer
	// (weightsync.RolloutServer).
	// FeedbackRollout does the same for MLMT's feedback policy. The
	// actors get the policy's starting weights pushed when they register
	// (nothing is read from Out on their nodes). On an embedded cluster the node offers
	// as many CPUs as the learners and actors reserve (at least its cores):
	// they share the machine and take turns.
	Rollout, FeedbackRollout *Rollout
	// MaxStaleness k > 0 is asynchronous training (with Rollout, or VLLM
	// for single-turn episodes; MLMT with a feedback policy also with
	// FeedbackRollout): the samples of step t+1 — multi-turn: every turn
	// of its episodes — are generated while step t trains, on weights at
	// most k versions older than the step's on-policy version (older
	// results are refused). 0 is synchronous: generation waits for the
	// newest weights.
	MaxStaleness int
	// VLLM, when set, makes the solver generate on running vLLM servers
	// (vllm.go); FeedbackVLLM, MLMT's trainable feedback policy on
	// servers of its own (needs VLLM).
	VLLM, FeedbackVLLM *VLLM

	Logger *slog.Logger // default: discard
	// Progress, when set, is called after every step with its metrics.
	Progress func(Metrics)
	// Episodes, when set, is called after each RL step has trained with
	// that step and its trajectories (rlnode run records them as traces).
	// It must not modify turns, nor keep them past its return.
	Episodes func(step int, turns []data.Turn)
	// Stop, when closed, ends the run after the step in progress, which
	// is checkpointed first (Result.Stopped); nil never stops. Closed
	// before the first step begins (while the learners are placed, their
	// models built and the engines started), it ends the start at once:
	// Run returns an error wrapping context.Canceled. Cancelling Run's
	// context instead stops at once and keeps only the checkpoints
	// already written.
	Stop <-chan struct{}
	// OnWeights, when set, is called after each weight push with the
	// engine now serving version (from the driver's goroutine; the
	// engine must not be closed or given weights by the callee).
	OnWeights func(version int64, eng engine.Engine)

	// stepBegins, when set (by tests), is called as each step begins.
	stepBegins func(step int)
	// pulled, when set (by tests), is called as the parts of a checkpoint
	// staged by learner members that do not see the run folder arrive
	// (shard.GroupConfig.Pulled); pullChunk is the bytes asked for at once
	// (0: learner.FolderChunk).
	pulled    func(policy string, rank int, node string, f learner.FolderFile, got int64)
	pullChunk int64
	// finishBegins, when set (by tests), is called as each step's end
	// begins: the weight push, a probe, the evaluation, the checkpoint.
	finishBegins func(step int)
}

// Rollout places a policy's generation on rollout actors (see
// Config.Rollout).
type Rollout struct {
	// Replicas is the number of rollout actors (> 0).
	Replicas int
	// Resources is what each actor reserves (default 1 CPU).
	Resources cluster.Resources
	// Spread reserves the actors' resources up front in a placement group
	// that puts them on as many nodes as it can (placement mode split);
	// otherwise each actor is placed on its own where its resources fit.
	Spread bool
	// ChunkSize is the requests per generation job (0: each call split
	// evenly over the live actors); see rollout.PoolConfig.
	ChunkSize int
	// LossTimeout is how long an actor whose calls keep failing is
	// retried before its chunks move elsewhere (default the pool's).
	LossTimeout time.Duration
}

// Episode kinds.
const (
	EpisodeSingle = "single"
	EpisodeMLMT   = "mlmt"
	EpisodeSCoRe  = "score"
	EpisodeTools  = "tools"
	EpisodeAgent  = "agent"
)

// Feedback rewards of MLMT.
const (
	FeedbackRewardFinal       = "final"
	FeedbackRewardImprovement = "improvement"
)

// FeedbackPolicy is MLMT's trainable feedback policy: its own model
// (from scratch, seeded with Seed+1, or a checkpoint directory), its own
// learner actor and native engine. It trains with the solver's learner
// settings (algorithm, optimizer, loss), in the warm-up always and in RL
// when Train is set.
type FeedbackPolicy struct {
	Model    *model.Config
	ModelDir string
	Train    bool
	// LoRA trains the feedback policy's RL steps as adapters (lora.go);
	// the solver's is Learner.LoRA.
	LoRA *model.LoRAConfig
	// Algorithm and LR are the feedback policy's RL algorithm (a learner
	// name) and peak learning rate; empty and 0: the solver's
	// (Learner.Algorithm, Learner.LR). With PPO the feedback learner gets
	// a value head of its own; the other settings are Learner's.
	Algorithm string
	LR        float64
}

// BiLevel configures bi-level MLMT-RL (recipes.BiLevel). One reward R,
// the refined answer's, trains both levels: the solver's turns on
// advantage R − V_L, V_L the feedback learner's value of the episode
// before its step; the feedback policy on R + ValueCoef·V_L, its value
// head on ValueLossCoef·(V_L − R)².
type BiLevel struct {
	ValueCoef, ValueLossCoef float64
	// StopValueGradients keeps the value loss's gradient out of the
	// feedback model's trunk; TrainGuidance trains the feedback policy
	// (false: only its value).
	StopValueGradients, TrainGuidance bool
	// GuidanceKLCoef is the feedback policy's KL coefficient, to its
	// post-warm-up weights.
	GuidanceKLCoef float64
}

// learnerConfig is the feedback learner's configuration.
func (f *FeedbackPolicy) learnerConfig(c Config) learner.Config {
	l := c.Learner
	if b := c.BiLevel; b != nil {
		l.ValueBaseline = &learner.ValueBaseline{LossCoef: b.ValueLossCoef, Shaping: b.ValueCoef,
			StopTrunkGradient: b.StopValueGradients, ValueOnly: !b.TrainGuidance}
		l.Loss.KLCoef = b.GuidanceKLCoef
		if l.Loss.KL == "" {
			l.Loss.KL = rl.K3
		}
	}
	l.Model, l.ModelDir, l.Seed, l.LoRA = f.Model, f.ModelDir, c.Seed+1, f.LoRA
	if f.Algorithm != "" {
		l.Algorithm = f.Algorithm
	}
	if f.LR != 0 {
		l.LR = f.LR
		l.MinLR = min(l.MinLR, f.LR)
	}
	l.RefModelDir = "" // the solver's reference; the feedback policy's is its initial weights
	return l
}

func (c *Config) multiTurn() bool { return c.Episode == EpisodeMLMT || c.Episode == EpisodeSCoRe }

// TemplateData is what the templates see.
type TemplateData struct {
	Question, Answer string
	// Hint is the problem's hidden information (task.Problem.Hint): only
	// the feedback policy's templates may show it. AnyHint is a hint of the
	// same form that says nothing of this problem (task.AnyHint; for a
	// dataset, the hint of another training row): a warm-up target that
	// teaches a feedback policy the form of a hint, not its content.
	Hint, AnyHint string
	// Attempt is the solver's first answer; Feedback the feedback text.
	Attempt, Feedback string
	// Output is a tool's output (ToolResponseTemplate).
	Output string
}

// Quickstart is the tuned preset of the quickstart recipe: a 0.45 M
// parameter Qwen2-style model (hidden 128, 2 layers, the built-in 768-token
// vocabulary) trained from scratch on CPU on level-1 arithmetic ("What is
// 27 - 13?" → "\boxed{14}", operands 1..30, 1,365 questions, 30% held
// out): 300 SFT warm-up steps at lr 1e-3, then 1,200 GRPO steps with
// clip-higher (0.2/0.28), 32 prompts × 8 samples per step at temperature 1,
// lr 1e-4; greedy accuracy on 256 distinct held-out questions every 25
// steps. See the package doc for the measured curves.
func Quickstart(out string) Config {
	l := learner.DefaultConfig()
	l.Algorithm = learner.GRPO
	l.LR = 1e-4
	l.MicroBatchSeqs = 64
	l.MaxResponseLen = 8
	return Config{
		Out:  out,
		Seed: 1,
		Model: &model.Config{Architecture: model.Qwen2, HiddenSize: 128, IntermediateSize: 384, NumLayers: 2,
			NumHeads: 4, NumKVHeads: 2, HeadDim: 32, VocabSize: 768, MaxPositions: 64, RMSNormEps: 1e-6,
			RopeTheta: 10000, TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"},
		Learner:        l,
		Task:           task.Config{Seed: 1, Kinds: []string{task.Arithmetic}, Level: 1, HeldOutPercent: 30},
		PromptTemplate: "{{.Question}}\n",
		AnswerTemplate: `\boxed{ {{- .Answer -}} }`,
		WarmupSteps:    300, WarmupBatch: 64, WarmupLR: 1e-3,
		Steps: 1200, PromptsPerStep: 32, GroupSize: 8,
		Temperature: 1, MaxTokens: 8,
		EvalEvery: 25, EvalProblems: 256,
		CheckpointEvery: 100,
	}
}

// compiled are a Config's parsed templates.
type compiled struct {
	prompt, answer                                   *template.Template
	feedback, feedbackAnswer, staticFeedback, refine *template.Template
	refineFeedback                                   *template.Template
	review, toolResponse                             *template.Template
	agent                                            *template.Template
}

func (c *Config) validate() (*compiled, error) {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("train config: %s %v: %s", field, v, want)
	}
	switch {
	case c.Out == "":
		return nil, fmt.Errorf("train config: out: empty run directory")
	case (c.Model == nil) == (c.ModelDir == ""):
		return nil, fmt.Errorf("train config: set exactly one of model and model_dir")
	case c.WarmupSteps < 0:
		return nil, bad("warmup_steps", c.WarmupSteps, "want ≥ 0")
	case c.WarmupSteps > 0 && c.WarmupBatch <= 0:
		return nil, bad("warmup_batch", c.WarmupBatch, "want > 0")
	case c.WarmupSteps > 0 && !(c.WarmupLR > 0):
		return nil, bad("warmup_lr", c.WarmupLR, "want > 0")
	case c.RWGroupFilter && (c.Episode != EpisodeAgent || c.Learner.Algorithm != learner.RWSFT || !c.Learner.RWFilter):
		return nil, fmt.Errorf("train config: rw_group_filter: needs agent episodes and rw_sft with filter weights (episode %q, algorithm %s)", c.Episode, c.Learner.Algorithm)
	case c.WarmupUntil != nil && c.WarmupUntil.check(c) != nil:
		return nil, c.WarmupUntil.check(c)
	case c.WarmupTrajectories != nil && c.WarmupTrajectories.check() != nil:
		return nil, c.WarmupTrajectories.check()
	case c.Traces != nil && c.Traces.check() != nil:
		return nil, c.Traces.check()
	case c.Traces != nil && c.Traces.RL && !slices.Contains([]string{learner.GRPO, learner.DrGRPO, learner.RLOO}, c.Learner.Algorithm):
		return nil, bad("learner.algorithm", c.Learner.Algorithm, "offline RL on traces takes grpo, drgrpo or rloo")
	case c.Traces != nil && !c.Traces.RL && c.WarmupSteps == 0:
		return nil, bad("traces", c.Traces.Store, "set, but warmup_steps is 0 and RL is off")
	case c.WarmupTrajectories != nil && c.WarmupSteps == 0:
		return nil, bad("warmup_trajectories", c.WarmupTrajectories.Path, "set, but warmup_steps is 0")
	case c.Steps < 0:
		return nil, bad("steps", c.Steps, "want ≥ 0")
	case c.PromptsPerStep <= 0:
		return nil, bad("prompts_per_step", c.PromptsPerStep, "want > 0")
	case c.GroupSize <= 0:
		return nil, bad("group_size", c.GroupSize, "want > 0")
	case !(c.Temperature >= 0):
		return nil, bad("temperature", c.Temperature, "want ≥ 0")
	case !(c.TopP >= 0 && c.TopP <= 1):
		return nil, bad("top_p", c.TopP, "want [0, 1]")
	case c.MaxTokens <= 0:
		return nil, bad("max_tokens", c.MaxTokens, "want > 0")
	case c.EvalEvery < 0:
		return nil, bad("eval_every", c.EvalEvery, "want ≥ 0")
	case c.EvalEvery > 0 && c.EvalProblems <= 0:
		return nil, bad("eval_problems", c.EvalProblems, "want > 0")
	case c.CheckpointEvery < 0:
		return nil, bad("checkpoint_every", c.CheckpointEvery, "want ≥ 0")
	case c.LearnerTimeout < 0:
		return nil, bad("learner_timeout", c.LearnerTimeout, "want ≥ 0 (0: 60s)")
	case c.EngineBatch < 0:
		return nil, bad("engine_batch", c.EngineBatch, "want ≥ 0 (0: 256)")
	case c.MaxStaleness < 0:
		return nil, bad("max_staleness", c.MaxStaleness, "want ≥ 0")
	case c.MaxStaleness > 0 && c.Rollout == nil && c.VLLM == nil:
		return nil, bad("max_staleness", c.MaxStaleness, "asynchronous generation runs on rollout actors or vLLM servers: set rollout or vllm")
	case c.MaxStaleness > 0 && c.VLLM != nil && c.multiTurn():
		return nil, bad("max_staleness", c.MaxStaleness, "asynchronous training on vLLM servers is for single-turn episodes (episode is "+c.Episode+")")
	case c.MaxStaleness > 0 && c.Feedback != nil && c.FeedbackRollout == nil:
		return nil, bad("max_staleness", c.MaxStaleness, "asynchronous MLMT generates the feedback turn on rollout actors too: set feedback_rollout")
	case c.VerifyWorkers < 0:
		return nil, bad("verify_workers", c.VerifyWorkers, "want ≥ 0 (0: default)")
	case c.VerifyWorkers > 0 && c.sandboxConcurrency() > 0 && (c.Verifier == VerifierCode || c.PythonTool):
		// The driver's sandboxes run this many programs at once.
		if most, why := verify.MaxConcurrency(verify.DefaultLimits()); c.VerifyWorkers > most {
			return nil, bad("verify_workers", c.VerifyWorkers, fmt.Sprintf("at most %d programs at once on this host (%s); or verify_on: cluster", most, why))
		}
	case c.Verifier != "" && c.Verifier != VerifierMath && c.Verifier != VerifierGSM8K && c.Verifier != VerifierCode:
		return nil, bad("verifier", c.Verifier, "want math, gsm8k or code")
	case c.VerifyOn != "" && c.VerifyOn != VerifyOnDriver && c.VerifyOn != VerifyOnCluster:
		return nil, bad("verify_on", c.VerifyOn, "want driver or cluster")
	case c.VerifyOn == VerifyOnCluster && c.Verifier != VerifierCode:
		return nil, bad("verify_on", c.VerifyOn, "cluster is for the code verifier: checking a math answer takes microseconds, less than a task's round trip")
	case c.Dataset != nil && c.Dataset.Train == "":
		return nil, fmt.Errorf("train config: dataset.train: empty")
	case c.Verifier == VerifierCode && c.Dataset == nil:
		return nil, bad("verifier", c.Verifier, "code problems come from a dataset (the task has math answers)")
	case c.FeedbackRollout != nil && c.Feedback == nil:
		return nil, fmt.Errorf("train config: feedback_rollout: set, but the run has no feedback policy")
	}
	if err := c.EvalSampling.validate(); err != nil {
		return nil, err
	}
	if c.VLLM != nil || c.FeedbackVLLM != nil {
		if err := c.validateVLLM(); err != nil {
			return nil, err
		}
	}
	for _, ro := range []struct {
		field string
		r     *Rollout
	}{{"rollout", c.Rollout}, {"feedback_rollout", c.FeedbackRollout}} {
		switch {
		case ro.r == nil:
		case ro.r.Replicas <= 0:
			return nil, bad(ro.field+".replicas", ro.r.Replicas, "want > 0")
		case ro.r.ChunkSize < 0:
			return nil, bad(ro.field+".chunk_size", ro.r.ChunkSize, "want ≥ 0")
		case ro.r.LossTimeout < 0:
			return nil, bad(ro.field+".loss_timeout", ro.r.LossTimeout, "want ≥ 0")
		}
	}
	var t compiled
	var err error
	if t.prompt, err = parseTemplate("prompt_template", c.PromptTemplate, "Question"); err != nil {
		return nil, err
	}
	if strings.Contains(c.PromptTemplate, ".Hint") {
		return nil, fmt.Errorf("train config: prompt_template %q: uses .Hint, which only the feedback policy may see", c.PromptTemplate)
	}
	if t.answer, err = parseTemplate("answer_template", c.AnswerTemplate, "Answer"); err != nil {
		return nil, err
	}
	switch c.Episode {
	case "", EpisodeSingle:
	case EpisodeMLMT:
		if err := c.validateMLMT(&t); err != nil {
			return nil, err
		}
	case EpisodeSCoRe:
		switch {
		case c.Feedback != nil:
			return nil, fmt.Errorf("train config: feedback: a feedback policy needs episode mlmt (episode is score)")
		case !(c.ScoreAlpha >= 0):
			return nil, bad("score_alpha", c.ScoreAlpha, "want ≥ 0")
		}
		if err := c.validateScoreStages(); err != nil {
			return nil, err
		}
		if t.review, err = parseTemplate("review_template", c.ReviewTemplate, ""); err != nil {
			return nil, err
		}
	case EpisodeTools:
		if c.MaxToolCalls < 0 {
			return nil, bad("max_tool_calls", c.MaxToolCalls, "want ≥ 0 (0: 4)")
		}
		if t.toolResponse, err = parseTemplate("tool_response_template", c.ToolResponseTemplate, "Output"); err != nil {
			return nil, err
		}
		if !c.Calculator && !c.PythonTool {
			return nil, fmt.Errorf("train config: calculator, python_tool: episode tools offers no tool: set one or both")
		}
	case EpisodeAgent:
		if t.agent, err = c.Agent.validate(); err != nil {
			return nil, err
		}
	default:
		return nil, bad("episode", c.Episode, "want single, mlmt, score, tools or agent")
	}
	if c.Episode != EpisodeAgent && c.Agent != nil {
		return nil, fmt.Errorf("train config: agent: for episode agent (episode is %q)", c.Episode)
	}
	if c.Episode != EpisodeTools && (c.ToolResponseTemplate != "" || c.MaxToolCalls != 0 || c.Calculator || c.PythonTool) {
		return nil, fmt.Errorf("train config: tool_response_template, max_tool_calls, calculator and python_tool are for episode tools (episode is %q)", c.Episode)
	}
	if !c.multiTurn() && (c.Feedback != nil || c.StopGradient || c.FeedbackReward != "") {
		return nil, fmt.Errorf("train config: feedback, stop_gradient and feedback_reward are for episode mlmt (episode is %q)", c.Episode)
	}
	if c.ShapeRefine && (c.Episode != EpisodeMLMT || !(c.ScoreAlpha >= 0)) {
		return nil, fmt.Errorf("train config: shape_refine: for episode mlmt with score_alpha ≥ 0 (episode %q, score_alpha %v)", c.Episode, c.ScoreAlpha)
	}
	if stage1 := c.ScoreStage1Steps != 0 || c.ScoreStage1KLCoef != 0; stage1 && c.Episode != EpisodeSCoRe && !(c.Episode == EpisodeMLMT && c.ShapeRefine) {
		return nil, fmt.Errorf("train config: score_stage1_steps, score_stage1_kl_coef: for episode score, or mlmt with shape_refine (RL-guided SCoRe) (episode is %q)", c.Episode)
	} else if stage1 && (c.SharedWeights || c.StopGradient || c.FreezeSolver) {
		return nil, fmt.Errorf("train config: score_stage1_steps: stage I trains both solver attempts of one model of its own (shared_weights, stop_gradient and freeze_solver are off)")
	}
	if c.FreezeSolver && c.Episode != EpisodeMLMT {
		return nil, fmt.Errorf("train config: freeze_solver: for episode mlmt (episode is %q)", c.Episode)
	}
	if b := c.BiLevel; b != nil {
		switch {
		case c.Episode != EpisodeMLMT || c.Feedback == nil:
			return nil, fmt.Errorf("train config: bi_level: needs episode mlmt with a feedback policy (the value V_L is on its head)")
		case !c.Feedback.Train:
			return nil, fmt.Errorf("train config: bi_level: the feedback learner trains the value every step: set feedback.train (TrainGuidance false keeps its policy fixed)")
		case c.ShapeRefine:
			return nil, fmt.Errorf("train config: bi_level: both levels train on the final reward (shape_refine is set)")
		case c.FeedbackReward == FeedbackRewardImprovement:
			return nil, fmt.Errorf("train config: bi_level: both levels train on the final reward (feedback_reward is %q)", c.FeedbackReward)
		}
	}
	if a := c.Archer; a != nil {
		if err := a.validate(c); err != nil {
			return nil, err
		}
	}
	if err := c.validateHierarchy(); err != nil {
		return nil, err
	}
	if err := c.validateEntropyControl(); err != nil {
		return nil, err
	}
	l := c.Learner
	l.Model, l.ModelDir, l.Seed = c.Model, c.ModelDir, c.Seed
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("train config: %w", err)
	}
	if f := c.Feedback; f != nil {
		if err := f.learnerConfig(*c).Validate(); err != nil {
			return nil, fmt.Errorf("train config: feedback: %w", err)
		}
	}
	return &t, nil
}

func (c *Config) validateMLMT(t *compiled) error {
	var err error
	switch f := c.Feedback; {
	case f != nil && (f.Model == nil) == (f.ModelDir == ""):
		return fmt.Errorf("train config: feedback: set exactly one of model and model_dir")
	case f != nil && f.LR < 0:
		return fmt.Errorf("train config: feedback.lr %g: want > 0, or 0 for the solver's", f.LR)
	case f == nil && c.StopGradient:
		return fmt.Errorf("train config: stop_gradient: the stop-gradient variant trains a feedback policy; static feedback has none")
	case f != nil && c.StopGradient && !f.Train:
		return fmt.Errorf("train config: stop_gradient: the stop-gradient variant trains the feedback policy; set feedback.train")
	case c.FreezeSolver && (f == nil || !f.Train):
		return fmt.Errorf("train config: freeze_solver: with the solver frozen the feedback policy must train (set feedback with train)")
	case c.FreezeSolver && c.StopGradient:
		return fmt.Errorf("train config: freeze_solver: the stop-gradient variant trains the solver's first turn; a frozen solver trains neither")
	}
	switch c.FeedbackReward {
	case "", FeedbackRewardFinal, FeedbackRewardImprovement:
	default:
		return fmt.Errorf("train config: feedback_reward %q: want final or improvement", c.FeedbackReward)
	}
	if t.refine, err = parseTemplate("refine_template", c.RefineTemplate, "Feedback"); err != nil {
		return err
	}
	if strings.Contains(c.RefineTemplate, ".Hint") {
		return fmt.Errorf("train config: refine_template %q: uses .Hint, which only the feedback policy may see", c.RefineTemplate)
	}
	// .AnyHint is a warm-up target's field: the episodes' turns render
	// no such value.
	for _, f := range []struct{ name, text string }{{"feedback_template", c.FeedbackTemplate}, {"refine_template", c.RefineTemplate}, {"static_feedback_template", c.StaticFeedbackTemplate}} {
		if strings.Contains(f.text, ".AnyHint") {
			return fmt.Errorf("train config: %s %q: uses .AnyHint, which only the warm-up's targets (feedback_answer_template, refine_feedback_template) render", f.name, f.text)
		}
	}
	if c.Feedback == nil {
		if t.staticFeedback, err = parseTemplate("static_feedback_template", c.StaticFeedbackTemplate, ""); err != nil {
			return err
		}
		if strings.Contains(c.StaticFeedbackTemplate, ".Hint") {
			return fmt.Errorf("train config: static_feedback_template %q: uses .Hint: static feedback is the baseline without the hidden information", c.StaticFeedbackTemplate)
		}
		return nil
	}
	needs := "Attempt"
	if c.TextualAC != nil {
		needs = ""
		for _, f := range []struct{ name, text string }{{"feedback_template", c.FeedbackTemplate}, {"refine_template", c.RefineTemplate}, {"static_feedback_template", c.StaticFeedbackTemplate}} {
			if strings.Contains(f.text, ".Attempt") {
				return fmt.Errorf("train config: %s %q: uses .Attempt, but textual_ac writes the context before the answer it serves", f.name, f.text)
			}
		}
	}
	if t.feedback, err = parseTemplate("feedback_template", c.FeedbackTemplate, needs); err != nil {
		return err
	}
	if c.WarmupSteps > 0 || strings.TrimSpace(c.FeedbackAnswerTemplate) != "" {
		if t.feedbackAnswer, err = parseTemplate("feedback_answer_template", c.FeedbackAnswerTemplate, ""); err != nil {
			return err
		}
		t.refineFeedback = t.feedbackAnswer
	}
	if strings.TrimSpace(c.RefineFeedbackTemplate) != "" {
		if t.refineFeedback, err = parseTemplate("refine_feedback_template", c.RefineFeedbackTemplate, ""); err != nil {
			return err
		}
	}
	// The static text is also evaluated beside the trained feedback
	// (turn3_accuracy_static) when given.
	if strings.TrimSpace(c.StaticFeedbackTemplate) != "" {
		if t.staticFeedback, err = parseTemplate("static_feedback_template", c.StaticFeedbackTemplate, ""); err != nil {
			return err
		}
	}
	return nil
}

func parseTemplate(field, text, needs string) (*template.Template, error) {
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("train config: %s: empty", field)
	}
	if needs != "" && !strings.Contains(text, "."+needs) {
		return nil, fmt.Errorf("train config: %s %q: must use .%s", field, text, needs)
	}
	t, err := tmpl.Parse(field, text, "Question", "Answer", "Hint", "AnyHint", "Attempt", "Feedback", "Output")
	if err != nil {
		return nil, fmt.Errorf("train config: %s: %w", field, err)
	}
	if _, err := tmpl.Execute(t, TemplateData{Question: "q", Answer: "a", Hint: "h", AnyHint: "h", Attempt: "t", Feedback: "f", Output: "o"}, tmpl.MaxOutput); err != nil {
		return nil, fmt.Errorf("train config: %s: %w", field, err)
	}
	return t, nil
}

// render renders a template checked at validation (parseTemplate: it
// cannot fail on TemplateData, and runs in time bounded by its size). Its
// output stops at tmpl.MaxOutput, far past any model's context.
func render(t *template.Template, d TemplateData) string {
	s, _ := tmpl.Execute(t, d, tmpl.MaxOutput)
	return s
}

// MLMTMath is the tuned preset of the mlmt_math recipe: MLMT three-turn
// on the pick task (rollout/task: "Pick: 17 42 8", level 2, three
// candidates; the hint "2nd" is shown to the feedback policy only), a
// solver and a trainable feedback policy of the quickstart's architecture
// trained from scratch on CPU. The SFT warm-up teaches the solver the
// \boxed{} answer after both of its prompts, its refine prompt showing
// feedback that names the hinted position ("take the 2nd"), and the
// feedback policy the form of its feedback ("take the" and any position,
// .AnyHint): what to say is left to GRPO, which then trains both on the
// refined answer's reward (the feedback policy at lr 5e-4, an entropy
// bonus of 0.01 on both). docs/learning.md has the measured runs.
func MLMTMath(out string) Config {
	c := Quickstart(out)
	c.Episode = EpisodeMLMT
	c.Task = task.Config{Seed: 1, Kinds: []string{task.Pick}, Level: 2, HeldOutPercent: 30}
	c.PromptTemplate = "{{.Question}}\n"
	c.FeedbackTemplate = "{{.Question}}\nhint: {{.Hint}}\ntry: {{.Attempt}}\nfeedback:"
	c.FeedbackAnswerTemplate = " take the {{.AnyHint}}"
	c.RefineFeedbackTemplate = " take the {{.Hint}}"
	c.StaticFeedbackTemplate = " check your answer"
	c.RefineTemplate = "{{.Question}}\ntry: {{.Attempt}}\nfeedback:{{.Feedback}}\n"
	m := *c.Model
	m.MaxPositions = 128
	c.Model = &m
	fm := m
	// The feedback policy must find by sampling that naming the hinted
	// position pays: with no entropy bonus it did within 200 steps in one
	// seed of three at lr 1e-4, and in two at 5e-4, the third's entropy
	// collapsing before it found it (docs/learning.md).
	c.Feedback = &FeedbackPolicy{Model: &fm, Train: true, LR: 5e-4}
	c.Learner.Loss.EntropyCoef = 0.01
	c.FeedbackReward = FeedbackRewardFinal
	c.WarmupSteps, c.WarmupBatch = 300, 32
	c.Steps, c.PromptsPerStep, c.GroupSize = 200, 16, 8
	c.EvalEvery, c.EvalProblems, c.CheckpointEvery = 25, 256, 100
	return c
}

// SCoReMath is the preset of the score_math recipe: SCoRe two-turn
// self-correction on the quickstart's level-1 arithmetic with the
// quickstart's model: the SFT warm-up teaches the \boxed{} answer after
// the first prompt and after the review prompt (first prompt, sampled
// first answer, instruction); GRPO then trains both turns, the second on
// r2 + α(r2 − r1) with α = 1.
func SCoReMath(out string) Config {
	c := Quickstart(out)
	c.Episode = EpisodeSCoRe
	c.ReviewTemplate = "check and answer again"
	c.ScoreAlpha = 1
	m := *c.Model
	m.MaxPositions = 128
	c.Model = &m
	c.WarmupSteps, c.WarmupBatch = 300, 64
	c.Steps, c.PromptsPerStep, c.GroupSize = 400, 16, 8
	c.EvalEvery, c.EvalProblems, c.CheckpointEvery = 25, 256, 100
	return c
}
