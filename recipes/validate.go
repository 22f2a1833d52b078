package recipes

import (
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/rlnode/rlnode/internal/bytesize"
	"github.com/rlnode/rlnode/internal/tmpl"
)

// The names data.traces may use.
var (
	TracesTrain       = []string{"warmup", "rl"}           // data.traces.train
	OfflineAlgorithms = []string{"grpo", "drgrpo", "rloo"} // what train rl trains with
)

// The names a recipe may use.
var (
	EngineKinds       = []string{"native", "vllm"}
	WeightSyncs       = []string{"full", "lora", "reload"}
	VLLMWeightUpdates = []string{"auto", "disk", "reload_weights"}
	Verifiers         = []string{"math", "gsm8k", "code"}
	EpisodeTypes      = []string{"single", "mlmt", "score", "tools", "agent"}
	Tools             = []string{"calculator", "python"}
	Algorithms        = []string{"grpo", "ppo", "rloo", "reinforce_pp", "drgrpo", "rw_sft", "archer"}
	Schedules         = []string{"constant", "cosine"}
	Weightings        = []string{"exp", "filter", "group_filter"}
	SFTWeightings     = []string{"none", "exp", "filter"}
	LoRAPresets       = []string{"qv"}
	MLMTPolicies      = []string{"solver", "feedback"}
	FeedbackReward    = []string{"final", "improvement"}
	PlacementModes    = []string{"colocated", "split"}
	SyncModes         = []string{"sync", "async"}
	Architectures     = []string{"qwen2", "llama"}
	LoRATargets       = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
	// Metrics every episode type has; TurnMetrics need mlmt or score
	// (turn2_accuracy score, turn3_accuracy mlmt: the final turn);
	// FeedbackMetrics need mlmt with a feedback policy (turn-3 accuracy
	// with the static feedback text in its place, on the same problems:
	// the MLMT-RL comparison).
	Metrics         = []string{"accuracy", "reward_mean", "response_length"}
	TurnMetrics     = []string{"turn1_accuracy", "turn2_accuracy", "turn3_accuracy", "delta", "incorrect_to_correct", "correct_to_incorrect"}
	FeedbackMetrics = []string{"turn3_accuracy_static"}
)

// Agent episodes' names.
var (
	// Envs are rollout/env's BuiltinNames: the built-in environments of agent
	// episodes.
	Envs = []string{"equations", "calculator", "multiply", "guess"}
	// AgentReturns are what an agent episode's steps are credited with.
	AgentReturns = []string{"episode", "discounted"}
)

// LearnerDevices are placement.learner_device's values.
var LearnerDevices = []string{"cpu", "cuda", "cuda-bf16"}

// Names that the learner and rollout packages define, repeated here so
// that recipes imports neither; train's tests check that they agree.
var (
	// TaskKinds are rollout/task's Kinds: a task's default mix.
	TaskKinds = []string{"arithmetic", "word", "linear", "sequence", "fraction", "remainder"}
	// HiddenTaskKinds are rollout/task's HiddenKinds, asked for by name only.
	HiddenTaskKinds = []string{"pick"}
	// KLEstimators are learner/rl's KL estimators.
	KLEstimators = []string{"k1", "k2", "k3"}
	// Aggregations are learner/rl's loss aggregations.
	Aggregations = []string{"token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"}
)

const (
	// MaxTaskLevel is rollout/task's MaxLevel.
	MaxTaskLevel = 5
	// MinBuiltinVocab is learner/tokenizer's BuiltinMinVocabSize: the
	// smallest vocabulary the built-in tokenizer fills.
	MinBuiltinVocab = 278
	// MaxInitParams bounds a randomly initialized model (models.*.init):
	// a model trained from scratch with the built-in tokenizer is small,
	// and a mistyped or hostile size (layers: 2000000) must be refused
	// here, not exhaust the host's memory when the learner builds it.
	MaxInitParams = 10_000_000_000
	// MaxVerifyWorkers bounds data.verify_workers on any host: each is a
	// verification in flight (a sandboxed program, or a task on the
	// cluster); a run also holds code verified in the driver to the host's
	// bound (rollout/verify's MaxConcurrency).
	MaxVerifyWorkers = 4096
)

// algorithmAliases are the learner's spellings of algorithm names.
var algorithmAliases = map[string]string{"dr_grpo": "drgrpo", "reinforce++": "reinforce_pp"}

// resolve fills the defaults that depend on other fields and makes paths
// absolute. isSet tells whether the file or an override gave a path.
// Relative paths from the file are relative to dir, those from --set to
// the working directory (fromSet tells which).
// modelPath is where a model path as written (raw) and made absolute
// (local) points: local when it exists, else a hub id's snapshot in the
// local Hugging Face cache, else raw left as written for validate to
// report (a hub id) or local (a missing folder).
func modelPath(raw, local string) string {
	if _, err := os.Stat(local); err == nil || filepath.IsAbs(raw) || !IsHubID(raw) {
		return local
	}
	if snap, err := HubSnapshot(raw); err == nil {
		return snap
	}
	return raw
}

func (r *Recipe) resolve(dir, setsDir string, isSet, fromSet func(string) bool, relative func(path, written, resolved string)) {
	abs := func(path, p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		a := p
		switch {
		case dir != "" && !fromSet(path):
			a = filepath.Join(dir, p)
		case setsDir != "" && fromSet(path):
			a = filepath.Join(setsDir, p)
		default:
			if cwd, err := filepath.Abs(p); err == nil {
				a = cwd
			}
		}
		relative(path, p, a)
		return a
	}
	for _, m := range []struct {
		path string
		m    *Model
	}{{"models.policy", &r.Models.Policy}, {"models.feedback", r.Models.Feedback}, {"models.reference", r.Models.Reference}} {
		if m.m == nil {
			continue
		}
		m.m.Path = modelPath(m.m.Path, abs(m.path+".path", m.m.Path))
		if m.m.Init != nil && m.m.Init.KVHeads == 0 {
			m.m.Init.KVHeads = m.m.Init.Heads
		}
	}
	if ds := r.Data.Dataset; ds != nil {
		ds.Train, ds.Eval = abs("data.dataset.train", ds.Train), abs("data.dataset.eval", ds.Eval)
		if r.Data.Verifier == "code" && !isSet("data.dataset.columns.answer") {
			ds.Columns.Answer = "" // code problems are scored by tests
		}
	}
	for _, m := range []struct {
		path string
		m    *Model
	}{{"models.policy", &r.Models.Policy}, {"models.feedback", r.Models.Feedback}} {
		if m.m == nil || m.m.LoRA == nil || m.m.LoRA.Preset != "qv" {
			continue
		}
		l, p := m.m.LoRA, m.path+".lora."
		if !isSet(p + "dropout") {
			l.Dropout = 0.1
		}
		if !isSet(p + "targets") {
			l.Targets = []string{"q_proj", "v_proj"}
		}
	}
	r.SFT.Trajectories = abs("sft.trajectories", r.SFT.Trajectories)
	supplied := r.SFT.Trajectories != "" || r.SFT.Collect != nil
	if supplied && r.SFT.Weighting == "" {
		r.SFT.Weighting = "none"
	}
	if (supplied || r.Data.Traces != nil) && r.SFT.Weighting == "exp" && !isSet("sft.beta") {
		r.SFT.Beta = 1
	}
	if t := r.Data.Task; t != nil {
		if t.Seed == 0 {
			t.Seed = r.Seed
		}
		if t.Kinds == nil {
			t.Kinds = slices.Clone(TaskKinds)
		}
	}
	a := &r.Algorithm
	if n, ok := algorithmAliases[a.Name]; ok {
		a.Name = n
	}
	if a.Aggregation == "" {
		a.Aggregation = "token-mean"
		if a.Name == "drgrpo" {
			a.Aggregation = "seq-mean-token-sum-norm"
		}
	}
	if a.EntropyTarget != nil {
		if a.EntropyCoefStep == nil {
			v := DefaultEntropyCoefStep
			a.EntropyCoefStep = &v
		}
		if a.EntropyCoefMax == nil {
			v := DefaultEntropyCoefMax
			a.EntropyCoefMax = &v
		}
	}
	mlmt := r.Episode.Type == "mlmt"
	if m := &a.MLMT; mlmt && !m.StaticFeedback {
		if n, ok := algorithmAliases[m.FeedbackAlgorithm]; ok {
			m.FeedbackAlgorithm = n
		}
		if m.FeedbackAlgorithm == "" {
			m.FeedbackAlgorithm = a.Name
		}
		if m.FeedbackLR == 0 {
			m.FeedbackLR = a.LR
		}
	}
	if mlmt && a.MLMT.Train == nil {
		a.MLMT.Train = []string{"solver", "feedback"}
		if a.MLMT.StaticFeedback {
			a.MLMT.Train = []string{"solver"}
		}
	}
	if mlmt && !a.MLMT.StaticFeedback && !a.MLMT.SharedWeights && r.Engines.Feedback == nil {
		e := r.Engines.Policy
		e.VLLM = nil
		if p := r.Engines.Policy.VLLM; p != nil {
			v := *p
			v.Servers = slices.Clone(p.Servers)
			if p.Launch != nil {
				l := *p.Launch // servers of its own, launched alike
				l.Args = slices.Clone(p.Launch.Args)
				v.Launch = &l
			}
			e.VLLM = &v
		}
		r.Engines.Feedback = &e
	}
	if e := r.Engines.Feedback; e != nil && e.Device == "" && e.Kind != "vllm" {
		e.Device = r.Engines.Policy.Device // one device for both engines
	}
	fb := r.Models.Feedback
	if fb == nil {
		fb = &r.Models.Policy
	}
	resolveSync := func(e *Engine, m *Model) {
		if e != nil && e.WeightSync == "" {
			e.WeightSync = "full"
			if m.LoRA != nil {
				e.WeightSync = "lora"
			}
		}
	}
	resolveSync(&r.Engines.Policy, &r.Models.Policy)
	resolveSync(r.Engines.Feedback, fb)
	r.Episode.Templates = r.Episode.Templates.WithDefaults()
	if r.Episode.Type == "tools" && r.Episode.Tools == nil {
		r.Episode.Tools = []string{"calculator"}
	}
	if r.Eval.Metrics == nil {
		r.Eval.Metrics = []string{"accuracy", "reward_mean"}
		if mlmt || r.Episode.Type == "score" {
			r.Eval.Metrics = append(r.Eval.Metrics, turnMetricsOf(r.Episode.Type)...)
		}
		if mlmt && !a.MLMT.StaticFeedback {
			r.Eval.Metrics = append(r.Eval.Metrics, FeedbackMetrics...)
		}
	}
	if r.Sync.Mode == "async" && !isSet("sync.max_staleness") {
		r.Sync.MaxStaleness = 1
	}
}

