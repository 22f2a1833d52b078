package train

import (
	"cmp"
	"errors"
	"fmt"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/recipes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	tparse "text/template/parse"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/tmpl"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/rollout/vllm"
)

// recipe is a loaded recipe seen by the driver's conversion.
type recipe struct{ *recipes.Loaded }

// FromRecipe is the driver configuration of a loaded recipe, writing under
// out. It refuses exactly what Check refuses, with the same errors.
func FromRecipe(l *recipes.Loaded, out string) (Config, error) {
	if err := Check(l); err != nil {
		return Config{}, err
	}
	return recipe{l}.config(out)
}

// RolloutPlacement is where a recipe's rollout actors go when the run
// generates on a cluster (rlnode run --address) although the recipe alone
// would not ask for actors.
func RolloutPlacement(l *recipes.Loaded, feedback bool) (policy, fb *Rollout) {
	return recipe{l}.rolloutPlacement(feedback)
}

// learnerAlgorithms are the learner's names of the recipe algorithms the
// driver runs (single-turn, outcome reward).
var learnerAlgorithms = map[string]string{
	"grpo": learner.GRPO, "drgrpo": learner.DrGRPO, "rloo": learner.RLOO,
	"reinforce_pp": learner.ReinforcePP, "rw_sft": learner.RWSFT, "ppo": learner.PPO,
	// archer's actor: the policy gradient on its critic's advantages
	// (Config.Archer), which the learner takes as given.
	"archer": learner.GRPO,
}

// refusals are what a recipe asks for that the training loop cannot run
// yet, each naming the recipe field. What the loop runs today:
// single-turn, MLMT three-turn (trainable or frozen feedback policy or
// solver, static feedback, stop-gradient, final or improvement feedback
// reward) and SCoRe two-turn episodes, on the built-in task or a dataset
// with the math, gsm8k or code verifier, native engines in the driver's
// process or on rollout actors (see needsRolloutActors; synchronous or
// asynchronous, every turn of a multi-turn episode) or vLLM servers, a
// learner per policy of placement.learner_shards data-parallel ranks
// (grpo, drgrpo, rloo, reinforce_pp, rw_sft with exp or filter weights; ppo with a
// value head as critic per trained policy; epochs and mini-batches), the
// SFT warm-up, schedule, evaluation, checkpoints and seed. Every recipe
// feature beyond that is refused here, never dropped.
func (l recipe) refusals() []recipes.Problem {
	r := l.Recipe
	var refused []recipes.Problem
	no := func(field, format string, args ...any) {
		refused = append(refused, recipes.Problem{Path: field, Msg: fmt.Sprintf(format, args...)})
	}

	// Episode, data, engines, sync, placement: what the loop can do.
	epType := r.Episode.Type
	mlmt := epType == "mlmt" // validation leaves single, mlmt, score and tools
	// Validation leaves native and vllm engines; native ones with full or
	// lora weight sync.
	onVLLM := r.Engines.Policy.Kind == "vllm"
	switch ws := r.Engines.Policy.WeightSync; {
	case onVLLM:
		l.refuseVLLM(no)
	case ws == "full" && r.Models.Policy.LoRA != nil:
		no("engines.policy.weight_sync", "full with models.policy.lora is not supported: the driver pushes the adapters (lora)")
	}
	if e := r.Engines.Feedback; e != nil {
		switch {
		case e.Kind == "vllm" && onVLLM:
			l.refuseFeedbackVLLM(no)
		case e.Kind == "vllm":
			no("engines.feedback.kind", "vllm needs engines.policy.kind vllm too (the solver on vLLM servers of its own)")
		case e.WeightSync == "full" && l.feedbackLoRA() != nil:
			no("engines.feedback.weight_sync", "full with a LoRA feedback policy is not supported: the driver pushes the adapters (lora)")
		case e.MaxBatch != r.Engines.Policy.MaxBatch:
			no("engines.feedback.max_batch", "%d differs from engines.policy.max_batch %d: one batch size for both engines is supported", e.MaxBatch, r.Engines.Policy.MaxBatch)
		case e.Device != r.Engines.Policy.Device:
			no("engines.feedback.device", "%q differs from engines.policy.device %q: one device for both engines is supported", e.Device, cmp.Or(r.Engines.Policy.Device, "cpu"))
		}
	}

	// Models.
	// models.policy.value_head goes with algorithm ppo (validated): the
	// learner adds the critic for PPO.
	// The feedback policy's algorithm (algorithm.mlmt.feedback_algorithm,
	// default algorithm.name): with ppo it trains on its own critic (as
	// validation asks of models.policy).
	fbAlgo := r.Algorithm.MLMT.FeedbackAlgorithm
	if fb := r.Models.Feedback; fb != nil {
		switch ppo := fbAlgo == "ppo"; {
		case fb.ValueHead && !ppo:
			no("models.feedback.value_head", "only algorithm ppo uses a value head (the feedback policy's algorithm.mlmt.feedback_algorithm is %q)", fbAlgo)
		case !fb.ValueHead && ppo && mlmt && !r.Algorithm.MLMT.StaticFeedback:
			no("models.feedback.value_head", "false: the feedback policy trains with ppo (algorithm.mlmt.feedback_algorithm), which needs its critic (set models.feedback.value_head: true)")
		}
	} else if fbAlgo == "ppo" && r.Algorithm.Name != "ppo" && mlmt && !r.Algorithm.MLMT.StaticFeedback {
		// A copy of models.policy, whose value_head goes with algorithm.name.
		no("models.feedback", "absent: the feedback policy trains with ppo (algorithm.mlmt.feedback_algorithm), which needs models.feedback with value_head: true")
	}
	if mlmt && r.Algorithm.MLMT.StopGradient && !slices.Contains(r.Algorithm.MLMT.Train, "solver") {
		no("algorithm.mlmt.stop_gradient", "true, but algorithm.mlmt.train has no solver: the stop-gradient variant trains the solver's first turn")
	}
	if ref := r.Models.Reference; ref != nil && ref.Path == "" {
		no("models.reference.init", "a randomly initialized reference model is not supported: give models.reference.path, a checkpoint directory")
	}

	// Algorithm: every name validation allows has a learner algorithm
	// (learnerAlgorithms; tested).
	a := r.Algorithm
	if (a.Name == "ppo" || fbAlgo == "ppo") && a.ValueCoef == 0 {
		no("algorithm.value_coef", "0: ppo's critic would never train (want > 0)")
	}

	if epType == "agent" {
		l.refuseAgent(no)
	}

	// Templates (rendered by the driver: .Problem becomes .Question).
	_, tplProbs := l.templates()
	refused = append(refused, tplProbs...)
	if mlmt && !r.Algorithm.MLMT.StaticFeedback && r.SFT.Steps > 0 && strings.TrimSpace(r.SFT.FeedbackResponse) == "" {
		no("sft.feedback_response", "empty: the warm-up (sft.steps %d) needs the feedback policy's target", r.SFT.Steps)
	}
	return refused
}

