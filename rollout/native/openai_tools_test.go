package native

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
)

// The chat that testdata/openai/tools.mjs sends, and the tool call a
// model taught on it answers.
const (
	toolsQuestion = "What is 2 + 3?"
	toolsDef      = `{"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}`
	toolsAnswer   = "I will add.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>"
)

// toolCaller is an engine whose model was trained (SFT, until its greedy
// answer is toolsAnswer) to answer the chat of toolsQuestion with tools
// [toolsDef] by calling add.
func toolCaller(t *testing.T) *Engine {
	t.Helper()
	tok := tokenizer.Builtin()
	b, _ := parseBody([]byte(`{"messages": [{"role": "user", "content": "` + toolsQuestion + `"}], "tools": [` + toolsDef + `]}`))
	msgs, aerr := b.messages()
	if aerr != nil {
		t.Fatal(aerr)
	}
	tools, aerr := b.tools()
	if aerr != nil {
		t.Fatal(aerr)
	}
	prompt := tok.EncodeChat(withTools(msgs, tools), true)
	answer := append(tok.Encode(toolsAnswer), tok.Encode(tokenizer.IMEnd)...)
	cfg := nativetest.Config()
	cfg.MaxPositions = 1024
	lc := learner.DefaultConfig()
	lc.Model, lc.Seed, lc.Algorithm, lc.LR = &cfg, 1, learner.SFT, 1e-2
	l, err := learner.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	batch := learner.Batch{Prompts: [][]int32{toInt32(prompt)}, Responses: [][]int32{toInt32(answer)}}
	var e *Engine
	for round := range 20 {
		for range 25 {
			if _, err := l.Train(batch); err != nil {
				t.Fatal(err)
			}
		}
		if e, err = New(l.Model(), tok, Config{}); err != nil {
			t.Fatal(err)
		}
		res, err := e.Generate(testCtx(t), []engine.Request{{Prompt: prompt, Params: engine.SamplingParams{MaxTokens: len(answer) + 4}}})
		if err == nil && res[0].Samples[0].Text == toolsAnswer {
			t.Logf("taught in %d SFT steps", (round+1)*25)
			t.Cleanup(func() { e.Close() })
			return e
		}
		e.Close()
	}
	t.Fatal("the model did not learn the tool call in 500 SFT steps")
	return nil
}

// toolsReport is what testdata/openai/tools.mjs prints.
type toolsReport struct {
	Chat struct {
		Content   *string `json:"content"`
		Finish    string  `json:"finish"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"toolCalls"`
	} `json:"chat"`
	Stream struct {
		Content   *string `json:"content"`
		Finish    string  `json:"finish"`
		ToolCalls []struct {
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"toolCalls"`
	} `json:"stream"`
	None struct {
		Content   string `json:"content"`
		ToolCalls any    `json:"toolCalls"`
		Finish    string `json:"finish"`
	} `json:"none"`
	FollowUp struct {
		PromptTokens int `json:"promptTokens"`
	} `json:"followUp"`
	Required *clientError `json:"required"`
	BadTool  *clientError `json:"badTool"`
}

// TestOpenAINodeClientTools runs the official openai npm package against
// the server with a model taught to call a tool: tools in, tool_calls
// out, plain and streamed, tool_choice none, a tool-call history sent
// back, and refusals as the client's typed errors.
func TestOpenAINodeClientTools(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	dir := filepath.Join("testdata", "openai")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		t.Skip("the openai npm package is not installed: run npm ci in rollout/native/testdata/openai")
	}
	e := toolCaller(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(e, "tiny", Limits{}, nil).HTTPServer()
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "tools.mjs", "http://"+ln.Addr().String()+"/v1", "tiny", toolsQuestion, toolsDef)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node tools.mjs: %v\n%s", err, stderr.String())
	}
	t.Logf("client: %s", out)
	var r toolsReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	c := r.Chat
	if c.Content == nil || *c.Content != "I will add.\n" || c.Finish != "tool_calls" || len(c.ToolCalls) != 1 {
		t.Fatalf("chat: %s", out)
	}
	tc := c.ToolCalls[0]
	if !strings.HasPrefix(tc.ID, "call_") || tc.Type != "function" || tc.Function.Name != "add" || tc.Function.Arguments != `{"a":2,"b":3}` {
		t.Errorf("tool call %+v", tc)
	}
	s := r.Stream
	if s.Content == nil || *s.Content != "I will add.\n" || s.Finish != "tool_calls" || len(s.ToolCalls) != 1 ||
		s.ToolCalls[0].Function.Name != "add" || s.ToolCalls[0].Function.Arguments != `{"a":2,"b":3}` {
		t.Errorf("streamed: %s", out)
	}
	if r.None.ToolCalls != nil || r.None.Finish == "tool_calls" {
		t.Errorf("tool_choice none: %+v", r.None)
	}
	b, _ := parseBody([]byte(`{"messages": [{"role": "user", "content": "` + toolsQuestion + `"},
		{"role": "assistant", "content": "I will add.\n", "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": "{\"a\":2,\"b\":3}"}}]},
		{"role": "tool", "content": "5"}], "tools": [` + toolsDef + `]}`))
	msgs, _ := b.messages()
	tools, _ := b.tools()
	if want := len(tokenizer.Builtin().EncodeChat(withTools(msgs, tools), true)); r.FollowUp.PromptTokens != want {
		t.Errorf("follow-up with the tool's answer: %d prompt tokens, want %d", r.FollowUp.PromptTokens, want)
	}
	if r.Required == nil || r.Required.Status != 400 || r.Required.Param != "tool_choice" || r.Required.Name != "BadRequestError" {
		t.Errorf("tool_choice required: %+v", r.Required)
	}
	if r.BadTool == nil || r.BadTool.Status != 400 || r.BadTool.Param != "tools[0].function.name" {
		t.Errorf("a bad tool name: %+v", r.BadTool)
	}
}
