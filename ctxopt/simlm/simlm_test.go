package simlm

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/task"
)

// The model reads every built-in word problem and arithmetic question:
// its exact computation gives the reference answer.
func TestParsesBuiltinProblems(t *testing.T) {
	for _, kind := range []string{task.Word, task.Arithmetic} {
		for level := 1; level <= task.MaxLevel; level++ {
			g, err := task.New(task.Config{Seed: 3, Kinds: []string{kind}, Level: level})
			if err != nil {
				t.Fatal(err)
			}
			ps, err := g.Generate(task.Train, 40)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				pr, err := parseProblem(p.Question)
				if err != nil {
					t.Fatalf("%s: %q: %v", p.ID, p.Question, err)
				}
				vals := make([]int64, len(pr.steps))
				for i, s := range pr.steps {
					vals[i] = apply(s.op, operand(vals, s.left, s.lv), operand(vals, s.right, s.rv))
				}
				if got := strconv.FormatInt(vals[len(vals)-1], 10); got != p.Answer {
					t.Fatalf("%s: %q: computed %s, want %s (steps %+v)", p.ID, p.Question, got, p.Answer, pr.steps)
				}
			}
		}
	}
	if _, err := parseProblem("Write a poem."); err == nil {
		t.Error("a question the model cannot read: no error")
	}
}

func msgs(system, user string, extra ...string) []tokenizer.Message {
	m := []tokenizer.Message{{Role: "system", Content: system}, {Role: "user", Content: user}}
	for i, e := range extra {
		role := "assistant"
		if i%2 == 1 {
			role = "user"
		}
		m = append(m, tokenizer.Message{Role: role, Content: e})
	}
	return m
}

func generate(t *testing.T, m []tokenizer.Message, maxTokens int, seed int64) engine.Sample {
	t.Helper()
	res, err := Engine{}.Generate(context.Background(), []engine.Request{{ID: "r", Messages: m, Params: engine.SamplingParams{MaxTokens: maxTokens, Seed: &seed}}})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Samples[0]
}

// With a calculator the reasoner asks for the hard multiplication, and
// uses the result it is sent back.
func TestToolCallsAreReplayedWithTheirResults(t *testing.T) {
	sys := "You are the reasoner of a team.\nTools: calculator.\nToken budget: 256.\n"
	user := "Question:\nWhat is 47 * 89?\n\n"
	s := generate(t, msgs(sys, user), 256, 1)
	want := `<tool_call>{"arguments":{"expression":"47 * 89"},"name":"calculator"}</tool_call>`
	if s.Text != want {
		t.Fatalf("first segment %q, want %q", s.Text, want)
	}
	// Whatever the tool says is what the model writes down.
	s = generate(t, msgs(sys, user, s.Text, "<tool_response>\n4183\n</tool_response>"), 256, 1)
	if !strings.Contains(s.Text, "47 * 89 = 4183.") || !strings.Contains(s.Text, "So the result is 4183.") {
		t.Fatalf("after the tool response: %q", s.Text)
	}
	s = generate(t, msgs(sys, user, want, "<tool_response>\n1\n</tool_response>"), 256, 1)
	if !strings.Contains(s.Text, "So the result is 1.") {
		t.Fatalf("the model did not use the tool's answer: %q", s.Text)
	}
}

func TestBudgetCutsTheResponse(t *testing.T) {
	sys := "You are the reasoner of a team.\nTools: none.\nToken budget: 512.\nRestate the question in your own words first.\n"
	user := "Question:\nOmar has 27 books. He shares them equally with 2 friends and keeps one share. Then the number of books he has doubles. He gives 6 to a classmate. How many books does Omar have now?\n\n"
	full := generate(t, msgs(sys, user), 512, 1)
	cut := generate(t, msgs(sys, user), 10, 1)
	if full.FinishReason != "stop" || cut.FinishReason != "length" {
		t.Fatalf("finish reasons %q and %q, want stop and length", full.FinishReason, cut.FinishReason)
	}
	if len(cut.TokenIDs) != 10 || len(full.TokenIDs) <= 10 || !strings.HasPrefix(full.Text, cut.Text) {
		t.Fatalf("cut response of %d tokens %q is not the first 10 of %q", len(cut.TokenIDs), cut.Text, full.Text)
	}
}

