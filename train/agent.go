package train

// Agent episodes: the policy acts in a built-in environment
// (rollout/env) through rollout/episode's Agent, one turn per step. The
// environment gives the tasks (its train split for training, its
// held-out split for evaluation); the warm-up is SFT on its scripted
// teacher's steps; each step's reward becomes an advantage here, per the
// recipe's returns, before the turns become the learner's batch
// (trajectory.go).

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/rlnode/rlnode/internal/tmpl"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/env"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

// AgentConfig is how an agent episode runs (Config.Agent, with Episode
// EpisodeAgent).
type AgentConfig struct {
	// Env is the built-in environment (rollout/env.New: equations,
	// calculator, multiply, guess).
	Env string
	// MaxSteps bounds an episode's steps; the environment ends the
	// episode at this step (outcome step_limit). 1..MaxAgentSteps.
	MaxSteps int
	// Returns is what each step's tokens are credited with:
	// ReturnsEpisode, the episode's total reward (every step alike), or
	// ReturnsDiscounted, the step's return G_t = r_t + γ·G_{t+1}.
	Returns string
	// Gamma is γ of discounted returns, in [0, 1].
	Gamma float64
	// Template is a step's prompt, plain text in the model's format, over
	// AgentTemplateData.
	Template string
	// URL, Timeout and Retries are the server of Env "http" (env.Spec);
	// its tasks are the seeds of env.TaskTrain and env.TaskHeldOut, as
	// the built-in environments', and it has no teacher.
	URL     string
	Timeout time.Duration
	Retries int
}

// EnvHTTP is AgentConfig.Env of an environment served over HTTP.
const EnvHTTP = "http"

// newEnv makes one environment of a validated config: a built-in one
// bounded to MaxSteps, or an HTTP one (the episode bounds its steps).
func (a *AgentConfig) newEnv() env.Env {
	if a.Env == EnvHTTP {
		mk, _ := env.Open(env.Spec{Name: EnvHTTP, URL: a.URL, Timeout: a.Timeout, Retries: a.Retries})
		return mk()
	}
	e, _ := env.New(a.Env, a.MaxSteps)
	return e
}

// Returns of an agent episode.
const (
	ReturnsEpisode    = "episode"
	ReturnsDiscounted = "discounted"
)

// MaxAgentSteps bounds AgentConfig.MaxSteps.
const MaxAgentSteps = 64

// AgentTemplateData is what an agent step's template sees: the latest
// observation, the valid actions as written (name or name(param),
// joined by ", "), the actions taken so far (joined by ", "; "none"
// before the first) and the step (0-based).
type AgentTemplateData struct {
	Observation, Actions, Taken string
	Step                        int
}

// AgentTemplateFields are the fields an agent template may use.
var AgentTemplateFields = []string{"Observation", "Actions", "Taken", "Step"}