type checker struct{ probs []Problem }

func (c *checker) add(path, format string, args ...any) {
	c.probs = append(c.probs, Problem{path, fmt.Sprintf(format, args...)})
}

func (c *checker) oneOf(path, v string, allowed []string) bool {
	if slices.Contains(allowed, v) {
		return true
	}
	c.add(path, "%q: want one of %s", v, strings.Join(allowed, ", "))
	return false
}

func (c *checker) positive(path string, v int) {
	if v <= 0 {
		c.add(path, "%d: want a positive integer", v)
	}
}

// Upper bounds on what one step holds. Far above the runs we know of (a
// few thousand samples a step), they keep a typo or a hostile recipe
// (group_size: 100000000) from allocating without bound, which ended a
// run with the Go runtime's out-of-memory crash before its first RL step.
const (
	MaxGroupSize      = 1024
	MaxBatchPrompts   = 65536
	MaxSamplesPerStep = 1 << 18 // batch_prompts × group_size
	MaxSFTBatch       = 65536
	MaxReplicas       = 1024
	MaxHeldOut        = 1_000_000
	// MaxEvalSamples bounds eval.samples and MaxEvalAnswers held_out ×
	// samples, the episodes of one evaluation: samples 1000000000 ended
	// the run with the Go runtime's out-of-memory crash.
	MaxEvalSamples = 1024
	MaxEvalAnswers = 1 << 22
	// MaxEpochs bounds algorithm.epochs (PPO takes 1 to 10 passes over a
	// batch) and MaxOptimizerSteps epochs × mini_batches, the optimizer
	// steps of one RL step: epochs: 1000000000 made a step that never
	// ended.
	MaxEpochs         = 100
	MaxOptimizerSteps = 4096
	// MaxLoRARank bounds models.*.lora.rank whatever the model; a rank
	// above a targeted matrix's smaller dimension is refused too, here
	// for models.*.init and where a checkpoint's config.json is read.
	MaxLoRARank = 65536
)

// atMost reports v above hi, naming what the bound is on.
func (c *checker) atMost(path string, v, hi int, what string) {
	if v > hi {
		c.add(path, "%d: at most %d %s", v, hi, what)
	}
}

func (c *checker) nonNegative(path string, v int) {
	if v < 0 {
		c.add(path, "%d: must not be negative", v)
	}
}

func (c *checker) nonNegativeF(path string, v float64) {
	if v < 0 {
		c.add(path, "%v: must not be negative", v)
	}
}