// refuseAgent reports what an agent recipe asks for that the loop cannot
// run.
func (l recipe) refuseAgent(no func(field, format string, args ...any)) {
	r := l.Recipe
	if ag := r.Episode.Agent; ag != nil && ag.Env == "http" && r.SFT.Steps > 0 && r.SFT.Trajectories == "" {
		no("sft.steps", "%d: env http has no scripted teacher to warm up on: set sft.trajectories or sft.steps 0", r.SFT.Steps)
	}
}

// driverTemplates are a recipe's templates in the driver's form (.Problem
// renamed .Question); those the episode type does not use are empty.
type driverTemplates struct {
	prompt, answer                                 string
	feedbackPrompt, feedbackAnswer, static, refine string
	refineFeedback                                 string
	review, toolResponse                           string
}

// templates converts the recipe's templates for the driver; a template
// that uses a field its turn does not render is a problem on its path.
func (l recipe) templates() (driverTemplates, []recipes.Problem) {
	r := l.Recipe
	var probs []recipes.Problem
	tpl := func(field, text string, fields ...string) string {
		out, err := driverTemplate(field, text, fields...)
		if err != nil {
			probs = append(probs, recipes.Problem{Path: field, Msg: err.Error()})
		}
		return out
	}
	et := r.Episode.Templates
	var t driverTemplates
	if r.Episode.Type == "tools" {
		t.prompt = tpl("episode.templates.tool_solver", et.ToolSolver, "Problem")
		t.toolResponse = tpl("episode.templates.tool_response", et.ToolResponse, "Output")
	} else {
		t.prompt = tpl("episode.templates.solver", et.Solver, "Problem")
	}
	// sft.response is refused on the same terms when the recipe loads
	// (recipes' checkSFTTemplate); this is for a recipe built otherwise.
	var err error
	if t.answer, err = driverTemplate("sft.response", r.SFT.Response, "Problem", "Answer"); err != nil {
		probs = append(probs, recipes.Problem{Path: "sft.response", Msg: err.Error()})
	}
	switch r.Episode.Type {
	case "mlmt":
		t.static = tpl("episode.templates.static_feedback", et.StaticFeedback, "Problem", "Attempt")
		t.refine = tpl("episode.templates.refine", et.Refine, "Problem", "Attempt", "Feedback")
		if !r.Algorithm.MLMT.StaticFeedback {
			t.feedbackPrompt = tpl("episode.templates.feedback", et.Feedback, "Problem", "Attempt", "Hint")
			if r.SFT.FeedbackResponse != "" {
				t.feedbackAnswer = tpl("sft.feedback_response", r.SFT.FeedbackResponse, "Problem", "Hint", "AnyHint", "Answer", "Attempt")
			}
			if r.SFT.RefineFeedback != "" {
				t.refineFeedback = tpl("sft.refine_feedback", r.SFT.RefineFeedback, "Problem", "Hint", "AnyHint", "Answer", "Attempt")
			}
		}
	case "score":
		t.review = tpl("episode.templates.review", et.Review, "Problem", "Attempt")
	}
	return t, probs
}

