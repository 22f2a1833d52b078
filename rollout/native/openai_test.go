package native

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
)

// clientReport is what testdata/openai/client.mjs prints.
type clientReport struct {
	Models     []string `json:"models"`
	Completion struct {
		Text           string    `json:"text"`
		Finish         string    `json:"finish"`
		TokenIDs       []int     `json:"tokenIDs"`
		PromptTokenIDs []int     `json:"promptTokenIDs"`
		Logprobs       []float32 `json:"logprobs"`
		Top            []int     `json:"top"`
		Usage          usageJSON `json:"usage"`
	} `json:"completion"`
	CompletionStream struct {
		Text     string `json:"text"`
		TokenIDs []int  `json:"tokenIDs"`
	} `json:"completionStream"`
	Chat struct {
		PromptTokenIDs []int `json:"promptTokenIDs"`
		Choices        []struct {
			Content  string    `json:"content"`
			Role     string    `json:"role"`
			Finish   string    `json:"finish"`
			TokenIDs []int     `json:"tokenIDs"`
			Logprobs []float32 `json:"logprobs"`
			Top      []int     `json:"top"`
		} `json:"choices"`
		Usage usageJSON `json:"usage"`
	} `json:"chat"`
	ChatStream struct {
		Choices []struct {
			Content  string `json:"content"`
			TokenIDs []int  `json:"tokenIDs"`
		} `json:"choices"`
		Usage *usageJSON `json:"usage"`
	} `json:"chatStream"`
	UnknownModel *clientError `json:"unknownModel"`
	BadField     *clientError `json:"badField"`
}

type usageJSON struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
}

type clientError struct {
	Status  int    `json:"status"`
	Name    string `json:"name"`
	Param   string `json:"param"`
	Message string `json:"message"`
}

// TestOpenAINodeClient runs the official openai npm package, unchanged,
// against the server on 127.0.0.1. CI installs it (scripts/setup.sh runs
// npm ci in testdata/openai); without node or the package the test skips.
func TestOpenAINodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	dir := filepath.Join("testdata", "openai")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		t.Skip("the openai npm package is not installed: run npm ci in rollout/native/testdata/openai")
	}
	url, e := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", url+"/v1", "tiny")
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.mjs: %v\n%s", err, stderr.String())
	}
	var r clientReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}

	if len(r.Models) != 1 || r.Models[0] != "tiny" {
		t.Errorf("models %v", r.Models)
	}
	tok := tokenizer.Builtin()
	want, err := e.Generate(testCtx(t), []engine.Request{{Prompt: tok.Encode("Tom has 3 apples."), Params: engine.SamplingParams{MaxTokens: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	ws := want[0].Samples[0]
	c := r.Completion
	if c.Text != ws.Text || c.Finish != ws.FinishReason || !equalInts(c.TokenIDs, ws.TokenIDs) || !equalInts(c.PromptTokenIDs, want[0].PromptTokenIDs) {
		t.Errorf("completion %+v, engine %+v", c, ws)
	}
	for k := range ws.LogProbs {
		if k >= len(c.Logprobs) || c.Logprobs[k] != ws.LogProbs[k] || c.Top[k] == 0 || c.Top[k] > 2 {
			t.Errorf("completion logprobs %v (top sizes %v), engine %v", c.Logprobs, c.Top, ws.LogProbs)
			break
		}
	}
	if c.Usage.Prompt != len(want[0].PromptTokenIDs) || c.Usage.Completion != len(ws.TokenIDs) || c.Usage.Total != c.Usage.Prompt+c.Usage.Completion {
		t.Errorf("completion usage %+v", c.Usage)
	}
	if r.CompletionStream.Text != c.Text || !equalInts(r.CompletionStream.TokenIDs, c.TokenIDs) {
		t.Errorf("streamed completion %+v, whole %q %v", r.CompletionStream, c.Text, c.TokenIDs)
	}

	wantPrompt := tok.EncodeChat([]tokenizer.Message{{Role: "user", Content: "What is 2 + 2?"}}, true)
	if !equalInts(r.Chat.PromptTokenIDs, wantPrompt) || len(r.Chat.Choices) != 2 {
		t.Fatalf("chat %+v", r.Chat)
	}
	total := 0
	for i, ch := range r.Chat.Choices {
		total += len(ch.TokenIDs)
		if ch.Role != "assistant" || len(ch.Logprobs) != len(ch.TokenIDs) || len(ch.TokenIDs) == 0 {
			t.Errorf("chat choice %d: %+v", i, ch)
		}
		for _, n := range ch.Top {
			if n != 3 {
				t.Errorf("chat choice %d: top logprob counts %v, want 3 each", i, ch.Top)
				break
			}
		}
		// The seed makes the streamed request repeat the whole one.
		if i < len(r.ChatStream.Choices) {
			s := r.ChatStream.Choices[i]
			if s.Content != ch.Content || !equalInts(s.TokenIDs, ch.TokenIDs) {
				t.Errorf("chat choice %d: streamed %q %v, whole %q %v", i, s.Content, s.TokenIDs, ch.Content, ch.TokenIDs)
			}
		}
	}
	if r.Chat.Usage.Completion != total || r.ChatStream.Usage == nil || *r.ChatStream.Usage != r.Chat.Usage {
		t.Errorf("chat usage %+v, streamed usage %+v, %d tokens", r.Chat.Usage, r.ChatStream.Usage, total)
	}
	if u := r.UnknownModel; u == nil || u.Status != 404 || u.Name != "NotFoundError" || !strings.Contains(u.Message, "no-such-model") {
		t.Errorf("unknown model: %+v", u)
	}
	if b := r.BadField; b == nil || b.Status != 400 || b.Name != "BadRequestError" || b.Param != "top_p" {
		t.Errorf("bad field: %+v", b)
	}
}