func (a *AgentConfig) validate() (*template.Template, error) {
	if a == nil {
		return nil, fmt.Errorf("train config: agent: episode agent needs its settings")
	}
	if a.Env == EnvHTTP {
		if _, err := env.Open(env.Spec{Name: EnvHTTP, URL: a.URL, Timeout: a.Timeout, Retries: a.Retries}); err != nil {
			return nil, fmt.Errorf("train config: agent.url: %w", err)
		}
		if a.Timeout < 0 {
			return nil, fmt.Errorf("train config: agent.timeout %v: want ≥ 0", a.Timeout)
		}
	} else if _, err := env.New(a.Env, 0); err != nil {
		return nil, fmt.Errorf("train config: agent.env: %w", err)
	} else if a.URL != "" {
		return nil, fmt.Errorf("train config: agent.url: for env %s only (env is %q)", EnvHTTP, a.Env)
	}
	switch {
	case a.MaxSteps < 1 || a.MaxSteps > MaxAgentSteps:
		return nil, fmt.Errorf("train config: agent.max_steps %d: want 1..%d", a.MaxSteps, MaxAgentSteps)
	case math.IsNaN(a.Gamma) || a.Gamma < 0 || a.Gamma > 1:
		return nil, fmt.Errorf("train config: agent.gamma %v: want 0..1", a.Gamma)
	case a.Returns != ReturnsEpisode && a.Returns != ReturnsDiscounted:
		return nil, fmt.Errorf("train config: agent.returns %q: want %s or %s", a.Returns, ReturnsEpisode, ReturnsDiscounted)
	case !strings.Contains(a.Template, ".Observation"):
		return nil, fmt.Errorf("train config: agent.template %q: must use .Observation", a.Template)
	}
	t, err := tmpl.Parse("agent.template", a.Template, AgentTemplateFields...)
	if err != nil {
		return nil, fmt.Errorf("train config: agent.template: %w", err)
	}
	if _, err := tmpl.Execute(t, AgentTemplateData{Observation: "o", Actions: "a", Taken: "t"}, tmpl.MaxOutput); err != nil {
		return nil, fmt.Errorf("train config: agent.template: %w", err)
	}
	return t, nil
}

// agentPrompter renders agent steps with the run's template.
type agentPrompter struct{ t *template.Template }

func (p agentPrompter) AgentPrompt(v episode.AgentView) (string, error) {
	return tmpl.Execute(p.t, agentData(v), tmpl.MaxOutput)
}

func agentData(v episode.AgentView) AgentTemplateData {
	acts := make([]string, len(v.Observation.Actions))
	for i, a := range v.Observation.Actions {
		acts[i] = a.Usage()
	}
	taken := "none"
	if len(v.Taken) > 0 {
		taken = strings.Join(v.Taken, ", ")
	}
	return AgentTemplateData{Observation: v.Observation.Text, Actions: strings.Join(acts, ", "), Taken: taken, Step: v.Step}
}

// agentRunner is the agent episode of the run's environment.
func agentRunner(cfg *Config, tpl *compiled, solver episode.Policy) episode.Runner {
	ac := cfg.Agent
	return &episode.Agent{
		Policy: solver,
		NewEnv: ac.newEnv, // validated

		MaxSteps: ac.MaxSteps,
		Seed:     int64(cfg.Seed),
		Limits:   quoteLimits,
		Prompter: agentPrompter{tpl.agent},
	}
}

// AgentEpisode is the agent episode a run of cfg (an agent recipe's, from
// FromRecipe) plays, with policy acting: the recipe's step template
// (episode.agent.template), step bound, quote limits, seed and
// environment; newEnv, when set, makes the environments in place of the
// recipe's. rlnode env rollout plays a run's checkpoint with it, on the
// prompts the checkpoint was trained on.
func AgentEpisode(cfg Config, policy episode.Policy, newEnv func() env.Env) (*episode.Agent, error) {
	if cfg.Episode != EpisodeAgent {
		return nil, fmt.Errorf("episode type %s, not %s: the recipe plays no environment", cfg.Episode, EpisodeAgent)
	}
	t, err := cfg.Agent.validate()
	if err != nil {
		return nil, err
	}
	ag := agentRunner(&cfg, &compiled{agent: t}, policy).(*episode.Agent)
	if newEnv != nil {
		ag.NewEnv = newEnv
	}
	return ag, nil
}

// envSource is the problem source of agent runs: training problem i is
// the environment's train split with seed Seed + i, held-out problem j its
// held-out split with seed Seed + j (the agent episode seeds each
// episode with Seed + its group id: the data cursor in training, the
// problem's index in evaluation).
type envSource struct{}

func (envSource) train(i int) (task.Problem, error) {
	return task.Problem{ID: fmt.Sprintf("train/%d", i), Kind: "env", Question: env.TaskTrain}, nil
}