// config maps a checked recipe onto the training loop's configuration,
// with out as the run directory. The caller sets Resume, Node, Logger and
// Progress.
//
// checkpoint.keep is not in Config: the caller prunes the
// checkpoints (PruneCheckpoints). deterministic needs nothing more: the
// driver is single-threaded in its sampling and seeded.
func (l recipe) config(out string) (Config, error) {
	r := l.Recipe
	epType := r.Episode.Type
	mlmt, score := epType == "mlmt", epType == "score"
	onVLLM := r.Engines.Policy.Kind == "vllm"
	pol := r.Models.Policy
	fbAlgo := r.Algorithm.MLMT.FeedbackAlgorithm
	a := r.Algorithm
	tpl, _ := l.templates() // checked
	hasFeedback := mlmt && !r.Algorithm.MLMT.StaticFeedback

	lc := learner.DefaultConfig()
	lc.Algorithm = learnerAlgorithms[a.Name]
	// The schedule is the RL phase's, in optimizer steps (epochs ×
	// mini_batches per RL step) counted from the first RL step: the SFT
	// warm-up before it trains at sft.lr.
	perStep := max(1, a.Epochs) * max(1, a.MiniBatches)
	lc.LR, lc.MinLR = a.LR, a.LR
	if a.Schedule == "cosine" {
		lc.MinLR, lc.TotalSteps = a.MinLR, r.Schedule.Steps*perStep
	}
	lc.WarmupSteps = a.Warmup * perStep
	lc.Beta1, lc.Beta2, lc.Eps, lc.WeightDecay = a.AdamBeta1, a.AdamBeta2, a.AdamEps, a.WeightDecay
	lc.MaxGradNorm = a.GradClip
	lc.Loss = policyLossConfig(&a)
	lc.KLInReward = a.KLInReward
	// checkpoint.optimizer false: smaller checkpoints; --resume from one
	// restarts AdamW's moments (the driver warns).
	lc.OmitOptimizer = !r.Checkpoint.Optimizer
	lc.MaxResponseLen = a.MaxTokens
	lc.MicroBatchSeqs = a.MicroBatch
	lc.CheckpointActivations = a.ActivationCheckpointing
	lc.ActivationsBF16 = a.ActivationsBF16
	lc.MiniBatches, lc.Epochs = a.MiniBatches, a.Epochs
	lc.Gamma, lc.Lambda, lc.VFCoef, lc.ValueClip = a.Gamma, a.Lambda, a.ValueCoef, a.ValueClip
	lc.RWBeta = a.RWSFT.Beta
	lc.RWFilter, lc.RWThreshold = a.RWSFT.Weighting == "filter" || a.RWSFT.Weighting == "group_filter", a.RWSFT.Threshold
	// Each trained policy's learner (MLMT: the feedback policy's too) runs
	// as this many ranks of placement.learner each.
	lc.Shards = r.Placement.LearnerShards
	lc.Device = r.Placement.LearnerDevice
	if pol.LoRA != nil {
		// The SFT warm-up trains every weight, the RL steps the adapters.
		c := loraConfig(pol.LoRA, r.Seed)
		lc.LoRA = &c
		lc.LoRAWarmup = r.SFT.LoRA
		lc.LoRAWarmupAfter = r.SFT.BaseSteps
	}

	cfg := Config{
		Out:            out,
		Seed:           r.Seed,
		Learner:        lc,
		VerifyWorkers:  r.Data.VerifyWorkers,
		PromptTemplate: tpl.prompt,
		AnswerTemplate: tpl.answer,
		WarmupSteps:    r.SFT.Steps, WarmupBatch: r.SFT.BatchSize, WarmupLR: r.SFT.LR,
		Steps: r.Schedule.Steps, PromptsPerStep: a.BatchPrompts, GroupSize: a.GroupSize,
		Temperature: a.Temperature, TopP: a.TopP, MaxTokens: a.MaxTokens,
		EvalEvery: r.Schedule.EvalEvery, EvalProblems: r.Eval.HeldOut,
		CheckpointEvery: r.Schedule.CheckpointEvery,
		EngineBatch:     r.Engines.Policy.MaxBatch,
		EngineDevice:    r.Engines.Policy.Device,
	}
	if r.Data.VerifyOn == VerifyOnCluster {
		cfg.VerifyOn = VerifyOnCluster // driver is the Config's ""
	}
	if a.Name == "archer" {
		ar := recipes.DefaultArcher()
		if a.Archer != nil {
			ar = *a.Archer
		}
		cfg.Archer = &Archer{CriticLR: ar.CriticLR, Tau: ar.Tau, Gamma: ar.Gamma, BufferSize: ar.BufferSize,
			CriticUpdates: ar.CriticUpdatesPerStep, CriticBatch: ar.CriticBatchSize, WarmupSteps: ar.WarmupSteps,
			InitFromPolicy: ar.CriticInit == "policy"}
	}
	if a.EntropyTarget != nil {
		ec := &EntropyControl{Target: *a.EntropyTarget, Step: recipes.DefaultEntropyCoefStep, Max: recipes.DefaultEntropyCoefMax}
		if a.EntropyCoefStep != nil {
			ec.Step = *a.EntropyCoefStep
		}
		if a.EntropyCoefMax != nil {
			ec.Max = *a.EntropyCoefMax
		}
		cfg.EntropyControl = ec
	}
	if t := r.SFT.Trajectories; t != "" {
		cfg.WarmupTrajectories = &WarmupTrajectories{Path: t, Weighting: r.SFT.Weighting, Beta: r.SFT.Beta, Threshold: r.SFT.Threshold, BaseSteps: r.SFT.BaseSteps}
	}
	cfg.RWGroupFilter = a.Name == "rw_sft" && a.RWSFT.Weighting == "group_filter"
	if u := r.SFT.Until; u != nil {
		cfg.WarmupUntil = &WarmupUntil{Completion: u.Completion, Every: u.Every, Episodes: u.Episodes}
		if cfg.WarmupUntil.Every == 0 {
			cfg.WarmupUntil.Every = recipes.DefaultUntilEvery
		}
		if cfg.WarmupUntil.Episodes == 0 {
			cfg.WarmupUntil.Episodes = recipes.DefaultUntilEpisodes
		}
	}
	if c := r.SFT.Collect; c != nil {
		cfg.WarmupTrajectories = &WarmupTrajectories{Collect: &WarmupCollect{Teacher: c.Teacher, Random: c.Random},
			Weighting: r.SFT.Weighting, Beta: r.SFT.Beta, Threshold: r.SFT.Threshold, BaseSteps: r.SFT.BaseSteps}
	}
	if r.Eval.Temperature > 0 { // greedy is the driver's zero value (samples > 1 refused by validation)
		cfg.EvalSampling = EvalSampling{Samples: r.Eval.Samples, Temperature: r.Eval.Temperature, PassK: r.Eval.PassK}
	}
	if v := r.Data.Verifier; v != "math" { // math is the driver's ""
		cfg.Verifier = v
	}
	if t := r.Data.Task; t != nil {
		cfg.Task = taskConfig(t)
	}
	if ds := r.Data.Dataset; ds != nil {
		cfg.Dataset = &Dataset{Train: ds.Train, Eval: ds.Eval, Epochs: ds.Epochs, Mapping: columnsMapping(ds.Columns), HintColumn: ds.Columns.Hint, GroupBy: r.Eval.GroupBy}
		if ec := ds.EvalColumns; ec != nil {
			m := columnsMapping(evalColumns(ds.Columns, *ec))
			cfg.Dataset.EvalMapping = &m
		}
	}
	if tr := r.Data.Traces; tr != nil {
		cfg.Traces = traceData(tr, r.SFT)
	}
	if epType != "single" {
		cfg.Episode = epType
	}
	if ag := r.Episode.Agent; epType == "agent" && ag != nil {
		cfg.Agent = &AgentConfig{Env: ag.Env, MaxSteps: ag.MaxSteps, Returns: ag.Returns, Gamma: ag.Gamma, Template: ag.Template,
			URL: ag.URL, Timeout: time.Duration(ag.TimeoutSeconds * float64(time.Second)), Retries: ag.Retries}
	}
	if epType == "tools" {
		cfg.ToolResponseTemplate, cfg.MaxToolCalls = tpl.toolResponse, r.Episode.MaxToolCalls
		cfg.Calculator = slices.Contains(r.Episode.Tools, "calculator")
		cfg.PythonTool = slices.Contains(r.Episode.Tools, "python")
	}
	if mlmt {
		m := r.Algorithm.MLMT
		cfg.StaticFeedbackTemplate, cfg.RefineTemplate = tpl.static, tpl.refine
		cfg.StopGradient, cfg.FeedbackReward = m.StopGradient, m.FeedbackReward
		cfg.FreezeSolver = !slices.Contains(m.Train, "solver") // the feedback policy alone (validated)
		if m.RefineReward == "shaped" {
			cfg.ShapeRefine, cfg.ScoreAlpha = true, r.Algorithm.Score.Alpha
		}
		if h, l, err := recipes.ParseUpdateRatio(m.UpdateRatio); err == nil && h > 0 {
			cfg.UpdateRatio = [2]int{h, l}
		}
		cfg.SharedWeights = m.SharedWeights
		if ac := r.Algorithm.TextualAC; ac != nil {
			cfg.TextualAC = &rl.ContextRewardConfig{ConfidenceCoef: ac.ConfidenceCoef, DependenceCoef: ac.DependenceCoef}
		}
	}
	if hasFeedback {
		cfg.FeedbackTemplate, cfg.FeedbackAnswerTemplate = tpl.feedbackPrompt, tpl.feedbackAnswer
		cfg.RefineFeedbackTemplate = tpl.refineFeedback
		fb := &FeedbackPolicy{Train: slices.Contains(r.Algorithm.MLMT.Train, "feedback"),
			Algorithm: learnerAlgorithms[fbAlgo], LR: r.Algorithm.MLMT.FeedbackLR}
		if bl := r.Algorithm.BiLevel; bl != nil {
			cfg.BiLevel = &BiLevel{ValueCoef: bl.ValueCoef, ValueLossCoef: bl.ValueLossCoef,
				StopValueGradients: bl.StopValueGradients, TrainGuidance: bl.TrainGuidanceModel, GuidanceKLCoef: bl.GuidanceKLCoef}
			if bl.GuidanceLR > 0 {
				fb.LR = bl.GuidanceLR
			}
		}
		src, field := r.Models.Feedback, "models.feedback"
		if src == nil { // a separate copy of the policy's initial weights
			src, field = &r.Models.Policy, "models.policy"
		}
		if src.Path != "" {
			fb.ModelDir = src.Path
		} else {
			mc, err := modelConfig(src.Init)
			if err != nil {
				return Config{}, fmt.Errorf("recipe %s: %s.init: %w", l.Source, field, err)
			}
			fb.Model = mc
		}
		if lo := l.feedbackLoRA(); lo != nil {
			c := loraConfig(lo, r.Seed+1)
			fb.LoRA = &c
		}
		cfg.Feedback = fb
	}
	if score {
		cfg.ReviewTemplate, cfg.ScoreAlpha = tpl.review, r.Algorithm.Score.Alpha
	}
	if sc := r.Algorithm.Score; sc.Stage1Steps > 0 && (score || cfg.ShapeRefine) {
		cfg.ScoreStage1Steps, cfg.ScoreStage1KLCoef = sc.Stage1Steps, sc.Stage1KLCoef
	}
	if cfg.TopP == 1 {
		cfg.TopP = 0 // the driver's "off"
	}
	if cfg.EvalEvery == 0 {
		// The recipe's 0 is "only after the last step"; the driver's 0 is
		// "never". Every warm-up+RL steps evaluates after the warm-up and
		// after the last step.
		cfg.EvalEvery = max(1, r.SFT.Steps+r.Schedule.Steps)
	}
	if pol.Path != "" {
		cfg.ModelDir = pol.Path
	} else {
		mc, err := modelConfig(pol.Init)
		if err != nil {
			return Config{}, fmt.Errorf("recipe %s: models.policy.init: %w", l.Source, err)
		}
		cfg.Model = mc
	}
	if ref := r.Models.Reference; ref != nil {
		// The solver's KL reference, loaded by every rank of its learner
		// (Check checks it against the policy).
		cfg.Learner.RefModelDir = ref.Path
	}
	res := cluster.Resources{}
	if c := r.Placement.Learner.CPUs; c > 0 {
		res[cluster.CPU] = c
	}
	if g := r.Placement.Learner.GPUs; g > 0 {
		res[cluster.GPU] = g
	}
	maps.Copy(res, r.Placement.Learner.Custom)
	if m := r.Placement.Learner.Memory; m != "" {
		b, err := cluster.ParseSize(m)
		if err != nil {
			return Config{}, fmt.Errorf("recipe %s: placement.learner.memory: %w", l.Source, err)
		}
		res[cluster.Memory] = float64(b)
	}
	if len(res) > 0 {
		cfg.LearnerResources = res
	}
	if onVLLM {
		var err error
		if cfg.VLLM, err = driverVLLM(r.Engines.Policy.VLLM, r.Models.Policy.Path); err != nil {
			return Config{}, fmt.Errorf("recipe %s: engines.policy.vllm: %w", l.Source, err)
		}
		if fb := r.Engines.Feedback; fb != nil && fb.Kind == "vllm" && cfg.Feedback != nil {
			served := r.Models.Policy.Path
			if m := r.Models.Feedback; m != nil {
				served = m.Path
			}
			if cfg.FeedbackVLLM, err = driverVLLM(fb.VLLM, served); err != nil {
				return Config{}, fmt.Errorf("recipe %s: engines.feedback.vllm: %w", l.Source, err)
			}
		}
	} else if l.needsRolloutActors() {
		cfg.Rollout, cfg.FeedbackRollout = l.rolloutPlacement(cfg.Feedback != nil)
	}
	if r.Sync.Mode == "async" {
		cfg.MaxStaleness = r.Sync.MaxStaleness
	}
	return cfg, nil
}

