package episode_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/episode/episodetest"
	"github.com/rlnode/rlnode/rollout/verify"
)

var problems = []data.Example{
	{ID: "add", Prompt: "What is 2+3?", Ref: verify.Reference{Answer: "5"}},
	{ID: "mul", Prompt: "What is 7*6?", Ref: verify.Reference{Answer: "42"}},
}

func policy(id string, e engine.Engine) episode.Policy {
	return episode.Policy{ID: id, Engine: e, Params: engine.SamplingParams{MaxTokens: 64, Temperature: 1}}
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func answerOf(prompt string) string {
	if strings.Contains(prompt, "2+3") {
		return "5"
	}
	return "42"
}

// checkTurns verifies the invariants every row must hold.
func checkTurns(t *testing.T, turns []data.Turn) {
	t.Helper()
	for i := range turns {
		if err := turns[i].Check(); err != nil {
			t.Errorf("row %d: %v", i, err)
		}
	}
	b, err := data.MarshalTrajectories(turns)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	back, err := data.UnmarshalTrajectories("test", b)
	if err != nil || len(back) != len(turns) {
		t.Fatalf("round trip: %d rows, %v", len(back), err)
	}
}

func TestSingleTurnGroupsAndBadAnswers(t *testing.T) {
	answers := []string{"So \\boxed{%s}.", "\\boxed{0}", "", "\xff\xfe\x00garbled", strings.Repeat("9", 1<<20)}
	eng := episodetest.NewScriptedEngine(func(r engine.Request, k int) string {
		a := answers[k]
		if strings.Contains(a, "%s") {
			a = fmt.Sprintf(a, answerOf(r.Messages[0].Content))
		}
		return a
	})
	eng.Version.Store(9)
	pol := policy("solver", eng)
	pol.Params.MaxTokens = 1 << 21
	r, err := episode.NewSingleTurn(pol, episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	turns, err := r.Run(ctx(t), episode.Batch{Examples: problems, N: len(answers), FirstGroupID: 100})
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	if len(turns) != 10 || eng.Calls() != 1 {
		t.Fatalf("%d rows in %d calls, want 10 in 1 batched call", len(turns), eng.Calls())
	}
	wantReward := []float64{1, 0, 0, 0, 0}
	wantNote := []string{"", "", "empty answer", "no \\boxed{} answer", "over the 262144-byte limit"}
	for i, tr := range turns {
		g, s := int64(100+i/5), i%5
		if tr.GroupID != g || int(tr.Sample) != s || tr.EpisodeID != fmt.Sprintf("g%d-s%d", g, s) || tr.Turn != 0 {
			t.Errorf("row %d: group %d sample %d id %s turn %d", i, tr.GroupID, tr.Sample, tr.EpisodeID, tr.Turn)
		}
		if tr.Reward != wantReward[s] || tr.FinalReward != tr.Reward {
			t.Errorf("row %d: reward %v final %v, want %v", i, tr.Reward, tr.FinalReward, wantReward[s])
		}
		if !strings.Contains(tr.Note, wantNote[s]) || (wantNote[s] == "") != (tr.Note == "") {
			t.Errorf("row %d: note %q, want %q", i, tr.Note, wantNote[s])
		}
		if tr.PolicyID != "solver" || tr.WeightVersion != 9 || len(tr.PromptIDs) == 0 || slices.Contains(tr.LossMask, 0) {
			t.Errorf("row %d: policy %s version %d prompt %d mask %v", i, tr.PolicyID, tr.WeightVersion, len(tr.PromptIDs), tr.LossMask[:min(3, len(tr.LossMask))])
		}
	}
	req := eng.Requests()[0]
	if req.Params.N != 5 || !strings.Contains(req.Messages[0].Content, "What is 2+3?\nPlease reason step by step, and put your final answer within \\boxed{}.") {
		t.Errorf("solver request: N %d, prompt %q", req.Params.N, req.Messages[0].Content)
	}
}

// mlmtScript plays a solver that is wrong first and right after feedback,
// and a teacher that writes a hint.
func mlmtScript(r engine.Request, _ int) string {
	p := r.Messages[len(r.Messages)-1].Content
	switch {
	case strings.Contains(p, "You are a teacher"):
		return "Recheck the arithmetic."
	case strings.Contains(p, "Feedback on it:"):
		return "Fixed: \\boxed{" + answerOf(p) + "}"
	}
	return "I think \\boxed{1}"
}

func TestMLMTThreeTurns(t *testing.T) {
	solver := episodetest.NewScriptedEngine(mlmtScript)
	solver.Version.Store(3)
	teacher := episodetest.NewScriptedEngine(mlmtScript)
	teacher.Version.Store(7)
	fb := policy("feedback", teacher)
	r, err := episode.NewMLMT(policy("solver", solver), &fb, episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	turns, err := r.Run(ctx(t), episode.Batch{Examples: problems, N: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	if len(turns) != 12 {
		t.Fatalf("%d rows, want 2 examples × 2 samples × 3 turns", len(turns))
	}
	for i, tr := range turns {
		want := []struct {
			policy  string
			version int64
			reward  float64
		}{{"solver", 3, 0}, {"feedback", 7, 1}, {"solver", 3, 1}}[i%3]
		if tr.Turn != int32(i%3) || tr.PolicyID != want.policy || tr.WeightVersion != want.version || tr.Reward != want.reward || tr.FinalReward != 1 {
			t.Errorf("row %d: turn %d policy %s version %d reward %v final %v; want %+v", i, tr.Turn, tr.PolicyID, tr.WeightVersion, tr.Reward, tr.FinalReward, want)
		}
		if tr.EpisodeID != fmt.Sprintf("g%d-s%d", i/6, i/3%2) {
			t.Errorf("row %d: episode %s", i, tr.EpisodeID)
		}
	}
	if solver.Calls() != 2 || teacher.Calls() != 1 {
		t.Errorf("solver %d calls, teacher %d; want 2 and 1 (each turn batched)", solver.Calls(), teacher.Calls())
	}
	fbReq := teacher.Requests()[0].Messages[0].Content
	if !strings.Contains(fbReq, "What is 2+3?") || !strings.Contains(fbReq, "I think \\boxed{1}") {
		t.Errorf("feedback prompt lacks problem or attempt: %q", fbReq)
	}
	refine := solver.Requests()[len(solver.Requests())-1].Messages[0].Content
	for _, w := range []string{"What is 7*6?", "I think \\boxed{1}", "Recheck the arithmetic."} {
		if !strings.Contains(refine, w) {
			t.Errorf("refine prompt lacks %q: %q", w, refine)
		}
	}
}

func TestMLMTStaticFeedback(t *testing.T) {
	solver := episodetest.NewScriptedEngine(mlmtScript)
	tpl := episode.Templates{StaticFeedback: "Look again at {{.Attempt}}."}
	r, err := episode.NewMLMT(policy("solver", solver), nil, episodetest.ExactVerifier{}, tpl, episode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	turns, err := r.Run(ctx(t), episode.Batch{Examples: problems[:1], N: 3})
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	if len(turns) != 6 {
		t.Fatalf("%d rows, want 3 samples × 2 solver turns", len(turns))
	}
	for i, tr := range turns {
		if tr.PolicyID != "solver" || tr.Turn != int32(2*(i%2)) || tr.Reward != float64(i%2) || tr.FinalReward != 1 {
			t.Errorf("row %d: policy %s turn %d reward %v final %v", i, tr.PolicyID, tr.Turn, tr.Reward, tr.FinalReward)
		}
	}
	refine := solver.Requests()[1].Messages[0].Content
	if !strings.Contains(refine, "Look again at I think \\boxed{1}.") {
		t.Errorf("refine prompt lacks the static feedback: %q", refine)
	}
}

func TestMLMTIsolatesRefusedRequests(t *testing.T) {
	// The engine refuses the refine prompt of "7*6" (say, too long): that
	// episode ends with reward 0 and a note; the others are unaffected.
	solver := episodetest.NewScriptedEngine(func(r engine.Request, k int) string {
		p := r.Messages[0].Content
		if strings.Contains(p, "Feedback on it:") && strings.Contains(p, "7*6") {
			return episodetest.Refuse
		}
		return mlmtScript(r, k)
	})
	r, err := episode.NewMLMT(policy("solver", solver), nil, episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	turns, err := r.Run(ctx(t), episode.Batch{Examples: problems, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	if len(turns) != 4 || turns[1].FinalReward != 1 || turns[3].FinalReward != 0 {
		t.Fatalf("rows %d, finals %v/%v", len(turns), turns[1].FinalReward, turns[3].FinalReward)
	}
	if !strings.Contains(turns[3].Note, "turn 2:") || !strings.Contains(turns[3].Note, "refused") {
		t.Errorf("note %q", turns[3].Note)
	}

	solver.Fail = errors.New("server 10.0.0.1:8000 down")
	if _, err := r.Run(ctx(t), episode.Batch{Examples: problems, N: 1}); err == nil || !strings.Contains(err.Error(), `policy "solver"`) || !strings.Contains(err.Error(), "down") {
		t.Errorf("engine failure: %v", err)
	}
}

func TestMLMTQuotesHugeAttempts(t *testing.T) {
	huge := strings.Repeat("x", 100_000)
	solver := episodetest.NewScriptedEngine(func(r engine.Request, k int) string {
		if strings.Contains(r.Messages[0].Content, "Feedback on it:") {
			return "\\boxed{5}"
		}
		return huge
	})
	pol := policy("solver", solver)
	pol.Params.MaxTokens = 1 << 20
	r, err := episode.NewMLMT(pol, nil, episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{MaxQuoteBytes: 1000, CutMark: "\n[... cut]"})
	if err != nil {
		t.Fatal(err)
	}
	turns, err := r.Run(ctx(t), episode.Batch{Examples: problems[:1], N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p := solver.Requests()[1].Messages[0].Content; len(p) > 1500 || !strings.Contains(p, "[... cut]") {
		t.Errorf("refine prompt of %d bytes", len(p))
	}
	if turns[1].FinalReward != 1 || !strings.Contains(turns[0].Note, "attempt cut") {
		t.Errorf("final %v note %q", turns[1].FinalReward, turns[0].Note)
	}
}

func TestSCoReTwoTurns(t *testing.T) {
	eng := episodetest.NewScriptedEngine(func(r engine.Request, _ int) string {
		if len(r.Messages) == 3 {
			return "Corrected: \\boxed{" + answerOf(r.Messages[0].Content) + "}"
		}
		return "\\boxed{3}"
	})
	r, err := episode.NewSCoRe(policy("solver", eng), episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	turns, err := r.Run(ctx(t), episode.Batch{Examples: problems, N: 2, FirstGroupID: 5})
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	if len(turns) != 8 {
		t.Fatalf("%d rows", len(turns))
	}
	for i, tr := range turns {
		if tr.Turn != int32(i%2) || tr.Reward != float64(i%2) || tr.FinalReward != 1 || tr.GroupID != int64(5+i/4) {
			t.Errorf("row %d: turn %d reward %v final %v group %d", i, tr.Turn, tr.Reward, tr.FinalReward, tr.GroupID)
		}
	}
	second := eng.Requests()[len(eng.Requests())-1]
	if len(second.Messages) != 3 || second.Messages[1].Role != "assistant" || second.Messages[1].Content != "\\boxed{3}" ||
		!strings.HasPrefix(second.Messages[2].Content, "There might be an error in the solution above") {
		t.Errorf("review conversation: %+v", second.Messages)
	}
}

func TestToolUse(t *testing.T) {
	sb, err := verify.NewSandbox(verify.SandboxConfig{Concurrency: 2})
	if err != nil {
		t.Fatalf("code sandbox: %v", err)
	}
	calls := map[string]string{
		"2+3": `Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>`,
		"7*6": `<tool_call>{"name": "python", "arguments": {"code": "print(7*6)"}}</tool_call>`,
	}
	eng := episodetest.NewScriptedEngine(nil)
	eng.Reply = func(r engine.Request, _ int) string {
		if len(r.Prompt) > 0 { // a continuation after tool output
			text := eng.Tok.Decode(r.Prompt)
			i := strings.LastIndex(text, "<tool_response>\n")
			j := strings.LastIndex(text, "\n</tool_response>")
			return "The tool says \\boxed{" + strings.TrimSpace(text[i+len("<tool_response>\n"):j]) + "}"
		}
		for k, v := range calls {
			if strings.Contains(r.Messages[0].Content, k) {
				return v
			}
		}
		return "no idea"
	}
	r, err := episode.NewToolUse(policy("solver", eng), episodetest.ExactVerifier{}, eng.Tok, episode.SandboxPython{Sandbox: sb}, episode.Templates{}, episode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	turns, err := r.Run(ctx(t), episode.Batch{Examples: problems, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	if len(turns) != 2 || eng.Calls() != 2 {
		t.Fatalf("%d rows, %d calls", len(turns), eng.Calls())
	}
	reqs := eng.Requests()
	for i, tr := range turns {
		if tr.Reward != 1 || tr.Note != "" {
			t.Errorf("row %d: reward %v note %q text %q", i, tr.Reward, tr.Note, tr.ResponseText)
		}
		// The masked stretch is exactly the tool response; its logprobs are 0.
		resp := eng.Tok.Encode(fmt.Sprintf("\n<|im_start|>user\n<tool_response>\n%s\n</tool_response><|im_end|>\n<|im_start|>assistant\n", answerOf(problems[i].Prompt)))
		var masked []int32
		for k, m := range tr.LossMask {
			if m == 0 {
				masked = append(masked, tr.ResponseIDs[k])
				if tr.LogProbs[k] != 0 {
					t.Errorf("row %d: masked token %d has logprob %v", i, k, tr.LogProbs[k])
				}
			}
		}
		if !slices.Equal(masked, toInt32(resp)) {
			t.Errorf("row %d: masked tokens %q, want the tool response %q", i, eng.Tok.Decode(toInt(masked)), eng.Tok.Decode(resp))
		}
		// The continuation's prompt is the first prompt plus everything so far.
		cont := reqs[2+i].Prompt
		if !slices.Equal(toInt32(cont[:len(tr.PromptIDs)]), tr.PromptIDs) || !slices.Equal(toInt32(cont[len(tr.PromptIDs):]), tr.ResponseIDs[:len(cont)-len(tr.PromptIDs)]) {
			t.Errorf("row %d: continuation prompt is not prompt + response so far", i)
		}
	}
}

func TestToolUseBadCalls(t *testing.T) {
	eng := episodetest.NewScriptedEngine(nil)
	var outputs []string
	eng.Reply = func(r engine.Request, _ int) string {
		if len(r.Prompt) > 0 {
			text := eng.Tok.Decode(r.Prompt)
			outputs = append(outputs, text[strings.LastIndex(text, "<tool_response>"):])
		}
		// Always call again: the episode must stop at MaxCalls.
		switch len(outputs) {
		case 0:
			return `<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call>`
		case 1:
			return `<tool_call>not json</tool_call>`
		case 2:
			return `<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>`
		}
		return `<tool_call>{"name": "rm", "arguments": {}}</tool_call>`
	}
	r, err := episode.NewToolUse(policy("solver", eng), episodetest.ExactVerifier{}, eng.Tok, nil, episode.Templates{}, episode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	turns, err := r.Run(ctx(t), episode.Batch{Examples: problems[:1], N: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	want := []string{"error: division by zero", "error: tool call is not valid JSON", `error: unknown tool "python"`, `error: unknown tool "rm"`}
	if len(outputs) != 4 {
		t.Fatalf("%d tool rounds, want 4 (MaxCalls): %q", len(outputs), outputs)
	}
	for i, w := range want {
		if !strings.Contains(outputs[i], w) {
			t.Errorf("tool output %d: %q lacks %q", i, outputs[i], w)
		}
	}
	if tr := turns[0]; tr.Reward != 0 || !strings.Contains(tr.Note, "stopped after 4 tool calls") {
		t.Errorf("reward %v note %q", tr.Reward, tr.Note)
	}

	// Without the calculator (a recipe's tools: [python]), calling it is
	// calling an unknown tool.
	outputs = nil
	r.Calculator, r.MaxCalls = false, 1
	if _, err := r.Run(ctx(t), episode.Batch{Examples: problems[:1], N: 1}); err != nil {
		t.Fatal(err)
	}
	if len(outputs) != 1 || !strings.Contains(outputs[0], `error: unknown tool "calculator"`) {
		t.Errorf("calculator off: tool outputs %q", outputs)
	}
}

func toInt32(x []int) []int32 {
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32(v)
	}
	return out
}

func toInt(x []int32) []int {
	out := make([]int, len(x))
	for i, v := range x {
		out[i] = int(v)
	}
	return out
}

func TestTemplateValidation(t *testing.T) {
	if err := (episode.Templates{}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range []struct {
		t    episode.Templates
		want string
	}{
		{episode.Templates{Solver: "{{.Problem"}, `template "solver"`},
		{episode.Templates{Refine: "{{.Problem}} {{.Attempt}} {{.Feedbak}}"}, `template "refine"`},
		{episode.Templates{Refine: "{{.Problem}} {{.Attempt}}"}, `template "refine": does not use .Feedback`},
		{episode.Templates{Feedback: "critique {{.Attempt}}"}, `template "feedback": does not use .Problem`},
		{episode.Templates{ToolResponse: "{{.Output}} {{template \"x\"}}"}, `template "tool_response"`},
	} {
		err := c.t.Validate()
		if err == nil || !errors.Is(err, episode.ErrBadTemplate) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.t, err, c.want)
		}
		if _, err := episode.NewSingleTurn(policy("s", episodetest.NewScriptedEngine(nil)), episodetest.ExactVerifier{}, c.t, episode.Limits{}); err == nil {
			t.Errorf("%+v: runner built with a bad template", c.t)
		}
	}
}

func TestPolicyChecks(t *testing.T) {
	eng := episodetest.NewScriptedEngine(nil)
	good := policy("solver", eng)
	bad := good
	bad.Params.MaxTokens = 0
	if _, err := episode.NewSingleTurn(bad, episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{}); err == nil || !strings.Contains(err.Error(), "MaxTokens") {
		t.Errorf("MaxTokens 0: %v", err)
	}
	if _, err := episode.NewMLMT(good, &good, episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{}); err == nil || !strings.Contains(err.Error(), "share the id") {
		t.Errorf("shared id: %v", err)
	}
	r, _ := episode.NewSingleTurn(good, episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{})
	if _, err := r.Run(ctx(t), episode.Batch{Examples: problems, N: 0}); err == nil {
		t.Error("N = 0 accepted")
	}
}

func TestCalculate(t *testing.T) {
	for _, c := range []struct{ expr, want, err string }{
		{"2+3", "5", ""},
		{"2*(3+4)", "14", ""},
		{" 7 * 6 ", "42", ""},
		{"2^10", "1024", ""},
		{"2**3**2", "512", ""},
		{"-2^2", "-4", ""},
		{"2^-1", "0.5", ""},
		{"10/4", "2.5", ""},
		{"10 % 4", "2", ""},
		{"1e3+1", "1001", ""},
		{"1_000 * 3", "3000", ""},
		{"sqrt(16)+abs(-2)", "6", ""},
		{"1/3", "0.333333333333", ""},
		{"1/0", "", "division by zero"},
		{"2 +", "", "ends early"},
		{"(1+2", "", "missing )"},
		{"2 3", "", "unexpected"},
		{"__import__('os')", "", "bad number"},
		{"10^400", "", "not a finite"},
		{"sqrt(-1)", "", "negative"},
		{strings.Repeat("(", 100) + "1" + strings.Repeat(")", 100), "", "nested deeper"},
		{strings.Repeat("-", 200) + "1", "", "nested deeper"},
		{strings.Repeat("1+", 300) + "1", "", "over the 512-byte limit"},
	} {
		got, err := episode.Calculate(c.expr)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Calculate(%.30q) = %q, %v; want error %q", c.expr, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Calculate(%q) = %q, %v; want %q", c.expr, got, err, c.want)
		}
	}
}

func FuzzCalculate(f *testing.F) {
	for _, s := range []string{"2+3", "2**3**2", "sqrt(abs(-4))", "((1))", "1e-3/7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = episode.Calculate(s) // must not panic or hang
	})
}

// ScoreAll keeps answer order whatever the worker count, and stops when
// ctx ends.
func TestScoreAllOrder(t *testing.T) {
	var answers []episode.Answer
	var want []float64
	for i := range 50 {
		text, w := `\boxed{1}`, 1.0
		switch i % 3 {
		case 0:
			text, w = `\boxed{2}`, 0
		case 1:
			text, w = " ", 0 // empty: not sent to the verifier
		}
		answers = append(answers, episode.Answer{Text: text, Ref: verify.Reference{Answer: "1"}})
		want = append(want, w)
	}
	for _, workers := range []int{0, 1, 4, 100} {
		got, notes, err := episode.ScoreAll(context.Background(), verify.Math{}, workers, episode.Limits{}, answers)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) || notes[1] != "empty answer" {
			t.Errorf("workers %d: rewards %v, note %q; want %v", workers, got, notes[1], want)
		}
	}
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := episode.ScoreAll(c, verify.Math{}, 4, episode.Limits{}, answers); err == nil {
		t.Errorf("cancelled context: no error")
	}
}

// textPrompter writes plain-text prompts, the feedback one with the hint.
type textPrompter struct{}

func (textPrompter) Solver(ex data.Example) (episode.Prompt, error) {
	return episode.Prompt{Text: "Q: " + ex.Prompt}, nil
}
func (textPrompter) Feedback(ex data.Example, a string) (episode.Prompt, error) {
	return episode.Prompt{Text: "You are a teacher. Q: " + ex.Prompt + " hint: " + ex.Hint + " try: " + a}, nil
}
func (textPrompter) StaticFeedback(ex data.Example, a string) (string, error) {
	return "look again at " + a, nil
}
func (textPrompter) Refine(ex data.Example, a, f string) (episode.Prompt, error) {
	return episode.Prompt{Text: "Q: " + ex.Prompt + " try: " + a + " Feedback on it: " + f}, nil
}
func (textPrompter) Review(ex data.Example, a string) (episode.Prompt, error) {
	return episode.Prompt{Text: "Q: " + ex.Prompt + " " + a + " Feedback on it: review"}, nil
}
func (textPrompter) ToolSolver(ex data.Example) (episode.Prompt, error) {
	return episode.Prompt{Text: "Q: " + ex.Prompt}, nil
}
func (textPrompter) ToolResponse(out string) (string, error) { return "<" + out + ">", nil }

// seedLog gives request (stage, index) the seed 1000·stage + index and
// records the calls.
func seedLog() func(stage, index int) *int64 {
	return func(stage, index int) *int64 {
		s := int64(1000*stage + index)
		return &s
	}
}

// A caller's Prompter, Seeds and reward shaping: text prompts encoded by
// the policy's tokenizer, the hint shown to the feedback policy alone,
// seeds per stage and request, the feedback credited with the
// improvement, and the refine turn replayed with static feedback.
func TestMLMTPrompterSeedsAndShaping(t *testing.T) {
	tok := tokenizer.Builtin()
	text := func(r engine.Request) string { return tok.Decode(r.Prompt) }
	solver := episodetest.NewScriptedEngine(func(r engine.Request, k int) string {
		p := text(r)
		switch {
		case strings.Contains(p, "look again"):
			return `\boxed{0}` // static feedback misleads
		case strings.Contains(p, "Feedback on it:"):
			return `Fixed: \boxed{` + answerOf(p) + `}`
		case k == 1:
			return `\boxed{` + answerOf(p) + `}` // the second sample is right at once
		}
		return `I think \boxed{1}`
	})
	teacher := episodetest.NewScriptedEngine(func(r engine.Request, _ int) string { return "Recheck." })
	sp, fp := policy("solver", solver), policy("feedback", teacher)
	sp.Tokenizer, fp.Tokenizer = tok, tok
	r := &episode.MLMT{Solver: sp, Feedback: &fp, Prompter: textPrompter{}, Verifier: episodetest.ExactVerifier{}, FeedbackImprovement: true}
	exs := []data.Example{{Prompt: "What is 2+3?", Hint: "five", Ref: verify.Reference{Answer: "5"}}}
	b := episode.Batch{Examples: exs, N: 2, FirstGroupID: 4, Seeds: seedLog()}
	turns, err := r.Run(ctx(t), b)
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	// Episode 0: wrong, then right (the feedback earns +1); episode 1:
	// right, then right (0).
	want := []struct {
		turn          int32
		reward, final float64
	}{{0, 0, 1}, {1, 1, 1}, {2, 1, 1}, {0, 1, 1}, {1, 0, 1}, {2, 1, 1}}
	if len(turns) != len(want) {
		t.Fatalf("%d rows, want %d", len(turns), len(want))
	}
	for i, w := range want {
		if tr := turns[i]; tr.Turn != w.turn || tr.Reward != w.reward || tr.FinalReward != w.final {
			t.Errorf("row %d: turn %d reward %v final %v, want %+v", i, tr.Turn, tr.Reward, tr.FinalReward, w)
		}
	}
	seeds := func(reqs []engine.Request) []int64 {
		var out []int64
		for _, q := range reqs {
			out = append(out, *q.Params.Seed)
		}
		return out
	}
	if got := seeds(solver.Requests()); !slices.Equal(got, []int64{0, 2000, 2001}) {
		t.Errorf("solver seeds %v, want turn 0's request 0, then episodes 0 and 1 of the final stage", got)
	}
	if got := seeds(teacher.Requests()); !slices.Equal(got, []int64{1000, 1001}) {
		t.Errorf("feedback seeds %v", got)
	}
	for _, q := range solver.Requests() {
		if len(q.Messages) != 0 || strings.Contains(text(q), "five") {
			t.Errorf("solver request %s: messages %v, prompt %q (the hint is the feedback policy's)", q.ID, q.Messages, text(q))
		}
	}
	if p := text(teacher.Requests()[0]); !strings.Contains(p, "hint: five try: I think") {
		t.Errorf("feedback prompt %q", p)
	}

	// The refine turn again with static feedback: the same attempts and
	// seeds, another feedback text.
	static, err := r.RefineStatic(ctx(t), b, turns)
	if err != nil {
		t.Fatal(err)
	}
	reqs := solver.Requests()[3:]
	if len(static) != 4 || len(reqs) != 2 || !slices.Equal(seeds(reqs), []int64{2000, 2001}) || !strings.Contains(text(reqs[0]), "look again at I think") {
		t.Fatalf("%d rows, %d requests %v", len(static), len(reqs), reqs)
	}
	for i, tr := range static {
		if tr.Turn != int32(2*(i%2)) || tr.FinalReward != 0 || (tr.Turn == 0 && tr.Reward != turns[3*(i/2)].Reward) {
			t.Errorf("static row %d: turn %d reward %v final %v", i, tr.Turn, tr.Reward, tr.FinalReward)
		}
	}
}

// SCoRe's second turn trains on r1 + α(r1 − r0).
func TestSCoReAlpha(t *testing.T) {
	eng := episodetest.NewScriptedEngine(func(r engine.Request, k int) string {
		if len(r.Messages) > 1 {
			return `\boxed{5}`
		}
		return []string{`\boxed{1}`, `\boxed{5}`}[k]
	})
	r, err := episode.NewSCoRe(policy("solver", eng), episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	r.Alpha = 2
	turns, err := r.Run(ctx(t), episode.Batch{Examples: problems[:1], N: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Wrong then right: 1 + 2·(1 − 0) = 3; right twice: 1.
	for i, w := range []float64{0, 3, 1, 1} {
		if turns[i].Reward != w || turns[i].FinalReward != 1 {
			t.Errorf("row %d: reward %v final %v, want %v and 1", i, turns[i].Reward, turns[i].FinalReward, w)
		}
	}
}

// RL-guided SCoRe: MLMT's refine turn trains on r2 + α(r2 − r1); the
// feedback turn and FinalReward keep r2.
func TestMLMTShapedRefine(t *testing.T) {
	tok := tokenizer.Builtin()
	solver := episodetest.NewScriptedEngine(func(r engine.Request, k int) string {
		p := tok.Decode(r.Prompt)
		switch {
		case strings.Contains(p, "Feedback on it:"):
			return `Fixed: \boxed{` + answerOf(p) + `}`
		case k == 1:
			return `\boxed{` + answerOf(p) + `}`
		}
		return `I think \boxed{1}`
	})
	teacher := episodetest.NewScriptedEngine(func(engine.Request, int) string { return "Recheck." })
	sp, fp := policy("solver", solver), policy("feedback", teacher)
	sp.Tokenizer, fp.Tokenizer = tok, tok
	r := &episode.MLMT{Solver: sp, Feedback: &fp, Prompter: textPrompter{}, Verifier: episodetest.ExactVerifier{}, ShapeRefine: true, Alpha: 2}
	exs := []data.Example{{Prompt: "What is 2+3?", Ref: verify.Reference{Answer: "5"}}}
	turns, err := r.Run(ctx(t), episode.Batch{Examples: exs, N: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Episode 0: wrong then right, 1 + 2·(1 − 0) = 3; episode 1: right twice, 1.
	for i, w := range []float64{0, 1, 3, 1, 1, 1} {
		if turns[i].Reward != w || turns[i].FinalReward != 1 {
			t.Errorf("row %d (turn %d): reward %v final %v, want %v and 1", i, turns[i].Turn, turns[i].Reward, turns[i].FinalReward, w)
		}
	}
}

// Shared: one policy (id and engine) in both roles; its three calls go to
// the one engine and every row carries its id.
func TestMLMTSharedPolicy(t *testing.T) {
	eng := episodetest.NewScriptedEngine(mlmtScript)
	p := policy("solver", eng)
	r, err := episode.NewMLMT(p, &p, episodetest.ExactVerifier{}, episode.Templates{}, episode.Limits{})
	if err == nil || !strings.Contains(err.Error(), "share the id") {
		t.Fatalf("the same id without Shared: %v", err)
	}
	r = &episode.MLMT{Solver: p, Feedback: &p, Prompter: mustPrompter(t), Verifier: episodetest.ExactVerifier{}, Shared: true}
	turns, err := r.Run(ctx(t), episode.Batch{Examples: problems, N: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkTurns(t, turns)
	if len(turns) != 12 || eng.Calls() != 3 {
		t.Fatalf("%d rows, %d engine calls; want 12 and 3", len(turns), eng.Calls())
	}
	for i, tr := range turns {
		if tr.PolicyID != "solver" || tr.Turn != int32(i%3) {
			t.Errorf("row %d: policy %s turn %d", i, tr.PolicyID, tr.Turn)
		}
	}
}

func mustPrompter(t *testing.T) episode.Prompter {
	t.Helper()
	pr, err := episode.Templates{}.Prompter()
	if err != nil {
		t.Fatal(err)
	}
	return pr
}