func TestRefusesBadRequests(t *testing.T) {
	seed := int64(1)
	for name, r := range map[string]engine.Request{
		"no messages": {ID: "a", Prompt: []int{1, 2}, Params: engine.SamplingParams{MaxTokens: 4}},
		"max tokens":  {ID: "b", Messages: msgs("s", "u"), Params: engine.SamplingParams{MaxTokens: 0}},
		"context":     {ID: "c", Messages: msgs("s", "u"), Params: engine.SamplingParams{MaxTokens: ContextTokens, Seed: &seed}},
		"huge":        {ID: "d", Messages: msgs(strings.Repeat("x", maxPromptBytes), "u"), Params: engine.SamplingParams{MaxTokens: 4}},
	} {
		if _, err := (Engine{}).Generate(context.Background(), []engine.Request{r}); !errors.Is(err, engine.ErrBadRequest) {
			t.Errorf("%s: error %v, want ErrBadRequest", name, err)
		}
	}
}

// Mental arithmetic slips more on bigger numbers; the same seed gives the
// same response.
func TestMentalErrorsGrowWithNumberSize(t *testing.T) {
	sys := "You are the answerer of a team.\nTools: none.\nToken budget: 64.\nEnd with the line #### <answer>.\n"
	wrong := func(q, answer string) int {
		n := 0
		for seed := range int64(400) {
			s := generate(t, msgs(sys, "Question:\n"+q+"\n\n"), 64, seed)
			if again := generate(t, msgs(sys, "Question:\n"+q+"\n\n"), 64, seed); again.Text != s.Text {
				t.Fatalf("seed %d: %q then %q", seed, s.Text, again.Text)
			}
			if s.Text != "#### "+answer {
				n++
			}
		}
		return n
	}
	small, big := wrong("What is 5 + 7?", "12"), wrong("What is 47 * 89?", "4183")
	if !(small < big) {
		t.Errorf("wrong answers: %d of 400 on 5 + 7, %d of 400 on 47 * 89; want fewer on the small one", small, big)
	}
	t.Logf("wrong answers in 400: 5 + 7: %d, 47 * 89: %d", small, big)
}

// Verbatim: the answerer that sends a whole arithmetic question to a tool
// writes its expression as the question does (python with // for
// division); by default, and for word problems, the parenthesised form.
func TestVerbatimExpressions(t *testing.T) {
	call := func(e Engine, tools, q string) string {
		t.Helper()
		sys := "You are the answerer of a team.\nTools: " + tools + ".\nToken budget: 256.\n"
		seed := int64(1)
		res, err := e.Generate(context.Background(), []engine.Request{{ID: "r", Messages: msgs(sys, "Question:\n"+q+"\n\n"), Params: engine.SamplingParams{MaxTokens: 256, Seed: &seed}}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Samples[0].Text
	}
	for _, tc := range []struct {
		e           Engine
		tools, q    string
		wantSnippet string
	}{
		{Engine{}, "calculator", "What is 18 - 34 + 53 * 23 * 5?", `"((18 - 34) + ((53 * 23) * 5))"`},
		{Engine{Verbatim: true}, "calculator", "What is 18 - 34 + 53 * 23 * 5?", `"18 - 34 + 53 * 23 * 5"`},
		{Engine{Verbatim: true}, "calculator", "What is (84 - 12) / 8?", `"(84 - 12) / 8"`},
		{Engine{Verbatim: true}, "python", "What is (84 - 12) / 8?", `"print((84 - 12) // 8)"`},
		{Engine{Verbatim: true}, "calculator", "Sam has 8 cards. He buys 5 bags with 6 cards each. How many cards does Sam have now?", `"(8 + (5 * 6))"`},
	} {
		if got := call(tc.e, tc.tools, tc.q); !strings.Contains(got, tc.wantSnippet) {
			t.Errorf("verbatim %v, %s, %q: %q, want it to contain %s", tc.e.Verbatim, tc.tools, tc.q, got, tc.wantSnippet)
		}
	}
}