// feedbackLoRA is the LoRA section of MLMT's feedback policy: its own
// model's, or the policy's when it starts as a copy of the policy.
func (l recipe) feedbackLoRA() *recipes.LoRA {
	if fb := l.Recipe.Models.Feedback; fb != nil {
		return fb.LoRA
	}
	return l.Recipe.Models.Policy.LoRA
}

// needsRolloutActors is the rule for generating on rollout actors rather
// than in the driver's process: more than one engine replica, split
// placement, asynchronous sync, or rollout resources other than the
// default 1 CPU. The embedded default (one replica, colocated, sync)
// keeps the faster in-process engine; `rlnode run --address` puts
// generation on the cluster whatever the recipe (RolloutPlacement).
func (l recipe) needsRolloutActors() bool {
	r := l.Recipe
	rr := r.Placement.Rollout
	fbReplicas := 1
	if r.Engines.Feedback != nil {
		fbReplicas = r.Engines.Feedback.Replicas
	}
	return r.Engines.Policy.Replicas > 1 || fbReplicas > 1 || r.Placement.Mode == "split" || r.Sync.Mode == "async" ||
		rr.CPUs != 1 || rr.GPUs != 0 || len(rr.Custom) > 0 || rr.Memory != ""
}

// RolloutPlacement is where the recipe puts the rollout actors of the
// policy and, with feedback, of MLMT's feedback policy: engines.*.replicas
// actors each reserving placement.rollout, reserved up front in a
// placement group spread over the nodes when placement.mode is split.
func (l recipe) rolloutPlacement(feedback bool) (policy, fb *Rollout) {
	r := l.Recipe
	rr := r.Placement.Rollout
	res := cluster.Resources{} // empty: the actors reserve nothing
	if rr.CPUs > 0 {
		res[cluster.CPU] = rr.CPUs
	}
	if rr.GPUs > 0 {
		res[cluster.GPU] = rr.GPUs
	}
	maps.Copy(res, rr.Custom)
	if rr.Memory != "" {
		if b, err := cluster.ParseSize(rr.Memory); err == nil { // validated
			res[cluster.Memory] = float64(b)
		}
	}
	split := r.Placement.Mode == "split"
	policy = &Rollout{Replicas: r.Engines.Policy.Replicas, Resources: res, Spread: split}
	if feedback {
		n := r.Engines.Policy.Replicas
		if r.Engines.Feedback != nil {
			n = r.Engines.Feedback.Replicas
		}
		fb = &Rollout{Replicas: n, Resources: maps.Clone(res), Spread: split}
	}
	return policy, fb
}