func (envSource) heldOut(n int) ([]task.Problem, error) {
	out := make([]task.Problem, n)
	for j := range out {
		out[j] = task.Problem{ID: fmt.Sprintf("heldout/%d", j), Kind: "env", Question: env.TaskHeldOut}
	}
	return out, nil
}

func (envSource) reference(task.Problem) verify.Reference { return verify.Reference{} }
func (envSource) anyHint(task.Problem) string             { return "" }

// teacherStep is one step of a scripted teacher's episode: the prompt the
// policy would see and the action the teacher took, as the policy writes
// it.
type teacherStep struct{ prompt, target string }

// teacherEpisode plays the environment's teacher on split task with seed
// and returns its steps.
func teacherEpisode(ctx context.Context, ac *AgentConfig, tpl *template.Template, seed int64, split string) ([]teacherStep, error) {
	e, err := env.New(ac.Env, ac.MaxSteps)
	if err != nil {
		return nil, err
	}
	obs, err := e.Reset(ctx, seed, split)
	if err != nil {
		return nil, fmt.Errorf("env %s: %w", ac.Env, err)
	}
	p := agentPrompter{tpl}
	var steps []teacherStep
	var taken []string
	for k := range ac.MaxSteps {
		a, err := e.Teach()
		if err != nil {
			return nil, fmt.Errorf("env %s seed %d: teacher at step %d: %w", ac.Env, seed, k, err)
		}
		prompt, err := p.AgentPrompt(episode.AgentView{Step: k, Observation: obs, Taken: taken})
		if err != nil {
			return nil, err
		}
		steps = append(steps, teacherStep{prompt, a.Text()})
		r, err := e.Step(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("env %s seed %d: step %d (%s): %w", ac.Env, seed, k, a, err)
		}
		if r.Done {
			break
		}
		obs, taken = r.Observation, append(taken, a.String())
	}
	return steps, nil
}

// warmupStepAgent is one SFT step on the scripted teacher's episodes of
// WarmupBatch training problems: every step's prompt with the teacher's
// action as the target.
func (r *run) warmupStepAgent(ctx context.Context) (Metrics, error) {
	cfg := r.cfg
	eos, err := endOfText(r.solver.tok)
	if err != nil {
		return Metrics{}, err
	}
	t0 := time.Now()
	var b learner.Batch
	for range cfg.WarmupBatch {
		seed := int64(cfg.Seed) + int64(r.cursor)
		if _, err := r.nextTrain(); err != nil {
			return Metrics{}, err
		}
		steps, err := teacherEpisode(ctx, cfg.Agent, r.tpl.agent, seed, env.TaskTrain)
		if err != nil {
			return Metrics{}, fmt.Errorf("warm-up: %w", err)
		}
		for _, s := range steps {
			b.Prompts = append(b.Prompts, toInt32(r.solver.tok.Encode(s.prompt)))
			b.Responses = append(b.Responses, append(toInt32(r.solver.tok.Encode(s.target)), int32(eos)))
		}
	}
	return r.warmupTrain(ctx, b, t0)
}

// agentContext is checkContext for agent runs: the teacher's steps of the
// first training problems, prompt and target, must fit the policy's
// context.
func agentContext(cfg Config, tpl *compiled, pc *policyContext) (string, error) {
	for i := range contextProbes {
		steps, err := teacherEpisode(context.Background(), cfg.Agent, tpl.agent, int64(cfg.Seed)+int64(i), env.TaskTrain)
		if err != nil {
			return "", nil // the run reports it
		}
		for k, s := range steps {
			n, t := len(pc.tok.Encode(s.prompt)), len(pc.tok.Encode(s.target))+1
			if n+t > pc.positions {
				return pc.field, fmt.Errorf("%d positions: env %s train seed %d step %d: the prompt (episode.agent.template) and the teacher's action take %d tokens (%d + %d); raise it or shorten the template",
					pc.positions, cfg.Agent.Env, int64(cfg.Seed)+int64(i), k, n+t, n, t)
			}
		}
	}
	return "", nil
}

