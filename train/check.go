package train

import (
	"context"
	"reflect"
	"slices"

	"github.com/rlnode/rlnode/internal/tmpl"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/vllm"
)

// Check reports everything about a loaded recipe that a run would refuse
// before it starts: what the learner's and rollout's own packages refuse
// in its model, task, templates and loss; what the training loop cannot
// run yet (refusals); a KL reference that does not fit the policy; and,
// as a last net, what the driver's Config.validate refuses. The result is
// recipes.Errors, each "FILE:LINE: field.path: message". rlnode recipe
// validate, sbatch, run and eval call it; FromRecipe refuses exactly what
// it refuses. Whether this host has the GPUs the recipe names is
// CheckHost's.
func Check(l *recipes.Loaded) error {
	rc := recipe{l}
	probs := append(rc.packageChecks(), rc.refusals()...)
	if len(probs) == 0 {
		probs = rc.configChecks()
	}
	return l.Refuse(probs)
}

// CheckHost reports what of a recipe that passes Check cannot run on
// this host: a learner or native engine on a GPU (placement.learner_device,
// engines.policy.device) where the CUDA backend cannot run, with its
// reasons, as recipes.Errors at the fields' lines. A run in this process
// (rlnode run without --address, rlnode eval) calls it; validation and
// sbatch do not, since the GPUs are on other hosts (a Slurm login node,
// the cluster's nodes), where the learner or engine fails to start with
// the same reason.
func CheckHost(l *recipes.Loaded) error {
	r := l.Recipe
	var probs []recipes.Problem
	for _, d := range []struct{ path, device string }{
		{"placement.learner_device", r.Placement.LearnerDevice},
		{"engines.policy.device", r.Engines.Policy.Device},
	} {
		if err := learner.CheckDevice(d.device); err != nil {
			probs = append(probs, recipes.Problem{Path: d.path, Msg: err.Error()})
		}
	}
	return l.Refuse(probs)
}

// packageChecks are the checks of the packages a recipe section becomes
// (learner/model, rollout/task, rollout/episode, learner/rl,
// learner/optim), on their own configurations.
func (l recipe) packageChecks() []recipes.Problem {
	r := l.Recipe
	var probs []recipes.Problem
	add := func(path string, err error) {
		if err != nil {
			probs = append(probs, recipes.Problem{Path: path, Msg: err.Error()})
		}
	}
	for _, m := range []struct {
		path string
		m    *recipes.Model
	}{{"models.policy", &r.Models.Policy}, {"models.feedback", r.Models.Feedback}, {"models.reference", r.Models.Reference}} {
		if m.m != nil && m.m.Init != nil {
			_, err := modelConfig(m.m.Init)
			add(m.path+".init", err)
		}
	}
	if t := r.Data.Task; t != nil {
		_, err := task.New(taskConfig(t))
		add("data.task", err)
	}
	for _, e := range []struct {
		path string
		e    *recipes.Engine
	}{{"engines.policy", &r.Engines.Policy}, {"engines.feedback", r.Engines.Feedback}} {
		if e.e == nil || e.e.VLLM == nil || e.e.VLLM.Launch == nil {
			continue
		}
		if p := r.Engines.Policy.VLLM; e.path == "engines.feedback" && p != nil && p.Launch != nil && slices.Equal(p.Launch.Args, e.e.VLLM.Launch.Args) {
			continue // the policy's, copied (or the same): said once
		}
		add(e.path+".vllm.launch.args", vllm.CheckLaunchArgs(e.e.VLLM.Launch.Args))
	}
	// One template at a time, the others at their (valid) defaults, so that
	// each problem is reported at its own template's line.
	// The driver parses the templates the episode type renders, with each
	// turn's own fields (refusals); a template that fails to parse even
	// with every field rollout/episode knows is refused there already,
	// naming its turn's fields, and is not reported a second time here.
	_, driverProbs := l.templates()
	driverRefused := map[string]bool{}
	for _, p := range driverProbs {
		driverRefused[p.Path] = true
	}
	et := r.Episode.Templates
	for _, f := range []struct {
		key  string
		text string
		set  func(*recipes.Templates, string)
	}{
		{"solver", et.Solver, func(t *recipes.Templates, s string) { t.Solver = s }},
		{"feedback", et.Feedback, func(t *recipes.Templates, s string) { t.Feedback = s }},
		{"static_feedback", et.StaticFeedback, func(t *recipes.Templates, s string) { t.StaticFeedback = s }},
		{"refine", et.Refine, func(t *recipes.Templates, s string) { t.Refine = s }},
		{"review", et.Review, func(t *recipes.Templates, s string) { t.Review = s }},
		{"tool_solver", et.ToolSolver, func(t *recipes.Templates, s string) { t.ToolSolver = s }},
		{"tool_response", et.ToolResponse, func(t *recipes.Templates, s string) { t.ToolResponse = s }},
	} {
		one := recipes.DefaultTemplates()
		f.set(&one, f.text)
		validate := episodeTemplates(one).Validate
		if r.Algorithm.TextualAC != nil {
			validate = episodeTemplates(one).ValidateContextFirst
		}
		path := "episode.templates." + f.key
		err := validate()
		if err != nil && driverRefused[path] {
			if _, perr := tmpl.Parse(path, f.text, episodeFields...); perr != nil {
				err = nil
			}
		}
		add(path, err)
	}
	add("algorithm", policyLossConfig(&r.Algorithm).Validate())
	add("algorithm", lrSchedule(&r.Algorithm, r.Schedule.Steps).Validate())
	return probs
}