// driverTemplate turns a recipe template over the given fields into the
// driver's, where .Problem is .Question, by renaming the field in the
// parsed template (not in the text). A field outside fields, and anything
// that could run unbounded, is refused (tmpl.Check).
func driverTemplate(field, text string, fields ...string) (string, error) {
	t, err := tmpl.Parse(field, text, fields...)
	if err != nil {
		return "", err
	}
	tmpl.Walk(t.Tree.Root, func(n tparse.Node) bool {
		switch n := n.(type) {
		case *tparse.FieldNode:
			if n.Ident[0] == "Problem" {
				n.Ident[0] = "Question"
			}
		case *tparse.VariableNode:
			if len(n.Ident) > 1 && n.Ident[0] == "$" && n.Ident[1] == "Problem" {
				n.Ident[1] = "Question"
			}
		}
		return true
	})
	// Printed back node by node: a text node next to an action is quoted
	// as {{"text"}}, since `\boxed{` followed by `{{.Answer}}` would read
	// as `{{{`.
	var sb strings.Builder
	for _, n := range t.Tree.Root.Nodes {
		if tn, ok := n.(*tparse.TextNode); ok && strings.ContainsAny(string(tn.Text), "{}") {
			sb.WriteString("{{" + strconv.Quote(string(tn.Text)) + "}}")
			continue
		}
		sb.WriteString(n.String())
	}
	return sb.String(), nil
}

