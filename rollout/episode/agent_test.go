package episode_test

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/env"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/episode/episodetest"
)

// stepOf is the step a chat request asks for: the assistant turns so far.
func stepOf(r engine.Request) int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

var solvedX = regexp.MustCompile(`: x = (-?\d+)`)

// teacher plays the solution, reading x from the observation after
// divide_terms.
func teacher(eng *episodetest.ScriptedEngine) episodetest.Reply {
	return func(r engine.Request, _ int) string {
		switch stepOf(r) {
		case 0:
			return "First the operations. <action>identify_operation</action>"
		case 1:
			return "<action>subtract_terms</action>"
		case 2:
			return "<action>divide_terms</action>"
		}
		if m := solvedX.FindStringSubmatch(eng.LastUser(r)); m != nil {
			return "<action>state_answer(" + m[1] + ")</action>"
		}
		return "lost"
	}
}

func agent(eng engine.Engine, maxSteps int) *episode.Agent {
	return &episode.Agent{
		Policy:   policy("actor", eng),
		NewEnv:   func() env.Env { return env.NewEquations() },
		MaxSteps: maxSteps,
		System:   "Solve the equation one action at a time.",
	}
}

func TestAgentSolves(t *testing.T) {
	eng := episodetest.NewScriptedEngine(nil)
	eng.Reply = teacher(eng)
	examples := []data.Example{{ID: "issue", Prompt: "3x + 5 = 14"}, {ID: "drawn", Prompt: env.TaskHeldOut}}
	turns, err := agent(eng, 0).Run(ctx(t), episode.Batch{Examples: examples, N: 2, FirstGroupID: 7})
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	if len(turns) != 16 || eng.Calls() != 4 {
		t.Fatalf("%d rows in %d engine calls, want 16 in 4", len(turns), eng.Calls())
	}
	reqs := eng.Requests()
	if len(reqs) != 2+4*3 || reqs[0].Params.N != 2 || reqs[2].Params.N != 1 {
		t.Fatalf("%d requests, first with N %d", len(reqs), reqs[0].Params.N)
	}
	first := reqs[0].Messages
	if len(first) != 2 || first[0].Role != "system" || !strings.HasPrefix(first[1].Content, "Solve for x: 3x + 5 = 14\n\nValid actions:\n") ||
		!strings.Contains(first[1].Content, "- state_answer(value): ") || !strings.Contains(first[1].Content, "<action>name(value)</action>") {
		t.Fatalf("first prompt: %+v", first)
	}
	byID := map[string]engine.Request{}
	for _, r := range reqs {
		byID[r.ID] = r
	}
	for k, tr := range turns {
		ep, step := k/4, k%4
		if want := []float64{1.5, 2, 2, 3}[step]; tr.Reward != want || tr.FinalReward != 8.5 {
			t.Errorf("row %d: reward %v final %v, want %v and 8.5", k, tr.Reward, tr.FinalReward, want)
		}
		if tr.GroupID != 7+int64(ep/2) || int(tr.Sample) != ep%2 || int(tr.Turn) != step || tr.PolicyID != "actor" {
			t.Errorf("row %d: group %d sample %d turn %d policy %q", k, tr.GroupID, tr.Sample, tr.Turn, tr.PolicyID)
		}
		if wantNote := map[bool]string{true: "outcome: solved", false: ""}[step == 3]; tr.Note != wantNote {
			t.Errorf("row %d: note %q, want %q", k, tr.Note, wantNote)
		}
		if tr.LogProbs[0] != -0.01 || len(tr.LossMask) != len(tr.ResponseIDs) || tr.LossMask[0] != 1 {
			t.Errorf("row %d: logprobs %v mask %v", k, tr.LogProbs, tr.LossMask)
		}
		// The prompt of step k is the chat so far: the earlier steps' texts
		// as assistant turns, the observations as user turns.
		id := fmt.Sprintf("g%d-a0", tr.GroupID)
		if step > 0 {
			id = fmt.Sprintf("%s-a%d", tr.EpisodeID, step)
		}
		req, ok := byID[id]
		if !ok {
			t.Fatalf("row %d: no request %s", k, id)
		}
		if !slices.Equal(tr.PromptIDs, toInt32(eng.Tok.EncodeChat(req.Messages, true))) {
			t.Errorf("row %d: prompt ids are not the chat of request %s", k, id)
		}
		if len(req.Messages) != 2+2*step {
			t.Errorf("row %d: %d messages, want %d", k, len(req.Messages), 2+2*step)
		}
		if step > 0 && req.Messages[len(req.Messages)-2].Content != turns[k-1].ResponseText {
			t.Errorf("row %d: the assistant message is %q, want the last step's text %q", k, req.Messages[len(req.Messages)-2].Content, turns[k-1].ResponseText)
		}
	}
	// Samples of a group play the same equation.
	if a, b := byID["g8-s0-a3"].Messages[7].Content, byID["g8-s1-a3"].Messages[7].Content; a != b || !strings.Contains(a, "x = ") {
		t.Errorf("group 8's samples saw %q and %q", a, b)
	}

	g, err := episode.TurnReturns(turns, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	for k := range turns {
		if want := []float64{7.107, 6.23, 4.7, 3}[k%4]; math.Abs(g[k]-want) > 1e-12 {
			t.Errorf("row %d: return %v, want %v", k, g[k], want)
		}
	}
}

func TestAgentBadPolicies(t *testing.T) {
	tests := []struct {
		name     string
		maxSteps int
		reply    func(step int) string
		rewards  []float64
		notes    []string // a part of each turn's note
	}{
		{"garbage until the episode's step limit", 3, func(int) string { return "I think x is 3" },
			[]float64{-1, -1, -1}, []string{"no action", "invalid action: no action given", "stopped after 3 steps"}},
		{"garbage until the environment's step limit", 20, func(int) string { return "<action>Divide!</action>" },
			[]float64{-1, -1, -1, -1, -1, -1, -1, -1}, []string{"not an action name", "invalid action", "", "", "", "", "", "outcome: step_limit"}},
		{"an unknown action", 2, func(int) string { return "<action>guess</action>" },
			[]float64{-1, -1}, []string{`invalid action: unknown action "guess"`, "stopped after 2 steps"}},
		{"out of order, then right", 0, func(s int) string {
			return []string{"<action>divide_terms</action>", "<action>identify_operation</action>", "<action>subtract_terms(5)</action>", "<action>state_answer(4)</action>"}[s]
		}, []float64{-0.5, 1.5, -1, -1}, []string{"", "", "takes no parameter", "outcome: wrong_answer"}},
		{"empty turns", 1, func(int) string { return "" }, []float64{-1}, []string{"no action"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eng := episodetest.NewScriptedEngine(func(r engine.Request, _ int) string { return tc.reply(stepOf(r)) })
			turns, err := agent(eng, tc.maxSteps).Run(ctx(t), episode.Batch{Examples: []data.Example{{ID: "issue", Prompt: "3x + 5 = 14"}}, N: 1})
			if err != nil {
				t.Fatal(err)
			}
			checkTurns(t, turns)
			if len(turns) != len(tc.rewards) {
				t.Fatalf("%d turns, want %d", len(turns), len(tc.rewards))
			}
			var total float64
			for _, r := range tc.rewards {
				total += r
			}
			for k, tr := range turns {
				if tr.Reward != tc.rewards[k] || tr.FinalReward != total || !strings.Contains(tr.Note, tc.notes[k]) {
					t.Errorf("turn %d: reward %v final %v note %q; want %v, %v, %q", k, tr.Reward, tr.FinalReward, tr.Note, tc.rewards[k], total, tc.notes[k])
				}
			}
		})
	}
}

// nanEnv offers one action and rewards it with NaN.
type nanEnv struct{}

func (nanEnv) Reset(context.Context, int64, string) (env.Observation, error) {
	return env.Observation{Text: "go", Actions: []env.ActionSpec{{Name: "go", Description: "go on"}}}, nil
}

func (nanEnv) Step(context.Context, env.Action) (env.StepResult, error) {
	return env.StepResult{Observation: env.Observation{Text: "went"}, Reward: math.NaN()}, nil
}

func TestAgentFailures(t *testing.T) {
	one := episode.Batch{Examples: []data.Example{{ID: "issue", Prompt: "3x + 5 = 14"}}, N: 2}

	eng := episodetest.NewScriptedEngine(func(engine.Request, int) string { return "<action>go</action>" })
	a := agent(eng, 4)
	a.NewEnv = func() env.Env { return nanEnv{} }
	turns, err := a.Run(ctx(t), one)
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	if len(turns) != 2 || turns[0].Reward != 0 || !strings.Contains(turns[0].Note, "environment: step 1 (go): reward NaN") {
		t.Fatalf("NaN reward: %d turns, first %v %q", len(turns), turns[0].Reward, turns[0].Note)
	}

	eng = episodetest.NewScriptedEngine(func(r engine.Request, _ int) string {
		if stepOf(r) == 1 {
			return episodetest.Refuse
		}
		return "<action>identify_operation</action>"
	})
	turns, err = agent(eng, 0).Run(ctx(t), one)
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	if len(turns) != 4 || turns[1].FinishReason != "error" || turns[1].FinalReward != 1.5 || turns[1].Turn != 1 {
		t.Fatalf("refused step: %d turns, second %+v", len(turns), turns[1])
	}

	if _, err := agent(eng, 0).Run(ctx(t), episode.Batch{Examples: []data.Example{{ID: "bad", Prompt: "solve 3y = 1"}}, N: 1}); err == nil || !strings.Contains(err.Error(), `example "bad"`) {
		t.Fatalf("bad task: %v", err)
	}
	eng.Fail = context.DeadlineExceeded
	if _, err := agent(eng, 0).Run(ctx(t), one); err == nil {
		t.Fatal("engine down: no error")
	}
	if _, err := (&episode.Agent{Policy: policy("actor", eng)}).Run(ctx(t), one); err == nil {
		t.Fatal("no environment: no error")
	}
}

// An episode whose chat outgrows the model's context ends after its last
// step that fitted, unsolved, as at max_steps: no failed turn, nothing
// that stops a run.
func TestAgentContextFull(t *testing.T) {
	one := episode.Batch{Examples: []data.Example{{ID: "eq", Prompt: "3x + 5 = 14"}}, N: 1}
	eng := episodetest.NewScriptedEngine(nil)
	eng.Reply = teacher(eng)
	if _, err := agent(eng, 0).Run(ctx(t), one); err != nil {
		t.Fatal(err)
	}
	reqs := eng.Requests()
	if len(reqs) != 4 {
		t.Fatalf("the teacher took %d steps, want 4", len(reqs))
	}
	// Room for steps 0 and 1, not for step 2.
	step2 := len(eng.Tok.EncodeChat(reqs[2].Messages, true)) + reqs[2].Params.MaxTokens
	small := episodetest.NewScriptedEngine(nil)
	small.Reply, small.MaxPositions = teacher(small), step2-1
	turns, err := agent(small, 0).Run(ctx(t), one)
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	if len(turns) != 2 {
		t.Fatalf("%d turns, want the 2 steps that fitted", len(turns))
	}
	for _, tn := range turns {
		if tn.FinishReason == "error" || tn.FinalReward != 3.5 {
			t.Errorf("turn %d: finish %q, return %v; want no failed turn and the return 1.5 + 2", tn.Turn, tn.FinishReason, tn.FinalReward)
		}
	}
	if !strings.Contains(turns[1].Note, episode.NoteContextFull+"2") {
		t.Errorf("last turn's note %q: want it to say the context was full at step 2", turns[1].Note)
	}

	// A first prompt that does not fit is the recipe's mistake: a failed
	// turn, as before.
	tiny := episodetest.NewScriptedEngine(nil)
	tiny.Reply, tiny.MaxPositions = teacher(tiny), 8
	turns, err = agent(tiny, 0).Run(ctx(t), one)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 1 || turns[0].FinishReason != "error" || !strings.Contains(turns[0].Note, "context full") {
		t.Fatalf("first prompt over the context: %+v", turns)
	}
}

func TestReturns(t *testing.T) {
	tests := []struct {
		rewards []float64
		gamma   float64
		want    []float64
	}{
		{[]float64{1.5, 2, 2, 3}, 1, []float64{8.5, 7, 5, 3}},
		{[]float64{1.5, 2, 2, 3}, 0.9, []float64{7.107, 6.23, 4.7, 3}},
		{[]float64{1.5, 2, 2, 3}, 0, []float64{1.5, 2, 2, 3}},
		{[]float64{-1, -1, 3}, 0.5, []float64{-0.75, 0.5, 3}},
		{nil, 0.9, []float64{}},
	}
	for _, tc := range tests {
		got, err := episode.Returns(tc.rewards, tc.gamma)
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("Returns(%v, %v) = %v, %v", tc.rewards, tc.gamma, got, err)
		}
		for k := range got {
			if math.Abs(got[k]-tc.want[k]) > 1e-12 {
				t.Errorf("Returns(%v, %v) = %v, want %v", tc.rewards, tc.gamma, got, tc.want)
			}
		}
	}
	for _, gamma := range []float64{-0.1, 1.1, math.NaN()} {
		if _, err := episode.Returns([]float64{1}, gamma); err == nil {
			t.Errorf("gamma %v: no error", gamma)
		}
	}
	if _, err := episode.Returns([]float64{1, math.Inf(1)}, 0.9); err == nil {
		t.Error("infinite reward: no error")
	}
	split := []data.Turn{{EpisodeID: "a"}, {EpisodeID: "b"}, {EpisodeID: "a", Turn: 1}}
	if _, err := episode.TurnReturns(split, 0.9); err == nil || !strings.Contains(err.Error(), "not together") {
		t.Errorf("split episode: %v", err)
	}
	skip := []data.Turn{{EpisodeID: "a"}, {EpisodeID: "a", Turn: 2}}
	if _, err := episode.TurnReturns(skip, 0.9); err == nil || !strings.Contains(err.Error(), "turn 2, want 1") {
		t.Errorf("missing turn: %v", err)
	}
}

