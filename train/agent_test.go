package train

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/env"
	"github.com/rlnode/rlnode/rollout/episode"
)

// agentTurns are episodes as the Agent returns them: per episode its
// group and per step its reward (each turn two response tokens).
func agentTurns(eps ...struct {
	group   int64
	rewards []float64
}) []data.Turn {
	var out []data.Turn
	for i, e := range eps {
		for k, r := range e.rewards {
			out = append(out, data.Turn{EpisodeID: string(rune('a' + i)), GroupID: e.group, Turn: int32(k), Reward: r,
				ResponseIDs: []int32{1, 2}, LogProbs: []float32{0, 0}, LossMask: []float32{1, 0}})
		}
	}
	return out
}

type ep = struct {
	group   int64
	rewards []float64
}

func TestAgentTraining(t *testing.T) {
	// Group 0: episodes with totals 3, 0, 0 (2 + 1; 0; 1 − 1); group 1:
	// totals 1 and 1.
	turns := agentTurns(ep{0, []float64{2, 1}}, ep{0, []float64{0}}, ep{0, []float64{1, -1}}, ep{1, []float64{1}}, ep{1, []float64{0.5, 0.5}})
	a := math.Sqrt(3) // GRPO of 3, 0, 0: mean 1, unbiased std √3
	tests := []struct {
		name      string
		algorithm string
		ac        AgentConfig
		rewards   []float64 // per turn, after
		adv       []float64 // per turn (nil: none set)
	}{
		{"grpo, episode returns: one advantage per episode", learner.GRPO, AgentConfig{Returns: ReturnsEpisode, Gamma: 1},
			[]float64{3, 3, 0, 0, 0, 1, 1, 1},
			[]float64{2 / a, 2 / a, -1 / a, -1 / a, -1 / a, 0, 0, 0}},
		// γ = 0.5: returns 2.5, 1 | 0 | 0.5, −1; the group's five turns
		// are the group.
		{"grpo, discounted returns: every turn of the group", learner.GRPO, AgentConfig{Returns: ReturnsDiscounted, Gamma: 0.5},
			[]float64{2.5, 1, 0, 0.5, -1, 1, 0.75, 0.5},
			nil},
		{"rloo, episode returns", learner.RLOO, AgentConfig{Returns: ReturnsEpisode, Gamma: 1},
			[]float64{3, 3, 0, 0, 0, 1, 1, 1},
			[]float64{3, 3, -1.5, -1.5, -1.5, 0, 0, 0}},
		{"ppo: the learner's GAE on each step's return", learner.PPO, AgentConfig{Returns: ReturnsDiscounted, Gamma: 1},
			[]float64{3, 1, 0, 0, -1, 1, 1, 0.5}, nil},
	}
	for _, tc := range tests {
		got, err := agentTraining(turns, tc.algorithm, &tc.ac)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i, g := range got {
			if math.Abs(g.Reward-tc.rewards[i]) > 1e-9 {
				t.Errorf("%s: turn %d reward %v, want %v", tc.name, i, g.Reward, tc.rewards[i])
			}
			if turns[i].Advantages != nil || turns[i].Reward != []float64{2, 1, 0, 1, -1, 1, 0.5, 0.5}[i] {
				t.Fatalf("%s: the input turns changed", tc.name)
			}
			switch {
			case tc.algorithm == learner.PPO:
				if g.Advantages != nil {
					t.Errorf("%s: turn %d has advantages %v; ppo estimates its own", tc.name, i, g.Advantages)
				}
			case tc.adv != nil:
				want := float32(tc.adv[i] / (1 + 1e-6*float64(map[bool]int{true: 1}[tc.algorithm == learner.GRPO])))
				if len(g.Advantages) != 2 || math.Abs(float64(g.Advantages[0]-want)) > 1e-5 || g.Advantages[1] != 0 {
					t.Errorf("%s: turn %d advantages %v, want [%v 0] (the masked token 0)", tc.name, i, g.Advantages, want)
				}
			}
		}
		if tc.ac.Returns == ReturnsDiscounted && tc.algorithm == learner.GRPO {
			// Group 0's five returns 2.5, 1, 0, 0.5, −1: mean 0.6.
			var sum float64
			for _, g := range got[:5] {
				sum += float64(g.Advantages[0])
			}
			if math.Abs(sum) > 1e-5 || got[0].Advantages[0] <= got[1].Advantages[0] || got[4].Advantages[0] >= 0 {
				t.Errorf("%s: group 0 advantages %v %v %v %v %v", tc.name, got[0].Advantages, got[1].Advantages, got[2].Advantages, got[3].Advantages, got[4].Advantages)
			}
		}
	}
	bad := agentTurns(ep{0, []float64{1, math.NaN()}}, ep{0, []float64{1}})
	for _, returns := range []string{ReturnsEpisode, ReturnsDiscounted} {
		if _, err := agentTraining(bad, learner.GRPO, &AgentConfig{Returns: returns, Gamma: 1}); err == nil || !strings.Contains(err.Error(), "NaN") {
			t.Errorf("%s returns with a NaN reward: %v, want an error naming it", returns, err)
		}
	}
}