// Checkpoints returns the run directory's checkpoints (out/checkpoints/
// step-N), oldest first.
func Checkpoints(out string) ([]string, error) {
	dir := filepath.Join(out, "checkpoints")
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	type ck struct {
		step int
		path string
	}
	var cks []ck
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "step-")
		step, err := strconv.Atoi(n)
		if !e.IsDir() || !ok || err != nil || step < 0 {
			continue
		}
		cks = append(cks, ck{step, filepath.Join(dir, e.Name())})
	}
	sort.Slice(cks, func(i, j int) bool { return cks[i].step < cks[j].step })
	paths := make([]string, len(cks))
	for i, c := range cks {
		paths[i] = c.path
	}
	return paths, nil
}

// PruneCheckpoints removes all but the newest keep checkpoints of the run
// directory (checkpoint.keep); keep 0 keeps all.
func PruneCheckpoints(out string, keep int) error {
	if keep <= 0 {
		return nil
	}
	cks, err := Checkpoints(out)
	if err != nil {
		return err
	}
	for len(cks) > keep {
		if err := os.RemoveAll(cks[0]); err != nil {
			return fmt.Errorf("prune checkpoint: %w", err)
		}
		cks = cks[1:]
	}
	return nil
}

// driverVLLM maps an engine's vllm section onto the driver's; a launch
// serves model, the policy's model folder.
func driverVLLM(v *recipes.VLLM, model string) (*VLLM, error) {
	d := &VLLM{Servers: v.Servers, Model: v.Model, MaxInFlight: v.MaxInFlight, WeightUpdate: v.WeightUpdate}
	if v.APIKeyEnv != "" {
		d.APIKey = os.Getenv(v.APIKeyEnv)
	}
	if l := v.Launch; l != nil {
		abs, err := filepath.Abs(model)
		if err != nil {
			return nil, err
		}
		d.Launch = &vllm.Launch{Servers: l.Count, GPUs: l.GPUs, LaunchArgs: vllm.LaunchArgs{Model: abs, Args: l.Args,
			StartTimeoutMs: int64(l.StartTimeoutSeconds * 1000)}}
	}
	return d, nil
}