// agentTraining is what the learner trains on from an RL step's agent
// turns (each episode's turns together, in turn order, as the Agent
// returns them): a copy of turns in which each turn is credited with its
// value — the episode's total reward (ReturnsEpisode) or the step's
// discounted return (ReturnsDiscounted) — as follows:
//   - grpo, drgrpo and rloo: per-token Advantages from the algorithm's
//     estimator over the group's episodes: with episode returns one value
//     per episode, every turn of it getting its advantage; with
//     discounted returns one value per turn, all turns of the group's
//     episodes forming the group;
//   - ppo, reinforce_pp and rw_sft: Reward is the value; the learner
//     estimates from it (ppo: GAE over the turn's tokens with the
//     critic's values, the value on the turn's last token, so a step's
//     critic target is its return).
//
// Reward is the value in every case (the learner's reward_mean).
func agentTraining(turns []data.Turn, algorithm string, ac *AgentConfig) ([]data.Turn, error) {
	out := slices.Clone(turns)
	values := make([]float64, len(out))
	type span struct{ lo, hi int } // one episode's rows
	var eps []span
	for i := range out {
		if i == 0 || out[i].EpisodeID != out[i-1].EpisodeID {
			eps = append(eps, span{i, i})
		}
		eps[len(eps)-1].hi = i + 1
	}
	switch ac.Returns {
	case ReturnsDiscounted:
		g, err := episode.TurnReturns(out, ac.Gamma)
		if err != nil {
			return nil, err
		}
		copy(values, g)
	default:
		for _, e := range eps {
			var total float64
			for _, t := range out[e.lo:e.hi] {
				total += t.Reward
			}
			if math.IsNaN(total) || math.IsInf(total, 0) {
				return nil, fmt.Errorf("agent returns: episode %s: total reward %v", out[e.lo].EpisodeID, total)
			}
			for i := e.lo; i < e.hi; i++ {
				values[i] = total
			}
		}
	}
	for i := range out {
		out[i].Reward = values[i]
	}
	var estimate func([]float64, int) ([]float64, error)
	switch algorithm {
	case learner.GRPO:
		estimate = rl.GRPOAdvantages
	case learner.DrGRPO:
		estimate = rl.DrGRPOAdvantages
	case learner.RLOO:
		estimate = rl.RLOOAdvantages
	default:
		return out, nil
	}
	// Groups: the episodes of one group id, next to each other.
	for start := 0; start < len(eps); {
		end := start
		for end < len(eps) && out[eps[end].lo].GroupID == out[eps[start].lo].GroupID {
			end++
		}
		group := eps[start:end]
		var adv []float64 // per turn of the group
		if ac.Returns == ReturnsDiscounted {
			lo, hi := group[0].lo, group[len(group)-1].hi
			a, err := estimate(values[lo:hi], hi-lo)
			if err != nil {
				return nil, fmt.Errorf("agent advantages: group %d: %w", out[lo].GroupID, err)
			}
			adv = a
		} else {
			totals := make([]float64, len(group))
			for k, e := range group {
				totals[k] = values[e.lo]
			}
			a, err := estimate(totals, len(totals))
			if err != nil {
				return nil, fmt.Errorf("agent advantages: group %d: %w", out[group[0].lo].GroupID, err)
			}
			for k, e := range group {
				for range e.hi - e.lo {
					adv = append(adv, a[k])
				}
			}
		}
		for k, i := 0, group[0].lo; i < group[len(group)-1].hi; k, i = k+1, i+1 {
			tok := make([]float32, len(out[i].ResponseIDs))
			for j := range tok {
				if out[i].LossMask == nil || out[i].LossMask[j] != 0 {
					tok[j] = float32(adv[k])
				}
			}
			out[i].Advantages = tok
		}
		start = end
	}
	return out, nil
}