func (c *checker) unit(path string, v float64) {
	if v < 0 || v > 1 {
		c.add(path, "%v: want a value in [0, 1]", v)
	}
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validate reports every impossible value and contradiction of a resolved
// recipe, each under the path it concerns. What needs the learner's or
// rollout's own packages (parsing the model config, building the task,
// compiling the templates) and what the training loop cannot run yet is
// train's Check.
func (r *Recipe) validate(isSet func(string) bool) []Problem {
	c := &checker{}
	// The run's folder is runs/NAME-DATE: a name must not leave it.
	if n := r.Name; n == "." || n == ".." || strings.ContainsAny(n, "/\\\x00") {
		c.add("name", "%q: want a single path segment (no / or \\, not . or ..)", n)
	}
	a := &r.Algorithm
	epType := r.Episode.Type
	mlmt := epType == "mlmt"
	c.oneOf("episode.type", epType, EpisodeTypes)
	algoOK := c.oneOf("algorithm.name", a.Name, Algorithms)

	// models
	c.model("models.policy", &r.Models.Policy)
	if r.Models.Feedback != nil {
		c.model("models.feedback", r.Models.Feedback)
		switch {
		case !mlmt:
			c.add("models.feedback", "a feedback policy needs episode.type mlmt (episode.type is %q)", epType)
		case a.MLMT.StaticFeedback:
			c.add("models.feedback", "set, but algorithm.mlmt.static_feedback is true: remove one (--set models.feedback=null)")
		}
	}
	if r.Models.Reference != nil {
		c.model("models.reference", r.Models.Reference)
		if r.Models.Reference.LoRA != nil {
			c.add("models.reference.lora", "the reference model is frozen; LoRA adapters on it train nothing")
		}
		if a.KLCoef == 0 {
			c.add("models.reference", "set, but algorithm.kl_coef is 0: the reference model would be loaded and never used")
		}
	}
	if algoOK && a.Name == "ppo" && !r.Models.Policy.ValueHead {
		c.add("models.policy.value_head", "algorithm ppo needs the critic: set models.policy.value_head: true")
	}
	if algoOK && a.Name != "ppo" && r.Models.Policy.ValueHead {
		c.add("models.policy.value_head", "only algorithm ppo uses a value head (algorithm.name is %q)", a.Name)
	}

	// engines
	c.engine("engines.policy", &r.Engines.Policy, &r.Models.Policy)
	if e := r.Engines.Feedback; e != nil {
		fb := r.Models.Feedback
		if fb == nil {
			fb = &r.Models.Policy
		}
		c.engine("engines.feedback", e, fb)
		if !mlmt {
			c.add("engines.feedback", "a feedback engine needs episode.type mlmt (episode.type is %q)", epType)
		} else if a.MLMT.StaticFeedback {
			c.add("engines.feedback", "set, but algorithm.mlmt.static_feedback is true: remove one (--set engines.feedback=null)")
		}
	}

	// data
	d := &r.Data
	switch {
	case epType == "agent" && (d.Task != nil || d.Dataset != nil):
		c.add("data", "episode.type agent takes its tasks from episode.agent.env: remove data.task and data.dataset")
	case epType == "agent":
	case d.Task == nil && d.Dataset == nil:
		c.add("data", "want a task or a dataset section")
	case d.Task != nil && d.Dataset != nil:
		c.add("data", "both task and dataset are set; want one")
	}
	c.oneOf("data.verifier", d.Verifier, Verifiers)
	c.nonNegative("data.verify_workers", d.VerifyWorkers)
	c.atMost("data.verify_workers", d.VerifyWorkers, MaxVerifyWorkers, "verifications at once (in the driver, also no more than the host's bound on programs at once, which a run checks)")
	c.oneOf("data.verify_on", d.VerifyOn, []string{"driver", "cluster"})
	if d.VerifyOn == "cluster" && d.Verifier != "code" {
		c.add("data.verify_on", "cluster is for the code verifier (data.verifier: code): checking a %s answer takes microseconds, less than a task's round trip", d.Verifier)
	}
	if t := d.Task; t != nil {
		for i, k := range t.Kinds {
			c.oneOf(fmt.Sprintf("data.task.kinds.%d", i), k, slices.Concat(TaskKinds, HiddenTaskKinds))
		}
		if t.Kinds != nil && len(t.Kinds) == 0 {
			c.add("data.task.kinds", "empty list; leave the key out for all kinds")
		}
		if t.Level < 0 || t.Level > MaxTaskLevel {
			c.add("data.task.level", "%d: want 1..%d, or 0 for all levels", t.Level, MaxTaskLevel)
		}
		if t.HeldOutPercent < 1 || t.HeldOutPercent > 99 {
			c.add("data.task.held_out_percent", "%d: want 1..99", t.HeldOutPercent)
		}
		if d.Verifier == "code" {
			c.add("data.verifier", "the built-in task has math answers; want math or gsm8k")
		}
	}
	if ds := d.Dataset; ds != nil {
		c.datasetFile("data.dataset.train", ds.Train, true)
		c.datasetFile("data.dataset.eval", ds.Eval, false)
		if ds.Columns.Prompt == "" {
			c.add("data.dataset.columns.prompt", "empty: the prompt column is required")
		}
		switch {
		case d.Verifier == "code" && ds.Columns.Tests == "":
			c.add("data.dataset.columns.tests", "verifier code needs the tests column")
		case d.Verifier != "code" && ds.Columns.Answer == "":
			c.add("data.dataset.columns.answer", "verifier %s needs the answer column", d.Verifier)
		}
		c.nonNegative("data.dataset.epochs", ds.Epochs)
		if ec := ds.EvalColumns; ec != nil && ds.Eval == "" {
			c.add("data.dataset.eval_columns", "needs data.dataset.eval: without an eval file the held-out rows come from the training file and its columns")
		}
		if mlmt && ds.Columns.Hint == "" {
			c.add("data.dataset.columns.hint", "empty: name the column the feedback templates read as .Hint (default hint)")
		}
	}

	// episode
	for i, t := range r.Episode.Tools {
		c.oneOf(fmt.Sprintf("episode.tools.%d", i), t, Tools)
	}
	if len(r.Episode.Tools) > 0 && epType != "tools" {
		c.add("episode.tools", "tools need episode.type tools (episode.type is %q)", epType)
	}
	c.positive("episode.max_tool_calls", r.Episode.MaxToolCalls)
	switch ag := r.Episode.Agent; {
	case ag == nil && epType == "agent":
		c.add("episode.agent", "absent: episode.type agent needs episode.agent with env (one of %s)", strings.Join(Envs, ", "))
	case ag != nil && epType != "agent":
		c.add("episode.agent", "set, but episode.type is %q (it is for agent)", epType)
	case ag != nil:
		c.oneOf("episode.agent.env", ag.Env, append(slices.Clone(Envs), "http"))
		c.agentURL(ag)
		if ag.MaxSteps < 1 || ag.MaxSteps > 64 {
			c.add("episode.agent.max_steps", "%d: want 1..64", ag.MaxSteps)
		}
		c.oneOf("episode.agent.returns", ag.Returns, AgentReturns)
		if !(ag.Gamma >= 0 && ag.Gamma <= 1) {
			c.add("episode.agent.gamma", "%v: want a value in [0, 1]", ag.Gamma)
		}
		if !strings.Contains(ag.Template, ".Observation") {
			c.add("episode.agent.template", "%q: must use .Observation", ag.Template)
		} else if _, err := tmpl.Parse("episode.agent.template", ag.Template, "Observation", "Actions", "Taken", "Step"); err != nil {
			c.add("episode.agent.template", "%v", err)
		}
	}

	// algorithm
	c.positive("algorithm.group_size", a.GroupSize)
	if algoOK && a.GroupSize == 1 && slices.Contains([]string{"grpo", "drgrpo", "rloo"}, a.Name) {
		c.add("algorithm.group_size", "1: %s compares the samples of a group; want at least 2", a.Name)
	}
	c.positive("algorithm.batch_prompts", a.BatchPrompts)
	c.atMost("algorithm.group_size", a.GroupSize, MaxGroupSize, "samples per prompt")
	c.atMost("algorithm.batch_prompts", a.BatchPrompts, MaxBatchPrompts, "prompts per step")
	if a.GroupSize <= MaxGroupSize && a.BatchPrompts <= MaxBatchPrompts && a.GroupSize*a.BatchPrompts > MaxSamplesPerStep {
		c.add("algorithm.batch_prompts", "%d prompts × group_size %d = %d samples a step: at most %d", a.BatchPrompts, a.GroupSize, a.GroupSize*a.BatchPrompts, MaxSamplesPerStep)
	}
	c.positive("algorithm.max_tokens", a.MaxTokens)
	c.nonNegativeF("algorithm.temperature", a.Temperature)
	if a.Temperature == 0 && a.GroupSize > 1 {
		c.add("algorithm.temperature", "0 (greedy) makes every sample of a group the same; want > 0")
	}
	if !(a.TopP > 0 && a.TopP <= 1) {
		c.add("algorithm.top_p", "%v: want a value in (0, 1]", a.TopP)
	}
	if a.ClipLow < 0 || a.ClipLow >= 1 {
		c.add("algorithm.clip_low", "%v: want a value in [0, 1) (the ratio's lower bound is 1 − clip_low)", a.ClipLow)
	}
	c.nonNegativeF("algorithm.clip_high", a.ClipHigh)
	if a.DualClip != 0 && a.DualClip <= 1 {
		c.add("algorithm.dual_clip", "%v: want 0 (off) or a value above 1 (3 is usual)", a.DualClip)
	}
	c.nonNegativeF("algorithm.kl_coef", a.KLCoef)
	if a.KLInReward {
		switch {
		case algoOK && a.Name != "ppo":
			c.add("algorithm.kl_in_reward", "true: only algorithm ppo takes a per-token reward (its GAE); algorithm.name is %q", a.Name)
		case !(a.KLCoef > 0):
			c.add("algorithm.kl_in_reward", "true, but algorithm.kl_coef is %v: the penalty's weight must be > 0", a.KLCoef)
		}
	}
	if !slices.Contains(KLEstimators, a.KLEstimator) {
		c.add("algorithm.kl_estimator", "%q: want k1, k2 or k3", a.KLEstimator)
	}
	c.nonNegativeF("algorithm.entropy_coef", a.EntropyCoef)
	c.entropyControl(r, algoOK)
	if !slices.Contains(Aggregations, a.Aggregation) {
		c.add("algorithm.aggregation", "%q: want token-mean, seq-mean-token-mean or seq-mean-token-sum-norm", a.Aggregation)
	}
	c.nonNegativeF("algorithm.tis_cap", a.TISCap)
	if a.TISCap != 0 && a.TISCap < 1 {
		c.add("algorithm.tis_cap", "%v: want 0 (off) or a cap of at least 1", a.TISCap)
	}
	if a.LR <= 0 {
		c.add("algorithm.lr", "%v: want a positive learning rate", a.LR)
	}
	if a.LR > 0 && (a.MinLR < 0 || a.MinLR > a.LR) {
		c.add("algorithm.min_lr", "%v: want a value in [0, lr %v]", a.MinLR, a.LR)
	}
	c.oneOf("algorithm.schedule", a.Schedule, Schedules)
	if a.MinLR != 0 && a.Schedule == "constant" {
		c.add("algorithm.min_lr", "%v: only the cosine schedule decays to min_lr", a.MinLR)
	}
	c.nonNegative("algorithm.warmup", a.Warmup)
	if r.Schedule.Steps > 0 && a.Warmup > r.Schedule.Steps { // a bad schedule.steps has its own error
		c.add("algorithm.warmup", "%d: more warm-up steps than schedule.steps %d", a.Warmup, r.Schedule.Steps)
	}
	c.nonNegativeF("algorithm.weight_decay", a.WeightDecay)
	c.nonNegativeF("algorithm.grad_clip", a.GradClip)
	c.positive("algorithm.micro_batch", a.MicroBatch)
	c.positive("algorithm.epochs", a.Epochs)
	c.atMost("algorithm.epochs", a.Epochs, MaxEpochs, "passes over a batch")
	c.positive("algorithm.mini_batches", a.MiniBatches)
	if a.Epochs > 0 && a.Epochs <= MaxEpochs && a.MiniBatches > MaxOptimizerSteps/a.Epochs {
		c.add("algorithm.mini_batches", "%d mini-batches × epochs %d = %.0f optimizer steps a step: at most %d", a.MiniBatches, a.Epochs, float64(a.MiniBatches)*float64(a.Epochs), MaxOptimizerSteps)
	}
	if a.MiniBatches > a.BatchPrompts*a.GroupSize && a.BatchPrompts > 0 && a.GroupSize > 0 {
		c.add("algorithm.mini_batches", "%d: more mini-batches than the %d sequences of a batch", a.MiniBatches, a.BatchPrompts*a.GroupSize)
	}
	if a.AdamBeta1 < 0 || a.AdamBeta1 >= 1 {
		c.add("algorithm.adam_beta1", "%v: want a value in [0, 1)", a.AdamBeta1)
	}
	if a.AdamBeta2 < 0 || a.AdamBeta2 >= 1 {
		c.add("algorithm.adam_beta2", "%v: want a value in [0, 1)", a.AdamBeta2)
	}
	if a.AdamEps <= 0 {
		c.add("algorithm.adam_eps", "%v: want a positive epsilon", a.AdamEps)
	}
	c.unit("algorithm.gamma", a.Gamma)
	c.unit("algorithm.lambda", a.Lambda)
	c.nonNegativeF("algorithm.value_coef", a.ValueCoef)
	c.nonNegativeF("algorithm.value_clip", a.ValueClip)
	if def := Default().Algorithm; algoOK && a.Name != "ppo" {
		for _, f := range []struct {
			key      string
			v, deflt float64
		}{{"value_coef", a.ValueCoef, def.ValueCoef}, {"value_clip", a.ValueClip, def.ValueClip}, {"lambda", a.Lambda, def.Lambda}} {
			if f.v != f.deflt {
				c.add("algorithm."+f.key, "%v: only algorithm ppo uses it (algorithm.name is %q); leave it at %v", f.v, a.Name, f.deflt)
			}
		}
	}
	c.oneOf("algorithm.rw_sft.weighting", a.RWSFT.Weighting, Weightings)
	if a.RWSFT.Weighting == "group_filter" {
		switch ag := r.Episode.Agent; {
		case r.Episode.Type != "agent" || ag == nil:
			c.add("algorithm.rw_sft.weighting", "group_filter: want episode.type agent (it weighs each group's solved episodes), not %q", r.Episode.Type)
		case ag.Returns == "discounted":
			c.add("algorithm.rw_sft.weighting", "group_filter: want episode.agent.returns episode (an episode is solved or not as a whole), not discounted")
		}
	}
	if a.RWSFT.Beta <= 0 {
		c.add("algorithm.rw_sft.beta", "%v: want a positive temperature", a.RWSFT.Beta)
	}
	if algoOK && a.Name != "rw_sft" && a.RWSFT != Default().Algorithm.RWSFT {
		c.add("algorithm.rw_sft", "set, but algorithm.name is %q", a.Name)
	}
	c.mlmt(r)
	c.archer(r, algoOK)

	if tr := r.Data.Traces; tr != nil {
		switch st, err := os.Stat(tr.Store); {
		case tr.Store == "":
			c.add("data.traces.store", "empty: want a trace store folder")
		case err != nil:
			c.add("data.traces.store", "%v", err)
		case !st.IsDir():
			c.add("data.traces.store", "%s is a file; want a trace store folder", tr.Store)
		}
		if tr.Train != "" {
			c.oneOf("data.traces.train", tr.Train, TracesTrain)
		}
		switch {
		case tr.Train != "rl" && r.SFT.Steps == 0:
			c.add("data.traces", "feeds the SFT warm-up: set sft.steps > 0 (or data.traces.train rl)")
		case tr.Train == "rl" && algoOK && !slices.Contains(OfflineAlgorithms, a.Name):
			c.add("data.traces.train", "rl: offline RL on trace groups takes a group estimator (%s), not algorithm.name %s",
				strings.Join(OfflineAlgorithms, ", "), a.Name)
		case tr.Train == "rl" && tr.MinReward != nil:
			c.add("data.traces.min_reward", "set with data.traces.train rl: offline RL learns from every reward; min_reward filters the warm-up's calls only")
		case tr.Train == "rl" && a.TISCap > 0:
			c.add("algorithm.tis_cap", "%v with data.traces.train rl: the recorded calls' logprobs are another policy's, or absent; want 0", a.TISCap)
		}
		if epType != "single" {
			c.add("data.traces", "warms up single-turn runs only (episode.type is %q)", epType)
		}
		if tr.MinReward != nil && (math.IsNaN(*tr.MinReward) || math.IsInf(*tr.MinReward, 0)) {
			c.add("data.traces.min_reward", "%v: want a finite number", *tr.MinReward)
		}
	}

	if t := r.Trace; t != nil && t.Sample != nil && !(*t.Sample >= 0 && *t.Sample <= 1) {
		c.add("trace.sample", "%v: want a share of episodes in [0, 1]", *t.Sample)
	}

	// SFT warm-up
	c.nonNegative("sft.steps", r.SFT.Steps)
	c.positive("sft.batch_size", r.SFT.BatchSize)
	c.atMost("sft.batch_size", r.SFT.BatchSize, MaxSFTBatch, "sequences a step")
	if r.SFT.LR <= 0 {
		c.add("sft.lr", "%v: want a positive learning rate", r.SFT.LR)
	}
	if err := checkSFTTemplate(r.SFT.Response); err != nil {
		c.add("sft.response", "%v", err)
	}
	c.sftTrajectories(r.SFT, r.Data.Traces != nil)
	if r.SFT.Trajectories != "" && r.Data.Traces != nil {
		c.add("sft.trajectories", "set with data.traces: one source feeds the warm-up, choose one")
	}
	if r.SFT.LoRA && r.Models.Policy.LoRA == nil {
		c.add("sft.lora", "true, but models.policy.lora is absent (the adapters the warm-up would train)")
	}
	c.sftCollect(r)
	c.sftUntil(r)
	if r.SFT.Steps > 0 && r.SFT.Trajectories == "" && r.Data.Verifier == "code" && (r.Data.Dataset == nil || r.Data.Dataset.Columns.Answer == "") {
		// With code, the answer column is the reference program.
		c.add("sft.steps", "SFT warm-up needs reference answers; with verifier code set data.dataset.columns.answer to the reference program's column")
	}

	// placement
	p := &r.Placement
	c.oneOf("placement.mode", p.Mode, PlacementModes)
	c.resources("placement.rollout", p.Rollout)
	c.resources("placement.learner", p.Learner)
	c.positive("placement.learner_shards", p.LearnerShards)
	c.atMost("placement.learner_shards", p.LearnerShards, MaxReplicas, "learner ranks")
	// The learner splits a batch into mini_batches, each with a sequence
	// per shard at least, and refuses a batch that cannot be split so at
	// its first step (after the run started). A single-turn warm-up step
	// is sft.batch_size sequences; an RL step's, batch_prompts ×
	// group_size (the check above, without shards).
	if need := a.MiniBatches * p.LearnerShards; a.MiniBatches > 0 && p.LearnerShards > 1 && a.MiniBatches <= MaxOptimizerSteps && p.LearnerShards <= MaxReplicas {
		if n := a.BatchPrompts * a.GroupSize; n >= a.MiniBatches && n < need && a.BatchPrompts > 0 && a.GroupSize > 0 {
			c.add("algorithm.mini_batches", "%d mini-batches × placement.learner_shards %d: an RL step's %d sequences (batch_prompts × group_size) cannot give each mini-batch a sequence per shard", a.MiniBatches, p.LearnerShards, n)
		}
	}
	if need := a.MiniBatches * max(p.LearnerShards, 1); r.SFT.Steps > 0 && epType == "single" && r.SFT.Trajectories == "" && r.Data.Traces == nil &&
		a.MiniBatches > 0 && a.MiniBatches <= MaxOptimizerSteps && p.LearnerShards <= MaxReplicas && r.SFT.BatchSize > 0 && r.SFT.BatchSize < need {
		c.add("sft.batch_size", "%d sequences a warm-up step: algorithm.mini_batches %d × placement.learner_shards %d need at least %d (a sequence per shard in each mini-batch)", r.SFT.BatchSize, a.MiniBatches, max(p.LearnerShards, 1), need)
	}
	c.device("placement.learner_device", p.LearnerDevice)

	// schedule, eval, checkpoint
	c.positive("schedule.steps", r.Schedule.Steps)
	c.nonNegative("schedule.eval_every", r.Schedule.EvalEvery)
	c.nonNegative("schedule.checkpoint_every", r.Schedule.CheckpointEvery)
	c.positive("eval.held_out", r.Eval.HeldOut)
	c.atMost("eval.held_out", r.Eval.HeldOut, MaxHeldOut, "held-out problems")
	c.positive("eval.samples", r.Eval.Samples)
	c.atMost("eval.samples", r.Eval.Samples, MaxEvalSamples, "answers per held-out problem")
	if h, n := r.Eval.HeldOut, r.Eval.Samples; h > 0 && h <= MaxHeldOut && n > 0 && n <= MaxEvalSamples && h*n > MaxEvalAnswers {
		c.add("eval.samples", "%d answers × eval.held_out %d = %d episodes an evaluation: at most %d", n, h, h*n, MaxEvalAnswers)
	}
	c.nonNegativeF("eval.temperature", r.Eval.Temperature)
	if r.Eval.Samples > 1 && r.Eval.Temperature == 0 {
		c.add("eval.samples", "%d samples at temperature 0 are all the same (eval.temperature 0 is greedy); set eval.temperature > 0 or eval.samples: 1", r.Eval.Samples)
	}
	if g := r.Eval.GroupBy; g != nil {
		switch {
		case len(g) == 0:
			c.add("eval.group_by", "empty: leave it out for no per-group figures")
		case len(g) > MaxGroupBy:
			c.add("eval.group_by", "%d columns: want at most %d", len(g), MaxGroupBy)
		case r.Data.Dataset == nil:
			c.add("eval.group_by", "needs data.dataset: the columns are the evaluation rows' (e.g. subject, level)")
		}
		for i, col := range g {
			path := fmt.Sprintf("eval.group_by.%d", i)
			switch {
			case strings.TrimSpace(col) == "":
				c.add(path, "empty column name")
			case slices.Contains(g[:i], col):
				c.add(path, "%q: listed twice", col)
			}
		}
	}
	if r.Eval.PassK != nil {
		switch {
		case r.Eval.Temperature == 0:
			c.add("eval.pass_k", "pass@k needs sampled answers: eval.temperature is 0 (greedy)")
		case len(r.Eval.PassK) == 0:
			c.add("eval.pass_k", "empty: leave it out for the default (1 and eval.samples)")
		}
		for i, k := range r.Eval.PassK {
			path := fmt.Sprintf("eval.pass_k.%d", i)
			switch {
			case k < 1 || k > r.Eval.Samples:
				c.add(path, "%d: want 1..eval.samples (%d)", k, r.Eval.Samples)
			case i > 0 && k <= r.Eval.PassK[i-1]:
				c.add(path, "%d: want ascending values, each once (after %d)", k, r.Eval.PassK[i-1])
			}
		}
	}
	seenMetric := map[string]bool{}
	for i, m := range r.Eval.Metrics {
		path := fmt.Sprintf("eval.metrics.%d", i)
		switch {
		case seenMetric[m]:
			c.add(path, "%q listed twice", m)
		case slices.Contains(FeedbackMetrics, m):
			if !mlmt || a.MLMT.StaticFeedback {
				c.add(path, "%q needs episode.type mlmt with a feedback policy (not static feedback)", m)
			}
		case slices.Contains(TurnMetrics, m):
			switch {
			case !mlmt && epType != "score":
				c.add(path, "%q needs episode.type mlmt or score (episode.type is %q)", m, epType)
			case !slices.Contains(turnMetricsOf(epType), m):
				c.add(path, "%q is not a metric of %s episodes (want one of %v)", m, epType, turnMetricsOf(epType))
			}
		default:
			c.oneOf(path, m, slices.Concat(Metrics, TurnMetrics, FeedbackMetrics))
		}
		seenMetric[m] = true
	}
	c.nonNegative("checkpoint.keep", r.Checkpoint.Keep)

	// sync
	s := &r.Sync
	if c.oneOf("sync.mode", s.Mode, SyncModes) {
		switch {
		case s.MaxStaleness < 0:
			c.add("sync.max_staleness", "%d: must not be negative", s.MaxStaleness)
		case s.Mode == "sync" && s.MaxStaleness != 0:
			c.add("sync.max_staleness", "%d: only sync.mode async allows stale trajectories", s.MaxStaleness)
		case s.Mode == "async" && s.MaxStaleness == 0:
			c.add("sync.max_staleness", "0 with async is sync: set sync.mode sync, or max_staleness ≥ 1")
		}
	}
	if r.Deterministic {
		if s.Mode != "sync" {
			c.add("deterministic", "needs sync.mode sync: async overlap makes the order of updates timing-dependent")
		}
		for _, e := range []struct {
			path string
			e    *Engine
		}{{"engines.policy", &r.Engines.Policy}, {"engines.feedback", r.Engines.Feedback}} {
			if e.e != nil && e.e.Kind == "vllm" {
				c.add("deterministic", "needs the native engine (%s.kind is vllm)", e.path)
			}
		}
	}
	return c.probs
}

func (c *checker) model(path string, m *Model) {
	switch {
	case m.Path == "" && m.Init == nil:
		c.add(path, "want path (a checkpoint directory) or init (a random initialization)")
	case m.Path != "" && m.Init != nil:
		// A built-in recipe's init stays when --set adds a path.
		c.add(path, "both path and init are set; want one (to load path, drop init: --set %s.init=null)", path)
	case !filepath.IsAbs(m.Path) && IsHubID(m.Path): // resolve found no such model
		_, err := HubSnapshot(m.Path)
		c.add(path+".path", "%s is neither a checkpoint directory nor a hub id in the cache: %v", m.Path, err)
	case m.Path != "":
		if _, err := os.Stat(filepath.Join(m.Path, "config.json")); err != nil {
			c.add(path+".path", "%s is not a checkpoint directory (no config.json)", m.Path)
			break
		}
		// The files a run reads whole before it can be stopped must be
		// files: a pipe or device there would hang (or fill) it.
		// (The weights' read is one a signal interrupts: a pipe there is
		// how a test holds a run in its load.)
		for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json"} {
			if st, err := os.Stat(filepath.Join(m.Path, f)); err == nil && !st.Mode().IsRegular() {
				c.add(path+".path", "%s in %s is not a regular file (%s)", f, m.Path, st.Mode().Type())
			}
		}
	}
	if in := m.Init; in != nil {
		p := path + ".init"
		c.oneOf(p+".architecture", in.Architecture, Architectures)
		if in.VocabSize < MinBuiltinVocab {
			c.add(p+".vocab_size", "%d: the built-in tokenizer needs at least %d", in.VocabSize, MinBuiltinVocab)
		}
		c.positive(p+".hidden_size", in.HiddenSize)
		c.positive(p+".intermediate_size", in.IntermediateSize)
		c.positive(p+".layers", in.Layers)
		c.positive(p+".heads", in.Heads)
		c.positive(p+".kv_heads", in.KVHeads)
		c.positive(p+".max_positions", in.MaxPositions)
		if in.Heads > 0 && in.HiddenSize > 0 && in.HiddenSize%in.Heads != 0 {
			c.add(p+".heads", "%d does not divide hidden_size %d", in.Heads, in.HiddenSize)
		}
		if in.Heads > 0 && in.KVHeads > 0 && in.Heads%in.KVHeads != 0 {
			c.add(p+".kv_heads", "%d does not divide heads %d", in.KVHeads, in.Heads)
		}
		if n := in.params(); n > MaxInitParams {
			// Blamed on the size furthest above its default, so the error
			// points at the line (or --set) most likely mistyped.
			var d ModelInit
			d.setDefaults()
			blame, worst, value := "", 0.0, 0
			for _, f := range []struct {
				key     string
				v, dflt int
			}{{"vocab_size", in.VocabSize, d.VocabSize}, {"hidden_size", in.HiddenSize, d.HiddenSize},
				{"intermediate_size", in.IntermediateSize, d.IntermediateSize}, {"layers", in.Layers, d.Layers}} {
				if r := float64(f.v) / float64(f.dflt); r > worst {
					blame, worst, value = f.key, r, f.v
				}
			}
			c.add(p+"."+blame, "%d: the model would have %.3g parameters (vocab_size %d, hidden_size %d, intermediate_size %d, layers %d); a randomly initialized model has at most %.0e",
				value, n, in.VocabSize, in.HiddenSize, in.IntermediateSize, in.Layers, float64(MaxInitParams))
		}
	}
	if l := m.LoRA; l != nil {
		p := path + ".lora"
		c.positive(p+".rank", l.Rank)
		if l.Alpha <= 0 {
			c.add(p+".alpha", "%v: want a positive scale", l.Alpha)
		}
		if l.Dropout < 0 || l.Dropout >= 1 {
			c.add(p+".dropout", "%v: want a value in [0, 1)", l.Dropout)
		}
		if len(l.Targets) == 0 {
			c.add(p+".targets", "empty: want at least one module")
		}
		for i, t := range l.Targets {
			c.oneOf(fmt.Sprintf("%s.targets.%d", p, i), t, LoRATargets)
		}
		if l.Preset != "" {
			c.oneOf(p+".preset", l.Preset, LoRAPresets)
		}
		c.atMost(p+".rank", l.Rank, MaxLoRARank, "(an adapter's rank is far below its matrix's dimensions)")
		if in := m.Init; in != nil && l.Rank <= MaxLoRARank {
			if t, d := in.smallestTarget(l.Targets); t != "" && l.Rank > d {
				c.add(p+".rank", "%d exceeds %s's smaller dimension %d (%s.init's hidden_size %d, intermediate_size %d, heads %d, kv_heads %d): want at most %d",
					l.Rank, t, d, path, in.HiddenSize, in.IntermediateSize, in.Heads, in.KVHeads, d)
			}
		}
	}
}