// refuseVLLM reports what a recipe with engines.policy.kind vllm asks for
// that the driver's vLLM engine cannot do. The driver talks to the servers
// from its own process (VLLM): rollout actors and their placement
// do not apply; MLMT's trainable feedback policy needs servers of its own
// (engines.feedback, refuseFeedbackVLLM).
func (l recipe) refuseVLLM(no func(field, format string, args ...any)) {
	r := l.Recipe
	e := r.Engines.Policy
	if e.VLLM == nil {
		return // validation asks for it
	}
	// Every weight sync is supported: full and reload send the learner's
	// checkpoint, reloaded by every server; lora the adapter, loaded in
	// place by every server (VLLMLoRAName).
	if e.WeightSync != "lora" && r.Models.Policy.LoRA != nil {
		no("engines.policy.weight_sync", "%s with models.policy.lora is not supported with kind vllm: use lora (the adapter, loaded in place)", e.WeightSync)
	}
	if r.Sync.Mode == "async" && r.Episode.Type != "single" {
		no("sync.mode", "async on vllm engines is for single-turn episodes (episode.type is %s); asynchronous multi-turn runs use native engines on rollout actors", r.Episode.Type)
	}
	if e.VLLM.APIKeyEnv != "" && os.Getenv(e.VLLM.APIKeyEnv) == "" {
		no("engines.policy.vllm.api_key_env", "$%s is unset or empty: a key that is not there is not supported", e.VLLM.APIKeyEnv)
	}
	rr := r.Placement.Rollout
	switch {
	case e.Replicas > 1:
		no("engines.policy.replicas", "%d is not supported with kind vllm: the servers are the replicas (the driver's client spreads requests over engines.policy.vllm.servers); list more servers and set 1", e.Replicas)
	case r.Placement.Mode == "split" || rr.CPUs != 1 || rr.GPUs != 0 || len(rr.Custom) > 0 || rr.Memory != "":
		no("placement", "rollout actors (placement.mode split or placement.rollout resources) are not supported with vllm engines: the servers run outside rlnode")
	}
	if r.Episode.Type == "mlmt" && !r.Algorithm.MLMT.StaticFeedback && (r.Engines.Feedback == nil || r.Engines.Feedback.Kind != "vllm") {
		no("engines.feedback", "with engines.policy.kind vllm the trainable feedback policy needs vLLM servers of its own: set engines.feedback.kind vllm and engines.feedback.vllm (or use static feedback)")
	}
}