// episodeFields are the fields rollout/episode's templates may use: those
// of episode.TemplateData, read from the type so the two cannot drift.
var episodeFields = func() []string {
	var names []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[episode.TemplateData]()) {
		names = append(names, f.Name)
	}
	return names
}()

// configChecks convert a recipe that passed the other checks and check
// what needs the converted configuration: the KL reference against the
// policy, the learners' configurations, and the driver's own
// Config.validate (a refusal there that no check above makes is reported
// on the recipe as a whole).
func (l recipe) configChecks() []recipes.Problem {
	// The run directory is not known here and not read by the checks.
	cfg, err := l.config("OUT")
	if err != nil {
		return []recipes.Problem{{Msg: err.Error()}}
	}
	if ref := l.Recipe.Models.Reference; ref != nil {
		if err := learner.CheckReference(cfg.ModelDir, cfg.Model, ref.Path); err != nil {
			return []recipes.Problem{{Path: "models.reference.path", Msg: err.Error()}}
		}
	}
	// The learners' own checks, on the algorithm section they are made
	// from, before the driver's.
	lc := cfg.Learner
	lc.Model, lc.ModelDir, lc.Seed = cfg.Model, cfg.ModelDir, cfg.Seed
	if err := lc.Validate(); err != nil {
		return []recipes.Problem{{Path: "algorithm", Msg: err.Error()}}
	}
	if f := cfg.Feedback; f != nil {
		if err := f.learnerConfig(cfg).Validate(); err != nil {
			return []recipes.Problem{{Path: "algorithm.mlmt", Msg: "feedback policy: " + err.Error()}}
		}
	}
	// A LoRA rank against the dimensions of a model read from its folder
	// (recipes checks a models.*.init's).
	if err := lc.CheckLoRARank(); err != nil {
		return []recipes.Problem{{Path: "models.policy.lora.rank", Msg: err.Error()}}
	}
	if f := cfg.Feedback; f != nil && l.Recipe.Models.Feedback != nil {
		if err := f.learnerConfig(cfg).CheckLoRARank(); err != nil {
			return []recipes.Problem{{Path: "models.feedback.lora.rank", Msg: err.Error()}}
		}
	}
	tpl, err := cfg.validate()
	if err != nil {
		return []recipes.Problem{{Msg: err.Error()}}
	}
	fbModel := "models.feedback"
	if l.Recipe.Models.Feedback == nil {
		fbModel = "models.policy" // the feedback policy is a copy of it
	}
	if field, err := checkContext(cfg, tpl, fbModel); err != nil {
		return []recipes.Problem{{Path: field, Msg: err.Error()}}
	}
	if cfg.Traces != nil {
		if _, err := readTraces(cfg); err != nil {
			return []recipes.Problem{{Path: traceField(err), Msg: err.Error()}}
		}
	}
	if w := cfg.WarmupTrajectories; w != nil {
		if _, err := readTrajectories(context.Background(), cfg, tpl, w); err != nil {
			field := "sft.trajectories"
			if w.Collect != nil {
				field = "sft.collect"
			}
			return []recipes.Problem{{Path: field, Msg: err.Error()}}
		}
	}
	return nil
}