// smallestTarget is the LoRA target among targets whose matrix has the
// smallest dimension in a model of this shape, and that dimension; ""
// when a size is not positive (reported on its own).
func (in *ModelInit) smallestTarget(targets []string) (string, int) {
	if in.HiddenSize <= 0 || in.IntermediateSize <= 0 || in.Heads <= 0 || in.KVHeads <= 0 {
		return "", 0
	}
	h, kv := in.HiddenSize, in.HiddenSize/in.Heads*in.KVHeads
	dims := map[string]int{"q_proj": h, "o_proj": h, "k_proj": min(h, kv), "v_proj": min(h, kv),
		"gate_proj": min(h, in.IntermediateSize), "up_proj": min(h, in.IntermediateSize), "down_proj": min(h, in.IntermediateSize)}
	best, bd := "", 0
	for _, t := range targets {
		if d, ok := dims[t]; ok && (best == "" || d < bd) {
			best, bd = t, d
		}
	}
	return best, bd
}

// params is the model's parameter count (Qwen2's layout: embeddings, an
// output matrix unless tied, per layer the attention's q, k, v, o and
// biases, the MLP's three matrices and two norms, a final norm), in
// float64 so that no size overflows; 0 when a size is not positive.
func (in *ModelInit) params() float64 {
	if in.VocabSize <= 0 || in.HiddenSize <= 0 || in.IntermediateSize <= 0 || in.Layers <= 0 || in.Heads <= 0 || in.KVHeads <= 0 {
		return 0
	}
	v, h, m := float64(in.VocabSize), float64(in.HiddenSize), float64(in.IntermediateSize)
	kv := h / float64(in.Heads) * float64(in.KVHeads)
	layer := 2*h*h + 2*h*kv + h + 2*kv + 3*h*m + 2*h
	n := v*h + float64(in.Layers)*layer + h
	if !in.TieWordEmbeddings {
		n += v * h
	}
	return n
}