func TestAgentStats(t *testing.T) {
	turn := func(id string, group int64, text string, reward float64, notes ...string) data.Turn {
		return data.Turn{EpisodeID: id, GroupID: group, ResponseText: text, Reward: reward, Note: strings.Join(notes, "; ")}
	}
	calc, ans := "<action>calculate(3*4)</action>", "<action>answer(12)</action>"
	turns := []data.Turn{
		turn("a", 0, calc, 0, episode.NoteToolCall+"calculate"),
		turn("a", 0, ans, 1, episode.NoteOutcome+env.OutcomeSolved),
		turn("b", 0, "<action>calculate(3/4)</action>", -0.2, episode.NoteToolCall+"calculate", episode.NoteToolError+"unexpected '/'"),
		turn("b", 0, "no action here", -0.5, "no action", episode.NoteInvalid+"no action given"),
		turn("b", 0, "<action>fly</action>", -0.5, episode.NoteInvalid+`unknown action "fly"`, episode.NoteOutcome+env.OutcomeStepLimit),
		turn("c", 1, ans, 1, episode.NoteOutcome+env.OutcomeSolved),
	}
	s := agentStats(turns, []string{env.Calculate, env.Answer})
	want := AgentStats{Episodes: 3, CompletionRate: 2.0 / 3, ActionsPerEpisode: 2, InvalidActionRate: 2.0 / 6,
		ActionReward: map[string]float64{"calculate": -0.1, "answer": 1, "none": -0.5, "other": -0.5},
		ToolCalls:    2, ToolErrors: 1, SolvedAll: 0.5, SolvedNone: 0}
	if s.Episodes != want.Episodes || s.CompletionRate != want.CompletionRate || s.ActionsPerEpisode != want.ActionsPerEpisode ||
		s.InvalidActionRate != want.InvalidActionRate || s.ToolCalls != want.ToolCalls || s.ToolErrors != want.ToolErrors ||
		s.SolvedAll != want.SolvedAll || s.SolvedNone != want.SolvedNone || len(s.ActionReward) != len(want.ActionReward) {
		t.Errorf("stats %+v, want %+v", s, want)
	}
	if want := (1 - 1.2 + 1) / 3; math.Abs(s.MeanReturn-want) > 1e-12 {
		t.Errorf("mean return %v, want %v (episodes returning 1, -1.2, 1)", s.MeanReturn, want)
	}
	for k, v := range want.ActionReward {
		if math.Abs(s.ActionReward[k]-v) > 1e-12 {
			t.Errorf("action %s: mean reward %v, want %v", k, s.ActionReward[k], v)
		}
	}
	// A step the environment failed ended its episode: counted, and
	// written to metrics.jsonl as env_errors.
	failed := []data.Turn{turn("e", 2, "<action>guess(4)</action>", 0, episode.NoteEnvError+"step 0 (guess(4)): no answer within 10s")}
	if s := agentStats(append(turns, failed...), []string{env.Calculate, env.Answer}); s.EnvErrors != 1 || s.Episodes != 4 {
		t.Errorf("with an environment failure: %d env errors in %d episodes, want 1 in 4", s.EnvErrors, s.Episodes)
	} else {
		var m Metrics
		s.fillRL(&m)
		if m.EnvErrors == nil || *m.EnvErrors != 1 {
			t.Errorf("env_errors %v, want 1", m.EnvErrors)
		}
	}
	if z := agentStats(nil, nil); z.Episodes != 0 || z.ActionReward != nil {
		t.Errorf("no turns: %+v", z)
	}
}