// AgentStats are the figures of a set of agent episodes: the share that
// ended solved, actions (turns) per episode, the share of actions the
// environment refused (or that held none), the mean reward per action
// kind (agentStats), and the
// environment's tool calls and failed calls.
type AgentStats struct {
	Episodes          int
	CompletionRate    float64
	ActionsPerEpisode float64
	InvalidActionRate float64
	// MeanReturn is the mean over episodes of the sum of their steps'
	// rewards (undiscounted, whatever the recipe's returns).
	MeanReturn   float64
	ActionReward map[string]float64
	ToolCalls    int
	ToolErrors   int
	// EnvErrors are the steps the environment failed to take (each ended
	// its episode: an HTTP environment's timeout, a malformed answer).
	EnvErrors int
	// SolvedAll and SolvedNone are the shares of groups whose episodes
	// all (none) ended solved.
	SolvedAll, SolvedNone float64
}

// envActions are the names of the actions environment name offers (nil
// for an unknown name).
func envActions(name string) []string {
	e, err := env.New(name, 0)
	if err != nil {
		return nil
	}
	obs, err := e.Reset(context.Background(), 0, env.TaskTrain)
	if err != nil {
		return nil
	}
	var names []string
	for _, a := range obs.Actions {
		names = append(names, a.Name)
	}
	return names
}

// agentStats reads the turns of agent episodes (each episode's turns
// together, in turn order) in an environment offering actions: a turn's
// action kind is its action's name when offered, "other" for any other
// name, "none" when the turn held no action.
func agentStats(turns []data.Turn, actions []string) AgentStats {
	var s AgentStats
	sums, counts := map[string]float64{}, map[string]int{}
	var invalid, groups, allSolved, noneSolved, inGroup, solvedInGroup int
	for i, t := range turns {
		st := episode.AgentStepOf(t)
		kind := st.Action
		switch {
		case kind == "":
			kind = "none"
		case !slices.Contains(actions, kind):
			kind = "other"
		}
		sums[kind] += t.Reward
		counts[kind]++
		s.MeanReturn += t.Reward
		if st.Invalid {
			invalid++
		}
		if st.ToolCall {
			s.ToolCalls++
		}
		if st.ToolError {
			s.ToolErrors++
		}
		if st.EnvError {
			s.EnvErrors++
		}
		last := i+1 == len(turns) || turns[i+1].EpisodeID != t.EpisodeID
		if !last {
			continue
		}
		s.Episodes++
		inGroup++
		if st.Outcome == env.OutcomeSolved {
			s.CompletionRate++
			solvedInGroup++
		}
		if i+1 == len(turns) || turns[i+1].GroupID != t.GroupID {
			groups++
			switch solvedInGroup {
			case inGroup:
				allSolved++
			case 0:
				noneSolved++
			}
			inGroup, solvedInGroup = 0, 0
		}
	}
	if s.Episodes == 0 {
		return s
	}
	s.CompletionRate /= float64(s.Episodes)
	s.MeanReturn /= float64(s.Episodes)
	s.ActionsPerEpisode = float64(len(turns)) / float64(s.Episodes)
	s.InvalidActionRate = float64(invalid) / float64(len(turns))
	s.ActionReward = map[string]float64{}
	for k, v := range sums {
		s.ActionReward[k] = v / float64(counts[k])
	}
	s.SolvedAll, s.SolvedNone = float64(allSolved)/float64(groups), float64(noneSolved)/float64(groups)
	return s
}

// agentSolved is 1 for each episode of turns (each episode's turns
// together) that ended solved, 0 for the others, in episode order.
func agentSolved(turns []data.Turn) []float64 {
	var out []float64
	for i, t := range turns {
		if i+1 == len(turns) || turns[i+1].EpisodeID != t.EpisodeID {
			solved := 0.0
			if episode.AgentStepOf(t).Outcome == env.OutcomeSolved {
				solved = 1
			}
			out = append(out, solved)
		}
	}
	return out
}