// device checks a device value (LearnerDevices; cuda and cuda-bf16 may
// name a device index: cuda:1); "" is the default.
func (c *checker) device(path, v string) {
	if v == "" {
		return
	}
	kind, idx, hasIdx := strings.Cut(v, ":")
	if !hasIdx {
		c.oneOf(path, v, LearnerDevices)
	} else if c.oneOf(path, kind, LearnerDevices[1:]) {
		if n, err := strconv.Atoi(idx); err != nil || n < 0 || n > 1023 {
			c.add(path, "%q: the device index after %s: is not 0..1023", v, kind)
		}
	}
}

func (c *checker) engine(path string, e *Engine, m *Model) {
	kindOK := c.oneOf(path+".kind", e.Kind, EngineKinds)
	c.positive(path+".replicas", e.Replicas)
	c.atMost(path+".replicas", e.Replicas, MaxReplicas, "replicas")
	c.positive(path+".max_batch", e.MaxBatch)
	c.device(path+".device", e.Device)
	if e.Device != "" && e.Kind == "vllm" {
		c.add(path+".device", "%q is for the native engine: vLLM servers run on their own devices", e.Device)
	}
	if c.oneOf(path+".weight_sync", e.WeightSync, WeightSyncs) {
		switch {
		case e.WeightSync == "lora" && m.LoRA == nil:
			c.add(path+".weight_sync", "lora needs the model's lora section")
		case e.WeightSync == "full" && m.LoRA != nil && e.Kind == "vllm":
			// Merged adapters can be sent as full weights: allowed.
		case e.WeightSync == "reload" && e.Kind != "vllm":
			c.add(path+".weight_sync", "reload is for vllm servers; the native engine takes full or lora")
		}
	}
	if !kindOK {
		return
	}
	switch {
	case e.Kind == "vllm" && e.VLLM == nil:
		c.add(path+".vllm", "kind vllm needs this section with servers and model")
	case e.Kind == "native" && e.VLLM != nil:
		c.add(path+".vllm", "set, but kind is native: remove it or set kind: vllm")
	case e.VLLM != nil:
		v := e.VLLM
		switch {
		case len(v.Servers) == 0 && v.Launch == nil:
			c.add(path+".vllm.servers", "want at least one server URL (http://HOST:PORT), or a launch section to have the run start its servers")
		case len(v.Servers) > 0 && v.Launch != nil:
			c.add(path+".vllm.launch", "set with servers: the run uses running servers or starts its own, not both")
		case v.Launch != nil:
			c.vllmLaunch(path+".vllm.launch", v.Launch)
			if m != nil && m.Path == "" {
				c.add(path+".vllm.launch", "the servers serve the model's path, and this policy's model has none (init): make a checkpoint first (rlnode model init) and name it in models.*.path")
			}
		}
		for i, s := range v.Servers {
			u, err := url.Parse(s)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				c.add(fmt.Sprintf("%s.vllm.servers.%d", path, i), "%q: want http://HOST:PORT or https://HOST:PORT", s)
			} else if strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/v1") {
				c.add(fmt.Sprintf("%s.vllm.servers.%d", path, i), "%q: leave out the /v1 suffix", s)
			}
		}
		if v.Model == "" {
			c.add(path+".vllm.model", "empty: want the served model name")
		}
		if v.APIKeyEnv != "" && !envName.MatchString(v.APIKeyEnv) {
			c.add(path+".vllm.api_key_env", "%q is not an environment variable name (the key itself never goes in a recipe)", v.APIKeyEnv)
		}
		c.positive(path+".vllm.max_in_flight", v.MaxInFlight)
		c.oneOf(path+".vllm.weight_update", v.WeightUpdate, VLLMWeightUpdates)
	}
}

// vllmLaunch checks the bounds of a launch section; which vllm serve
// options it may add is rollout/vllm's to say (train.Check).
func (c *checker) vllmLaunch(path string, l *VLLMLaunch) {
	if l.Count < 1 || l.Count > 64 {
		c.add(path+".count", "%d: want 1 to 64 servers", l.Count)
	}
	if l.GPUs < 0 || l.GPUs > 64 || math.IsNaN(l.GPUs) {
		c.add(path+".gpus", "%v: want 0 (no GPU) to 64 GPUs per server", l.GPUs)
	}
	if l.StartTimeoutSeconds <= 0 || l.StartTimeoutSeconds > 7200 || math.IsNaN(l.StartTimeoutSeconds) {
		c.add(path+".start_timeout_seconds", "%v: want more than 0, at most 7200", l.StartTimeoutSeconds)
	}
}