// TestAgentRecipeErrors: every bad agent setting is refused at its line,
// by recipe validation or by Check.
func TestAgentRecipeErrors(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"episode.agent.env=chess"}, `--set episode.agent.env=chess: episode.agent.env: "chess": want one of equations, calculator, multiply, guess`},
		{[]string{"episode.agent.max_steps=0"}, "--set episode.agent.max_steps=0: episode.agent.max_steps: 0: want 1..64"},
		{[]string{"episode.agent.max_steps=65"}, "--set episode.agent.max_steps=65: episode.agent.max_steps: 65: want 1..64"},
		{[]string{"episode.agent.gamma=1.5"}, "--set episode.agent.gamma=1.5: episode.agent.gamma: 1.5: want a value in [0, 1]"},
		{[]string{"episode.agent.returns=final"}, `--set episode.agent.returns=final: episode.agent.returns: "final": want one of episode, discounted`},
		{[]string{`episode.agent.template="{{.Taken}}"`}, `--set episode.agent.template="{{.Taken}}": episode.agent.template: "{{.Taken}}": must use .Observation`},
		{[]string{`episode.agent.template="{{.Observation}} {{.Problem}}"`}, `--set episode.agent.template="{{.Observation}} {{.Problem}}": episode.agent.template: `},
		{[]string{"data.task={}"}, "--set data.task={}: data: episode.type agent takes its tasks from episode.agent.env"},
		{[]string{"episode.agent=null"}, "--set episode.agent=null: episode.agent: absent: episode.type agent needs episode.agent with env"},
		{[]string{"episode.type=single", "data.task={}"}, `builtin:agent_equations.yaml:`},
		{[]string{"models.policy.init.max_positions=48"}, "--set models.policy.init.max_positions=48: models.policy.init.max_positions: 48 positions: env equations train seed 1 step 1: the prompt (episode.agent.template) and the teacher's action take 93 tokens"},
	} {
		l, err := recipes.Load("agent_equations", tc.sets)
		if err == nil {
			err = Check(l)
		}
		if err == nil || !errors.Is(err, recipes.ErrInvalid) || !strings.Contains("\n"+err.Error(), "\n"+tc.want) {
			t.Errorf("%v: got\n%v\nwant a line starting %q", tc.sets, err, tc.want)
		}
	}
	// An agent section on another episode type.
	l, err := recipes.Load("quickstart", []string{"episode.agent={env: guess}"})
	if err == nil {
		err = Check(l)
	}
	if err == nil || !strings.Contains(err.Error(), `episode.agent: set, but episode.type is "single"`) {
		t.Errorf("agent section on single: %v", err)
	}
}

// TestAgentRecipesAccepted: agent episodes run on rollout actors (several,
// split placement, asynchronous), on vLLM servers and with sampled
// evaluation.
func TestAgentRecipesAccepted(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	for _, set := range [][]string{
		{"engines.policy.replicas=2"},
		{"deterministic=false", "engines.policy.replicas=2", "sync.mode=async", "sync.max_staleness=1"},
		vllmPolicy,
		{"eval.temperature=0.7", "eval.samples=4"},
	} {
		l, err := recipes.Load("agent_equations", set)
		if err == nil {
			err = Check(l)
		}
		if err != nil {
			t.Errorf("%v: %v", set, err)
		}
	}
}

// TestRecipeNamesMatch: recipes' names of environments are rollout/env's.
func TestAgentEnvNamesMatch(t *testing.T) {
	if strings.Join(recipes.Envs, ",") != strings.Join(env.BuiltinNames, ",") {
		t.Errorf("recipes.Envs %v, rollout/env.BuiltinNames %v", recipes.Envs, env.BuiltinNames)
	}
}

// TestTeacherEpisodeFits: the teacher's episodes of each environment
// under the default template, as the warm-up trains on them.
func TestTeacherEpisode(t *testing.T) {
	ac := AgentConfig{MaxSteps: 8, Returns: ReturnsEpisode, Gamma: 1, Template: recipes.DefaultAgentTemplate}
	for _, name := range env.BuiltinNames {
		ac.Env = name
		tpl, err := ac.validate()
		if err != nil {
			t.Fatal(err)
		}
		steps, err := teacherEpisode(context.Background(), &ac, tpl, 3, env.TaskTrain)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(steps) == 0 {
			t.Fatalf("%s: no steps", name)
		}
		for k, s := range steps {
			if _, err := env.ParseAction(s.target); err != nil || !strings.Contains(s.prompt, "Actions: ") {
				t.Errorf("%s step %d: prompt %q target %q (%v)", name, k, s.prompt, s.target, err)
			}
		}
		last, _ := env.ParseAction(steps[len(steps)-1].target)
		if want := map[string]string{"equations": env.StateAnswer, "calculator": env.Answer, "multiply": env.Answer, "guess": env.GuessAction}[name]; last.Name != want {
			t.Errorf("%s: the teacher ends with %s, want %s", name, last, want)
		}
	}
}