// fillRL writes s as an RL step's figures; fillEval as an evaluation's.
func (s AgentStats) fillRL(m *Metrics) {
	m.CompletionRate, m.ActionsPerEpisode, m.InvalidActionRate = ptr(s.CompletionRate), ptr(s.ActionsPerEpisode), ptr(s.InvalidActionRate)
	m.ActionReward, m.ToolCalls, m.ToolErrors = s.ActionReward, ptr(s.ToolCalls), ptr(s.ToolErrors)
	m.EpisodeReturn = ptr(s.MeanReturn)
	m.SolvedAllFrac, m.SolvedNoneFrac = s.SolvedAll, s.SolvedNone
	if s.EnvErrors > 0 {
		m.EnvErrors = ptr(s.EnvErrors)
	}
}

func (s AgentStats) fillEval(m *Metrics) {
	m.EvalCompletionRate, m.EvalActionsPerEpisode, m.EvalInvalidActionRate = ptr(s.CompletionRate), ptr(s.ActionsPerEpisode), ptr(s.InvalidActionRate)
	m.EvalActionReward, m.EvalToolCalls, m.EvalToolErrors = s.ActionReward, ptr(s.ToolCalls), ptr(s.ToolErrors)
	m.EvalEpisodeReturn = ptr(s.MeanReturn)
	if s.EnvErrors > 0 {
		m.EvalEnvErrors = ptr(s.EnvErrors)
	}
}

func ptr[T any](v T) *T { return &v }

// envClock counts the steps of the environments it made and their wall
// time. Safe for concurrent use.
type envClock struct{ steps, nanos atomic.Int64 }

// timed is mk with every environment's Step counted on c.
func (c *envClock) timed(mk func() env.Env) func() env.Env {
	return func() env.Env { return timedEnv{mk(), c} }
}

// figures are the steps counted and their mean wall time in seconds (nil
// without steps).
func (c *envClock) figures() (*int64, *float64) {
	n := c.steps.Load()
	if n == 0 {
		return nil, nil
	}
	return ptr(n), ptr(time.Duration(c.nanos.Load()).Seconds() / float64(n))
}

type timedEnv struct {
	env.Env
	c *envClock
}

func (e timedEnv) Step(ctx context.Context, a env.Action) (env.StepResult, error) {
	t0 := time.Now()
	r, err := e.Env.Step(ctx, a)
	e.c.nanos.Add(int64(time.Since(t0)))
	e.c.steps.Add(1)
	return r, err
}

// actionKinds are the keys of an ActionReward map, sorted.
func actionKinds(m map[string]float64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// groupFilterWeights are rw_sft's group_filter weights of a batch's rows
// (indices into turns, after agentTraining: a turn's Reward is its
// episode's return). A turn of an episode whose return is at least
// threshold weighs n/k, n the episodes of its group and k those of them
// at the threshold; every other turn 0. A group's solved episodes weigh n
// in all however few they are, so a task solved once in n tries trains as
// much as one solved every time: on-policy samples estimate the gradient
// of the log-probability of solving each task (SFT's on correct answers)
// instead of that of the probability (the plain filter's, which favours
// the tasks the policy solves already).
func groupFilterWeights(turns []data.Turn, rows []int, threshold float64) []float64 {
	type count struct{ n, k int }
	groups := map[int64]*count{}
	seen := map[string]bool{}
	for _, t := range turns {
		if seen[t.EpisodeID] {
			continue
		}
		seen[t.EpisodeID] = true
		c := groups[t.GroupID]
		if c == nil {
			c = &count{}
			groups[t.GroupID] = c
		}
		c.n++
		if t.Reward >= threshold {
			c.k++
		}
	}
	w := make([]float64, len(rows))
	for i, row := range rows {
		t := turns[row]
		if c := groups[t.GroupID]; t.Reward >= threshold && c.k > 0 {
			w[i] = float64(c.n) / float64(c.k)
		}
	}
	return w
}