func (c *checker) datasetFile(path, file string, required bool) {
	if file == "" {
		if required {
			c.add(path, "empty: want a .jsonl, .parquet or .csv file")
		}
		return
	}
	switch strings.ToLower(filepath.Ext(file)) {
	case ".jsonl", ".ndjson", ".parquet", ".csv":
	default:
		c.add(path, "%s: want a .jsonl, .parquet or .csv file", file)
		return
	}
	if st, err := os.Stat(file); err != nil {
		c.add(path, "%v", err)
	} else if st.IsDir() {
		c.add(path, "%s is a directory; want a .jsonl, .parquet or .csv file", file)
	} else if !st.Mode().IsRegular() {
		// A pipe would hang validation and the run waiting for a writer;
		// a device (/dev/zero) would be read without end.
		c.add(path, "%s is %s, not a regular file; want a .jsonl, .parquet or .csv file", file, notRegular(st.Mode()))
	}
}

// notRegular names what a file that is neither a directory nor a regular
// file is.
func notRegular(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

// sftTrajectories checks the warm-up's trajectory data source (a file, or
// episodes the run collects), and the weighting of it or of data.traces's
// calls (traces).
func (c *checker) sftTrajectories(s SFT, traces bool) {
	if s.Trajectories != "" && s.Collect != nil {
		c.add("sft.collect", "set with sft.trajectories: one source feeds the warm-up, choose one")
		return
	}
	if s.Collect != nil {
		if s.Steps == 0 {
			c.add("sft.collect", "set, but sft.steps is 0 (no warm-up trains on it)")
		}
		c.sftWeighting(s)
		return
	}
	if s.Trajectories == "" && !traces {
		for _, f := range []struct {
			name string
			set  bool
		}{{"weighting", s.Weighting != ""}, {"beta", s.Beta != 0}, {"threshold", s.Threshold != 0}} {
			if f.set {
				c.add("sft."+f.name, "set, but neither sft.trajectories nor data.traces is (it weighs their samples)")
			}
		}
		return
	}
	if s.Trajectories == "" {
		c.sftWeighting(s)
		return
	}
	switch strings.ToLower(filepath.Ext(s.Trajectories)) {
	case ".jsonl", ".arrow":
		if st, err := os.Stat(s.Trajectories); err != nil {
			c.add("sft.trajectories", "%v", err)
		} else if st.IsDir() {
			c.add("sft.trajectories", "%s is a directory; want a .jsonl or .arrow file", s.Trajectories)
		} else if !st.Mode().IsRegular() {
			c.add("sft.trajectories", "%s is %s, not a regular file; want a .jsonl or .arrow file", s.Trajectories, notRegular(st.Mode()))
		}
	default:
		c.add("sft.trajectories", "%s: want a .jsonl file of episodes or an .arrow trajectory file", s.Trajectories)
	}
	if s.Steps == 0 {
		c.add("sft.trajectories", "set, but sft.steps is 0 (no warm-up trains on it)")
	}
	c.sftWeighting(s)
}

// sftWeighting checks sft.weighting and its parameters ("" is none).
func (c *checker) sftWeighting(s SFT) {
	if s.Weighting == "" {
		s.Weighting = "none"
	}
	c.oneOf("sft.weighting", s.Weighting, SFTWeightings)
	switch {
	case s.Weighting == "exp" && (!(s.Beta > 0) || math.IsInf(s.Beta, 0)):
		c.add("sft.beta", "%v: want a positive temperature", s.Beta)
	case s.Weighting != "exp" && s.Beta != 0:
		c.add("sft.beta", "set, but sft.weighting is %s (beta is exp's)", s.Weighting)
	}
	switch {
	case math.IsNaN(s.Threshold) || math.IsInf(s.Threshold, 0):
		c.add("sft.threshold", "%v: want a finite number", s.Threshold)
	case s.Weighting != "filter" && s.Threshold != 0:
		c.add("sft.threshold", "set, but sft.weighting is %s (threshold is filter's)", s.Weighting)
	}
}

func (c *checker) resources(path string, r Resources) {
	c.nonNegativeF(path+".cpus", r.CPUs)
	c.nonNegativeF(path+".gpus", r.GPUs)
	if r.GPUs > 1 && r.GPUs != math.Trunc(r.GPUs) {
		c.add(path+".gpus", "%v: above 1, want whole GPUs", r.GPUs)
	}
	if r.Memory != "" {
		if _, err := bytesize.Parse(r.Memory); err != nil {
			c.add(path+".memory", "%v", err)
		}
	}
	for k, v := range r.Custom {
		switch {
		case k == "memory":
			c.add(path+".custom.memory", "the node's memory is %s.memory (a size: 16GiB), not a custom resource", path)
		case v < 0:
			c.add(path+".custom."+k, "%v: must not be negative", v)
		}
	}
}

// turnMetricsOf are the turn metrics of an episode type: the final turn
// is turn 3 of mlmt, turn 2 of score.
func turnMetricsOf(epType string) []string {
	final := "turn3_accuracy"
	if epType == "score" {
		final = "turn2_accuracy"
	}
	return []string{"turn1_accuracy", final, "delta", "incorrect_to_correct", "correct_to_incorrect"}
}

func (c *checker) mlmt(r *Recipe) {
	shapedRefine := r.Episode.Type == "mlmt" && r.Algorithm.MLMT.RefineReward == "shaped"
	if r.Episode.Type != "score" && !shapedRefine && r.Algorithm.Score.Alpha != 1 {
		c.add("algorithm.score", "set, but episode.type is %q (these settings are for score, and for mlmt with algorithm.mlmt.refine_reward: shaped)", r.Episode.Type)
	}
	if r.Episode.Type == "score" || shapedRefine {
		c.nonNegativeF("algorithm.score.alpha", r.Algorithm.Score.Alpha)
	}
	c.scoreStages(r)
	// Static feedback ignores it, so that the static variant of a recipe
	// is the recipe with static_feedback set.
	if r.SFT.FeedbackResponse != "" && r.Episode.Type != "mlmt" {
		c.add("sft.feedback_response", "set, but episode.type is %q (it is for mlmt)", r.Episode.Type)
	}
	if r.SFT.RefineFeedback != "" && r.Episode.Type != "mlmt" {
		c.add("sft.refine_feedback", "set, but episode.type is %q (it is for mlmt)", r.Episode.Type)
	}
	m := &r.Algorithm.MLMT
	if bl := r.Algorithm.BiLevel; bl != nil {
		c.biLevel(r, bl)
	}
	c.hierarchy(r)
	if r.Episode.Type != "mlmt" {
		if len(m.Train) > 0 || m.StopGradient || m.StaticFeedback || m.FeedbackReward != "final" || m.FeedbackAlgorithm != "" || m.FeedbackLR != 0 || (m.RefineReward != "" && m.RefineReward != "final") {
			c.add("algorithm.mlmt", "set, but episode.type is %q (these settings are for mlmt)", r.Episode.Type)
		}
		return
	}
	c.oneOf("algorithm.mlmt.feedback_reward", m.FeedbackReward, FeedbackReward)
	if m.RefineReward != "" {
		c.oneOf("algorithm.mlmt.refine_reward", m.RefineReward, []string{"final", "shaped"})
	}
	if !m.StaticFeedback {
		c.oneOf("algorithm.mlmt.feedback_algorithm", m.FeedbackAlgorithm, Algorithms)
		if !(m.FeedbackLR > 0) {
			c.add("algorithm.mlmt.feedback_lr", "%g: want > 0", m.FeedbackLR)
		}
	}
	if len(m.Train) == 0 {
		c.add("algorithm.mlmt.train", "empty: want solver, feedback or both")
	}
	seen := map[string]bool{}
	for i, p := range m.Train {
		path := fmt.Sprintf("algorithm.mlmt.train.%d", i)
		if !c.oneOf(path, p, MLMTPolicies) {
			continue
		}
		if seen[p] {
			c.add(path, "%q listed twice", p)
		}
		seen[p] = true
	}
	if m.StaticFeedback && seen["feedback"] {
		c.add("algorithm.mlmt.train", "trains feedback, but algorithm.mlmt.static_feedback is true (no feedback policy)")
	}
	if m.StopGradient && !seen["feedback"] {
		c.add("algorithm.mlmt.stop_gradient", "the stop-gradient variant trains the feedback policy; add feedback to algorithm.mlmt.train")
	}
}

// checkSFTTemplate parses the SFT response template, refusing what could
// run unbounded (tmpl.Check), and runs it on a sample, so an unknown field
// is caught now and not at step 0.
func checkSFTTemplate(s string) error {
	if s == "" {
		return fmt.Errorf("empty: want the target text template (e.g. \\boxed{ {{- .Answer -}} })")
	}
	t, err := tmpl.Parse("sft.response", s, "Problem", "Answer")
	if err != nil {
		return err
	}
	if _, err := tmpl.Execute(t, SFTData{Problem: "1+1", Answer: "2"}, tmpl.MaxOutput); err != nil {
		return fmt.Errorf("%v (fields: .Problem, .Answer)", err)
	}
	if !strings.Contains(s, ".Answer") {
		return fmt.Errorf("%q does not use .Answer: the warm-up trains on the worked answer", s)
	}
	return nil
}

// SFTData is what sft.response sees.
type SFTData struct {
	Problem string
	Answer  string
}

func (c *checker) biLevel(r *Recipe, bl *BiLevel) {
	m := &r.Algorithm.MLMT
	switch {
	case r.Episode.Type != "mlmt":
		c.add("algorithm.bi_level", "set, but episode.type is %q (bi-level MLMT needs mlmt)", r.Episode.Type)
		return
	case m.StaticFeedback:
		c.add("algorithm.bi_level", "set, but algorithm.mlmt.static_feedback is true: the value lives on the feedback policy")
		return
	}
	if !slices.Contains(m.Train, "feedback") {
		c.add("algorithm.mlmt.train", "has no feedback, but algorithm.bi_level trains the feedback policy's value: set algorithm.bi_level.train_guidance_model: false to keep the feedback policy fixed")
	}
	if m.FeedbackReward != "final" {
		c.add("algorithm.mlmt.feedback_reward", "%q: bi-level MLMT trains both levels on one reward, the refined answer's (final)", m.FeedbackReward)
	}
	if m.RefineReward == "shaped" {
		c.add("algorithm.mlmt.refine_reward", "%q: bi-level MLMT trains both levels on one reward, the refined answer's (final)", m.RefineReward)
	}
	switch r.Algorithm.Name {
	case "ppo", "rw_sft":
		c.add("algorithm.name", "%q: bi-level MLMT's solver trains on its advantages R − V_L with a policy-gradient algorithm (grpo, drgrpo, rloo, reinforce_pp)", r.Algorithm.Name)
	}
	switch m.FeedbackAlgorithm {
	case "ppo", "rw_sft":
		c.add("algorithm.mlmt.feedback_algorithm", "%q: bi-level MLMT's feedback policy trains with a policy-gradient algorithm on its value baseline's head (grpo, drgrpo, rloo, reinforce_pp)", m.FeedbackAlgorithm)
	}
	if math.IsNaN(bl.ValueCoef) || math.IsInf(bl.ValueCoef, 0) {
		c.add("algorithm.bi_level.value_coef", "%g: want a finite number", bl.ValueCoef)
	}
	if !(bl.ValueLossCoef > 0) || math.IsInf(bl.ValueLossCoef, 0) {
		c.add("algorithm.bi_level.value_loss_coef", "%g: want > 0", bl.ValueLossCoef)
	}
	c.nonNegativeF("algorithm.bi_level.guidance_lr", bl.GuidanceLR)
	c.nonNegativeF("algorithm.bi_level.guidance_kl_coef", bl.GuidanceKLCoef)
}

// archer checks algorithm.archer and what archer runs on.
func (c *checker) archer(r *Recipe, algoOK bool) {
	a := &r.Algorithm
	if !algoOK {
		return
	}
	if a.Name != "archer" {
		if a.Archer != nil {
			c.add("algorithm.archer", "set, but algorithm.name is %q (these settings are for archer)", a.Name)
		}
		if a.MLMT.FeedbackAlgorithm == "archer" {
			c.add("algorithm.mlmt.feedback_algorithm", "archer: the critic is the solver's; the feedback policy trains with grpo, drgrpo, rloo, reinforce_pp, ppo or rw_sft")
		}
		return
	}
	switch r.Episode.Type {
	case "single", "score", "mlmt":
	default:
		c.add("episode.type", "%q: archer runs single, score and mlmt episodes", r.Episode.Type)
	}
	if a.BiLevel != nil {
		c.add("algorithm.bi_level", "set, but algorithm.name is archer: the solver's baseline is ArCHer's critic")
	}
	if a.MLMT.FeedbackAlgorithm == "archer" {
		c.add("algorithm.mlmt.feedback_algorithm", "archer: the critic is the solver's; the feedback policy trains with grpo, drgrpo, rloo, reinforce_pp, ppo or rw_sft")
	}
	if r.Episode.Type == "mlmt" && len(a.MLMT.Train) > 0 && !slices.Contains(a.MLMT.Train, "solver") {
		c.add("algorithm.mlmt.train", "has no solver: archer's critic and actor are the solver's")
	}
	if a.MLMT.StopGradient {
		c.add("algorithm.mlmt.stop_gradient", "true: archer trains every solver turn on its critic's advantage")
	}
	if a.MLMT.RefineReward == "shaped" {
		c.add("algorithm.mlmt.refine_reward", "shaped: archer trains every solver turn on its critic's advantage (its critic's reward is the final answer's)")
	}
	if a.Epochs != 1 || a.MiniBatches != 1 {
		c.add("algorithm.epochs", "%d epochs of %d mini-batches: archer takes one on-policy step per batch (its advantages come from the critic, not a ratio)", a.Epochs, a.MiniBatches)
	}
	ar := a.Archer
	if ar == nil {
		d := DefaultArcher()
		ar = &d
	}
	if !(ar.CriticLR > 0) || math.IsInf(ar.CriticLR, 0) {
		c.add("algorithm.archer.critic_lr", "%g: want a finite value > 0", ar.CriticLR)
	}
	if !(ar.Tau > 0 && ar.Tau <= 1) {
		c.add("algorithm.archer.tau", "%g: want a value in (0, 1]", ar.Tau)
	}
	if !(ar.Gamma >= 0 && ar.Gamma <= 1) {
		c.add("algorithm.archer.gamma", "%v: want a value in [0, 1]", ar.Gamma)
	}
	if ar.BufferSize < 1 || ar.BufferSize > 1_000_000 {
		c.add("algorithm.archer.buffer_size", "%d: want 1 to 1000000 turns", ar.BufferSize)
	}
	if ar.CriticUpdatesPerStep < 1 || ar.CriticUpdatesPerStep > 1000 {
		c.add("algorithm.archer.critic_updates_per_step", "%d: want 1 to 1000", ar.CriticUpdatesPerStep)
	}
	if ar.CriticBatchSize < 1 || ar.CriticBatchSize > 4096 {
		c.add("algorithm.archer.critic_batch_size", "%d: want 1 to 4096", ar.CriticBatchSize)
	}
	c.nonNegative("algorithm.archer.warmup_steps", ar.WarmupSteps)
	c.oneOf("algorithm.archer.critic_init", ar.CriticInit, []string{"policy", "scratch"})
	if ar.CriticInit == "policy" && r.Models.Policy.LoRA != nil {
		c.add("algorithm.archer.critic_init", "policy: the policy trains LoRA adapters; start the critic from scratch or train the policy in full")
	}
}

// agentURL checks an agent episode's server settings: url with env http
// only, and then an http(s) URL with a host.
func (c *checker) agentURL(ag *AgentEpisode) {
	if ag.Env != "http" {
		if ag.URL != "" || ag.TimeoutSeconds != 0 || ag.Retries != 0 {
			c.add("episode.agent.url", "url, timeout_seconds and retries are for env http (env is %q)", ag.Env)
		}
		return
	}
	u, err := url.Parse(ag.URL)
	switch {
	case ag.URL == "":
		c.add("episode.agent.url", "absent: env http needs the server's URL, e.g. http://127.0.0.1:8000")
	case err != nil:
		c.add("episode.agent.url", "%q: %v", ag.URL, err)
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
		c.add("episode.agent.url", "%q: want http(s)://host[:port][/path], no query", ag.URL)
	}
	if !(ag.TimeoutSeconds >= 0 && ag.TimeoutSeconds <= 3600) {
		c.add("episode.agent.timeout_seconds", "%v: want 0..3600 (0: 30)", ag.TimeoutSeconds)
	}
	if ag.Retries < -1 || ag.Retries > 10 {
		c.add("episode.agent.retries", "%d: want -1..10 (0: 3, -1: none)", ag.Retries)
	}
}

// scoreStages checks SCoRe's stage-I settings.
func (c *checker) scoreStages(r *Recipe) {
	sc := r.Algorithm.Score
	c.nonNegative("algorithm.score.stage1_steps", sc.Stage1Steps)
	if sc.Stage1Steps <= 0 {
		return
	}
	switch {
	case r.Episode.Type != "score" && !(r.Episode.Type == "mlmt" && r.Algorithm.MLMT.RefineReward == "shaped"):
		c.add("algorithm.score.stage1_steps", "%d, but episode.type is %q (SCoRe's stage I is for score, and for RL-guided SCoRe: mlmt with algorithm.mlmt.refine_reward shaped)", sc.Stage1Steps, r.Episode.Type)
	case r.Episode.Type == "mlmt" && (r.Algorithm.MLMT.SharedWeights || r.Algorithm.MLMT.StopGradient || !slices.Contains(r.Algorithm.MLMT.Train, "solver")):
		c.add("algorithm.score.stage1_steps", "%d: stage I trains both solver attempts of a model of its own: needs solver in algorithm.mlmt.train, not with shared_weights or stop_gradient", sc.Stage1Steps)
	case !(r.Algorithm.KLCoef > 0):
		c.add("algorithm.score.stage1_steps", "%d, but algorithm.kl_coef is %v: both stages need a KL reference (kl_coef > 0, stage II's β1)", sc.Stage1Steps, r.Algorithm.KLCoef)
	case r.Algorithm.KLInReward:
		c.add("algorithm.score.stage1_steps", "%d, but algorithm.kl_in_reward is true: stage I weighs the KL in the loss", sc.Stage1Steps)
	}
	if !(sc.Stage1KLCoef > 0) || math.IsInf(sc.Stage1KLCoef, 0) {
		c.add("algorithm.score.stage1_kl_coef", "%v: want a finite value > 0", sc.Stage1KLCoef)
	}
}

// ParseUpdateRatio reads algorithm.mlmt.update_ratio, "H:L" with H, L
// whole numbers ≥ 1 (at most 1000 each); "" is 0, 0 (no alternation).
func ParseUpdateRatio(s string) (high, low int, err error) {
	if s == "" {
		return 0, 0, nil
	}
	h, l, ok := strings.Cut(s, ":")
	if ok {
		high, err = strconv.Atoi(strings.TrimSpace(h))
		if err == nil {
			low, err = strconv.Atoi(strings.TrimSpace(l))
		}
	}
	if !ok || err != nil || high < 1 || low < 1 || high > 1000 || low > 1000 {
		return 0, 0, fmt.Errorf("%q: want HIGH:LOW, whole numbers 1..1000 (e.g. 1:15: one feedback-policy update per 15 solver updates)", s)
	}
	return high, low, nil
}

// hierarchy checks the textual actor-critic and the alternating updates.
func (c *checker) hierarchy(r *Recipe) {
	m := &r.Algorithm.MLMT
	if m.UpdateRatio != "" {
		if _, _, err := ParseUpdateRatio(m.UpdateRatio); err != nil {
			c.add("algorithm.mlmt.update_ratio", "%v", err)
		} else if r.Episode.Type != "mlmt" || !slices.Contains(m.Train, "solver") || !slices.Contains(m.Train, "feedback") {
			c.add("algorithm.mlmt.update_ratio", "%q: alternates the feedback policy's and the solver's updates: needs episode.type mlmt with both in algorithm.mlmt.train", m.UpdateRatio)
		} else if r.Algorithm.BiLevel != nil {
			c.add("algorithm.mlmt.update_ratio", "%q: not with algorithm.bi_level (its solver's baseline comes from the feedback learner's step)", m.UpdateRatio)
		}
	}
	if m.SharedWeights {
		switch {
		case r.Episode.Type != "mlmt" || m.StaticFeedback || !slices.Contains(m.Train, "solver") || !slices.Contains(m.Train, "feedback"):
			c.add("algorithm.mlmt.shared_weights", "true: one model in the solver's and the feedback policy's roles: needs episode.type mlmt with both in algorithm.mlmt.train")
		case r.Models.Feedback != nil:
			c.add("models.feedback", "set, but algorithm.mlmt.shared_weights is true: the feedback role is the policy's model")
		case r.Engines.Feedback != nil:
			c.add("engines.feedback", "set, but algorithm.mlmt.shared_weights is true: the feedback role generates on the policy's engine")
		case r.Algorithm.BiLevel != nil:
			c.add("algorithm.mlmt.shared_weights", "true, with algorithm.bi_level: its value head lives on a feedback model of its own")
		case m.FeedbackAlgorithm != r.Algorithm.Name || m.FeedbackLR != r.Algorithm.LR:
			c.add("algorithm.mlmt.shared_weights", "true: one learner trains both roles, so feedback_algorithm %q and feedback_lr %v must be algorithm.name %q and lr %v", m.FeedbackAlgorithm, m.FeedbackLR, r.Algorithm.Name, r.Algorithm.LR)
		}
	}
	ac := r.Algorithm.TextualAC
	if ac == nil {
		return
	}
	switch {
	case r.Episode.Type != "mlmt":
		c.add("algorithm.textual_ac", "set, but episode.type is %q (the context generator is mlmt's feedback policy)", r.Episode.Type)
		return
	case m.StaticFeedback:
		c.add("algorithm.textual_ac", "set, but algorithm.mlmt.static_feedback is true: the context generator is the feedback policy")
		return
	case r.Algorithm.BiLevel != nil:
		c.add("algorithm.textual_ac", "set together with algorithm.bi_level: one reward for the feedback policy at a time")
		return
	}
	for _, t := range []struct{ path, text string }{
		{"episode.templates.feedback", r.Episode.Templates.Feedback},
		{"episode.templates.refine", r.Episode.Templates.Refine},
		{"episode.templates.static_feedback", r.Episode.Templates.StaticFeedback},
	} {
		if strings.Contains(t.text, ".Attempt") {
			c.add(t.path, "uses .Attempt, but algorithm.textual_ac writes the context before the answer it serves")
		}
	}
	if m.FeedbackReward != "final" {
		c.add("algorithm.mlmt.feedback_reward", "%q: the context generator's reward is the answer's (final) with its confidence and dependence terms", m.FeedbackReward)
	}
	for _, f := range []struct {
		path string
		v    float64
	}{{"algorithm.textual_ac.confidence_coef", ac.ConfidenceCoef}, {"algorithm.textual_ac.dependence_coef", ac.DependenceCoef}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			c.add(f.path, "%v: want a finite number ≥ 0", f.v)
		}
	}
	if r.Sync.Mode == "async" {
		c.add("algorithm.textual_ac", "set, but sync.mode is async: the context's terms score the solver's answers with the weights that sampled them (sync)")
	}
}