// stepPrompter writes each step as "step K | OBSERVATION | TAKEN".
type stepPrompter struct{}

func (stepPrompter) AgentPrompt(v episode.AgentView) (string, error) {
	if v.Step > 5 {
		return "", fmt.Errorf("step %d: too far", v.Step)
	}
	return fmt.Sprintf("step %d | %s | %s", v.Step, v.Observation.Text, strings.Join(v.Taken, ",")), nil
}

// TestAgentPrompterAndNotes: with a Prompter the steps' prompts are its
// text (no chat), and AgentStepOf reads back what each turn did: tool
// calls and failed calls of the calculator, an invalid action, the
// outcome.
func TestAgentPrompterAndNotes(t *testing.T) {
	eng := episodetest.NewScriptedEngine(nil)
	eng.Reply = func(r engine.Request, _ int) string {
		p := eng.Tok.Decode(r.Prompt)
		switch {
		case strings.HasPrefix(p, "step 0 "):
			return "<action>calculate(347 / 28)</action>"
		case strings.HasPrefix(p, "step 1 "):
			return "no action"
		case strings.HasPrefix(p, "step 2 "):
			return "<action>calculate(347*28)</action>"
		}
		return "<action>answer(9716)</action>"
	}
	pol := policy("actor", eng)
	pol.Tokenizer = eng.Tok
	a := &episode.Agent{Policy: pol, NewEnv: func() env.Env { return env.NewMultiply(true) }, MaxSteps: 6, Prompter: stepPrompter{}}
	turns, err := a.Run(ctx(t), episode.Batch{Examples: []data.Example{{ID: "p", Prompt: "347 * 28"}}, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	want := []episode.AgentStep{
		{Action: env.Calculate, ToolCall: true, ToolError: true},
		{Invalid: true},
		{Action: env.Calculate, ToolCall: true},
		{Action: env.Answer, Outcome: env.OutcomeSolved},
	}
	if len(turns) != len(want) {
		t.Fatalf("%d turns, want %d", len(turns), len(want))
	}
	reqs := eng.Requests()
	for k, tr := range turns {
		if got := episode.AgentStepOf(tr); got != want[k] {
			t.Errorf("turn %d (%q, note %q): %+v, want %+v", k, tr.ResponseText, tr.Note, got, want[k])
		}
		if reqs[k].Messages != nil {
			t.Errorf("request %d is chat; want the prompter's text", k)
		}
	}
	if p := eng.Tok.Decode(reqs[3].Prompt); p != "step 3 | What is 347 * 28? 347*28 = 9716 | calculate(347 / 28),?,calculate(347*28)" {
		t.Errorf("step 3's prompt: %q", p)
	}
	if r := []float64{-0.2, -0.5, 0, 1}; turns[0].Reward != r[0] || turns[1].Reward != r[1] || turns[2].Reward != r[2] || turns[3].Reward != r[3] || math.Abs(turns[0].FinalReward-0.3) > 1e-12 {
		t.Errorf("rewards %v %v %v %v final %v", turns[0].Reward, turns[1].Reward, turns[2].Reward, turns[3].Reward, turns[0].FinalReward)
	}
	// A prompter that fails fails the run, naming the step.
	eng2 := episodetest.NewScriptedEngine(func(engine.Request, int) string { return "<action>calculate(1)</action>" })
	long := func() env.Env { m := env.NewMultiply(true); m.MaxSteps = 10; return m }
	pol2 := policy("actor", eng2)
	pol2.Tokenizer = eng2.Tok
	a = &episode.Agent{Policy: pol2, NewEnv: long, MaxSteps: 10, Prompter: stepPrompter{}}
	if _, err := a.Run(ctx(t), episode.Batch{Examples: []data.Example{{ID: "p", Prompt: "347 * 28"}}, N: 1}); err == nil || !strings.Contains(err.Error(), "step 6 prompt") {
		t.Errorf("failing prompter: %v", err)
	}
}

// TestAgentEnvSeedAndChats: with EnvSeed, groups that map to one seed play
// the same episode of the environment (here groups 2k and 2k+1), others
// not; Chats hands over each episode's chat, the requests' messages plus
// the last step's text and the final observation.
func TestAgentEnvSeedAndChats(t *testing.T) {
	eng := episodetest.NewScriptedEngine(nil)
	eng.Reply = teacher(eng)
	a := agent(eng, 0)
	a.Seed = 5
	var seeds []int64
	a.EnvSeed = func(g int64) int64 {
		seeds = append(seeds, 5+g/2)
		return 5 + g/2
	}
	chats := map[int64][]string{}
	a.Chats = func(g int64, s int, chat []tokenizer.Message) {
		if s != 0 {
			t.Errorf("group %d: sample %d, want 0", g, s)
		}
		for _, m := range chat {
			chats[g] = append(chats[g], m.Role+": "+m.Content)
		}
	}
	ex := data.Example{ID: "eval", Prompt: env.TaskHeldOut}
	turns, err := a.Run(ctx(t), episode.Batch{Examples: []data.Example{ex, ex, ex, ex}, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seeds, []int64{5, 5, 6, 6}) {
		t.Fatalf("env seeds %v, want 5 5 6 6", seeds)
	}
	first := map[int64]string{}
	for _, tr := range turns {
		if tr.Turn == 0 {
			first[tr.GroupID] = eng.Tok.Decode(toInts(tr.PromptIDs))
		}
	}
	if first[0] != first[1] || first[2] != first[3] || first[0] == first[2] {
		t.Fatalf("first prompts of groups 0-3 (seeds 5 5 6 6):\n%q\n%q\n%q\n%q", first[0], first[1], first[2], first[3])
	}
	for g := range int64(4) {
		c := chats[g]
		// system, then 4 observations and 4 actions, then the last observation.
		if len(c) != 10 || c[0] != "system: "+a.System || !strings.HasPrefix(c[8], "assistant: <action>state_answer(") || !strings.HasPrefix(c[9], "user: Correct") {
			t.Fatalf("group %d chat: %q", g, c)
		}
	}
}

func toInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}