// refuseFeedbackVLLM reports what engines.feedback with kind vllm (MLMT's
// trainable feedback policy on servers of its own) asks for that the
// driver cannot do.
func (l recipe) refuseFeedbackVLLM(no func(field, format string, args ...any)) {
	r := l.Recipe
	e := r.Engines.Feedback
	if e.VLLM == nil {
		return // validation asks for it
	}
	switch e.WeightSync {
	case "full", "reload":
	default:
		no("engines.feedback.weight_sync", "%s is not supported with kind vllm (full or reload)", e.WeightSync)
	}
	if e.VLLM.APIKeyEnv != "" && os.Getenv(e.VLLM.APIKeyEnv) == "" {
		no("engines.feedback.vllm.api_key_env", "$%s is unset or empty: a key that is not there is not supported", e.VLLM.APIKeyEnv)
	}
	if l.feedbackLoRA() != nil {
		no("models.feedback.lora", "a LoRA feedback policy on vllm engines is not supported yet (the solver's LoRA is: engines.policy.weight_sync lora)")
	}
	if e.Replicas > 1 {
		no("engines.feedback.replicas", "%d is not supported with kind vllm: the servers are the replicas; list more servers and set 1", e.Replicas)
	}
	if p := r.Engines.Policy.VLLM; p != nil {
		for _, u := range e.VLLM.Servers {
			if slices.Contains(p.Servers, u) {
				no("engines.feedback.vllm.servers", "%s serves the policy too (engines.policy.vllm.servers): a server holds one policy's weights", u)
			}
		}
	}
}