// maxCollect bounds each count of sft.collect.
const maxCollect = 100_000

// sftCollect checks sft.collect (agent runs on a built-in environment)
// and sft.base_steps (with sft.lora, fewer than sft.steps).
func (c *checker) sftCollect(r *Recipe) {
	s := r.SFT
	if k := s.Collect; k != nil {
		ag := r.Episode.Agent
		switch {
		case r.Episode.Type != "agent" || ag == nil:
			c.add("sft.collect", "set, but episode.type is %q (it plays agent episodes)", r.Episode.Type)
		case ag.Env == "http":
			c.add("sft.collect", "env http has no scripted teacher or offered actions to play before the run; collect with rlnode env rollout and use sft.trajectories")
		}
		for _, f := range []struct {
			name string
			n    int
		}{{"teacher", k.Teacher}, {"random", k.Random}} {
			if f.n < 0 || f.n > maxCollect {
				c.add("sft.collect."+f.name, "%d: want 0..%d episodes", f.n, maxCollect)
			}
		}
		if k.Teacher+k.Random == 0 {
			c.add("sft.collect", "no episodes: set teacher or random above 0")
		}
	}
	switch {
	case s.BaseSteps < 0:
		c.add("sft.base_steps", "%d: want ≥ 0", s.BaseSteps)
	case s.BaseSteps > 0 && !s.LoRA:
		c.add("sft.base_steps", "set, but sft.lora is false (base steps come before the adapters' warm-up steps)")
	case s.BaseSteps > 0 && s.Trajectories == "" && s.Collect == nil:
		c.add("sft.base_steps", "set, but neither sft.trajectories nor sft.collect is (the base steps train on their samples)")
	case s.BaseSteps > 0 && s.BaseSteps >= s.Steps:
		c.add("sft.base_steps", "%d: want fewer than sft.steps (%d), leaving steps for the adapters", s.BaseSteps, s.Steps)
	}
}

// sftUntil checks sft.until: an agent run with a warm-up, a completion
// rate in (0, 1], a bounded probe (every sft.steps or more apart: none).
func (c *checker) sftUntil(r *Recipe) {
	u := r.SFT.Until
	if u == nil {
		return
	}
	switch {
	case r.Episode.Type != "agent":
		c.add("sft.until", "set, but episode.type is %q (it plays the environment's training tasks)", r.Episode.Type)
	case r.SFT.Steps <= 0:
		c.add("sft.until", "set, but sft.steps is %d (no warm-up to end early)", r.SFT.Steps)
	}
	if !(u.Completion > 0 && u.Completion <= 1) {
		c.add("sft.until.completion", "%v: want a completion rate in (0, 1]", u.Completion)
	}
	if u.Every < 0 {
		c.add("sft.until.every", "%d: want 1 or more steps (0: %d)", u.Every, DefaultUntilEvery)
	}
	if u.Episodes < 0 || u.Episodes > MaxUntilEpisodes {
		c.add("sft.until.episodes", "%d: want 1..%d (0: %d)", u.Episodes, MaxUntilEpisodes, DefaultUntilEpisodes)
	}
}

// entropyControl checks adaptive entropy control (algorithm.entropy_target
// and the fields that go with it).
func (c *checker) entropyControl(r *Recipe, algoOK bool) {
	a := &r.Algorithm
	if a.EntropyTarget == nil {
		for _, f := range []struct {
			path string
			v    *float64
		}{{"algorithm.entropy_coef_step", a.EntropyCoefStep}, {"algorithm.entropy_coef_max", a.EntropyCoefMax}} {
			if f.v != nil {
				c.add(f.path, "%v: only with algorithm.entropy_target (adaptive entropy control), which is absent", *f.v)
			}
		}
		return
	}
	if t := *a.EntropyTarget; !(t > 0) || math.IsInf(t, 0) {
		c.add("algorithm.entropy_target", "%v: want a finite mean token entropy > 0 (nats)", t)
	}
	if s := *a.EntropyCoefStep; !(s >= 0) || math.IsInf(s, 0) {
		c.add("algorithm.entropy_coef_step", "%v: want a finite value ≥ 0", s)
	}
	switch m := *a.EntropyCoefMax; {
	case !(m >= 0 && m <= MaxEntropyCoef):
		c.add("algorithm.entropy_coef_max", "%v: want a value in [0, %v]", m, MaxEntropyCoef)
	case a.EntropyCoef > m:
		c.add("algorithm.entropy_coef", "%v: the adapted coefficient starts here, so it must be at most algorithm.entropy_coef_max %v", a.EntropyCoef, m)
	}
	if !algoOK {
		return
	}
	// A policy has an entropy term when it trains in RL with a
	// policy-gradient loss: rw_sft has none, and bi-level's feedback
	// policy without train_guidance_model trains its value head alone.
	mlmt := r.Episode.Type == "mlmt"
	trains := func(p string) bool { return !mlmt || slices.Contains(a.MLMT.Train, p) }
	var controlled []string
	if trains("solver") && a.Name != "rw_sft" {
		controlled = append(controlled, "solver")
	}
	fb := mlmt && !a.MLMT.StaticFeedback && !a.MLMT.SharedWeights && trains("feedback")
	if fb && a.MLMT.FeedbackAlgorithm != "rw_sft" && (a.BiLevel == nil || a.BiLevel.TrainGuidanceModel) {
		controlled = append(controlled, "feedback")
	}
	if len(controlled) == 0 {
		c.add("algorithm.entropy_target", "%v: no policy this run trains has an entropy term to adapt (algorithm.name %q%s)", *a.EntropyTarget, a.Name, feedbackNote(r))
	}
}

// feedbackNote names the feedback policy's algorithm for entropyControl's
// error, where the recipe has one.
func feedbackNote(r *Recipe) string {
	m := r.Algorithm.MLMT
	if r.Episode.Type != "mlmt" || m.StaticFeedback || m.SharedWeights {
		return ""
	}
	return fmt.Sprintf(", algorithm.mlmt.feedback_algorithm %q, algorithm.mlmt.train %v", m.FeedbackAlgorithm, m.Train)
}
