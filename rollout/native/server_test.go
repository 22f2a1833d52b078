package native

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
)

// startServer serves a test engine on a real socket on 127.0.0.1.
func startServer(t *testing.T) (string, *Engine) {
	t.Helper()
	return startServerLimits(t, Limits{})
}

// startServerLimits is startServer within lim.
func startServerLimits(t *testing.T, lim Limits) (string, *Engine) {
	t.Helper()
	e, _ := testEngine(t, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(e, "tiny", lim, nil).HTTPServer()
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), e
}

var client = &http.Client{Timeout: 30 * time.Second}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

type completionResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int    `json:"index"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
		TokenIDs     []int  `json:"token_ids"`
		PromptIDs    []int  `json:"prompt_token_ids"`
		Message      struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Logprobs *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []float32            `json:"token_logprobs"`
			TopLogprobs   []map[string]float32 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
			Content       []struct {
				Token       string  `json:"token"`
				Logprob     float32 `json:"logprob"`
				Bytes       []int   `json:"bytes"`
				TopLogprobs []struct {
					Token   string  `json:"token"`
					Logprob float32 `json:"logprob"`
				} `json:"top_logprobs"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
	PromptIDs []int `json:"prompt_token_ids"`
	Usage     struct {
		Prompt, Completion, Total int
	} `json:"usage"`
}

func (u *completionResp) UnmarshalJSON(b []byte) error {
	type plain completionResp
	var aux struct {
		plain
		Usage struct {
			P int `json:"prompt_tokens"`
			C int `json:"completion_tokens"`
			T int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*u = completionResp(aux.plain)
	u.Usage.Prompt, u.Usage.Completion, u.Usage.Total = aux.Usage.P, aux.Usage.C, aux.Usage.T
	return nil
}

func TestServerCompletions(t *testing.T) {
	url, e := startServer(t)
	tok := tokenizer.Builtin()
	code, b := post(t, url+"/v1/completions", `{"model":"tiny","prompt":"Tom has 3 apples.","max_tokens":12,"temperature":0,
		"logprobs":2,"return_token_ids":true}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	var r completionResp
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	// The engine's own answer to the same request.
	want, err := e.Generate(testCtx(t), []engine.Request{{Prompt: tok.Encode("Tom has 3 apples."), Params: engine.SamplingParams{MaxTokens: 12}}})
	if err != nil {
		t.Fatal(err)
	}
	ws := want[0].Samples[0]
	if r.Object != "text_completion" || !strings.HasPrefix(r.ID, "cmpl-") || r.Model != "tiny" || len(r.Choices) != 1 {
		t.Fatalf("response %s", b)
	}
	ch := r.Choices[0]
	if ch.Text != ws.Text || !equalInts(ch.TokenIDs, ws.TokenIDs) || ch.FinishReason != ws.FinishReason || !equalInts(ch.PromptIDs, want[0].PromptTokenIDs) {
		t.Errorf("choice %+v, engine %+v", ch, ws)
	}
	if ch.Logprobs == nil || len(ch.Logprobs.TokenLogprobs) != len(ws.LogProbs) || len(ch.Logprobs.TopLogprobs) != len(ws.LogProbs) {
		t.Fatalf("logprobs %s", b)
	}
	for k, lp := range ws.LogProbs {
		if ch.Logprobs.TokenLogprobs[k] != lp || len(ch.Logprobs.TopLogprobs[k]) > 2 || len(ch.Logprobs.TopLogprobs[k]) == 0 {
			t.Errorf("token %d: logprob %v top %v, engine %v", k, ch.Logprobs.TokenLogprobs[k], ch.Logprobs.TopLogprobs[k], lp)
		}
	}
	if r.Usage.Prompt != len(want[0].PromptTokenIDs) || r.Usage.Completion != len(ws.TokenIDs) || r.Usage.Total != r.Usage.Prompt+r.Usage.Completion {
		t.Errorf("usage %+v", r.Usage)
	}

	// Two prompts (one as token ids) with n = 2: four choices in order.
	code, b = post(t, url+"/v1/completions", `{"prompt":[[5,6,7],[8,9]],"max_tokens":3,"n":2,"seed":1}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	r = completionResp{}
	json.Unmarshal(b, &r)
	if len(r.Choices) != 4 || r.Usage.Prompt != 5 || r.Usage.Completion != 12 {
		t.Fatalf("two prompts, n=2: %s", b)
	}
	for i, c := range r.Choices {
		if c.Index != i || c.Logprobs != nil || c.TokenIDs != nil {
			t.Errorf("choice %d: %+v", i, c)
		}
	}
}

// readSSE returns the data payloads of an event stream.
func readSSE(t *testing.T, body io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "data: ") {
			t.Fatalf("stream line %q", line)
		}
		out = append(out, strings.TrimPrefix(line, "data: "))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestServerChatStreamMatchesWhole(t *testing.T) {
	url, _ := startServer(t)
	req := `{"model":"tiny","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"What is 2 + 2?"}]}],
		"max_tokens":20,"temperature":0.8,"seed":4,"n":2,"logprobs":true,"top_logprobs":2,"return_token_ids":true%s}`
	code, b := post(t, url+"/v1/chat/completions", strings.Replace(req, "%s", "", 1))
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	var whole completionResp
	json.Unmarshal(b, &whole)
	if whole.Object != "chat.completion" || len(whole.Choices) != 2 || len(whole.PromptIDs) == 0 {
		t.Fatalf("response %s", b)
	}
	wantPrompt := tokenizer.Builtin().EncodeChat([]tokenizer.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "What is 2 + 2?"}}, true)
	if !equalInts(whole.PromptIDs, wantPrompt) {
		t.Errorf("prompt_token_ids %v, want %v", whole.PromptIDs, wantPrompt)
	}
	for _, c := range whole.Choices {
		if c.Message.Role != "assistant" || c.Logprobs == nil || len(c.Logprobs.Content) != len(c.TokenIDs) {
			t.Fatalf("choice %+v", c)
		}
	}

	resp, err := client.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(strings.Replace(req, "%s", `,"stream":true,"stream_options":{"include_usage":true}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := readSSE(t, resp.Body)
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %v", events)
	}
	text := make([]string, 2)
	ids := make([][]int, 2)
	finish := make([]string, 2)
	var usage completionResp
	for _, ev := range events[:len(events)-1] {
		var chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
				TokenIDs     []int   `json:"token_ids"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev), &chunk); err != nil {
			t.Fatal(err)
		}
		if chunk.Object != "chat.completion.chunk" {
			t.Fatalf("chunk %s", ev)
		}
		if len(chunk.Choices) == 0 {
			json.Unmarshal([]byte(ev), &usage)
			continue
		}
		c := chunk.Choices[0]
		if len(ids[c.Index]) == 0 && c.Delta.Role != "assistant" {
			t.Errorf("first chunk of choice %d has no assistant role: %s", c.Index, ev)
		}
		text[c.Index] += c.Delta.Content
		ids[c.Index] = append(ids[c.Index], c.TokenIDs...)
		if c.FinishReason != nil {
			finish[c.Index] = *c.FinishReason
		}
	}
	for i, c := range whole.Choices {
		if text[i] != c.Message.Content || !equalInts(ids[i], c.TokenIDs) || finish[i] != c.FinishReason {
			t.Errorf("choice %d: streamed %q %v %s, whole %q %v %s", i, text[i], ids[i], finish[i], c.Message.Content, c.TokenIDs, c.FinishReason)
		}
	}
	if usage.Usage.Completion != len(whole.Choices[0].TokenIDs)+len(whole.Choices[1].TokenIDs) || usage.Usage.Prompt != len(wantPrompt) {
		t.Errorf("usage %+v", usage.Usage)
	}
}

func TestServerErrors(t *testing.T) {
	url, _ := startServer(t)
	tests := []struct {
		path, body string
		status     int
		param      string
		want       string
	}{
		{"/v1/completions", `{"model":"gpt-4","prompt":"x"}`, 404, "model", `the model "gpt-4" does not exist`},
		{"/v1/completions", `{"prompt":"x","temperature":"hot"}`, 400, "temperature", "want a number"},
		{"/v1/completions", `{"prompt":"x","max_tokens":0}`, 400, "max_tokens", "want an integer in [1, 256]"},
		{"/v1/completions", `{"prompt":"x","n":1.5}`, 400, "n", "want an integer"},
		{"/v1/completions", `{"prompt":"x","top_p":2}`, 400, "top_p", "want a number in [0, 1]"},
		{"/v1/completions", `{"prompt":"x","stop":[""]}`, 400, "stop", "entry 0 is an empty string"},
		{"/v1/completions", `{"prompt":"x","stop":[` + strings.Repeat(`"s",`, engine.MaxStopStrings) + `"s"]}`, 400, "stop", "65 stop strings, more than the 64 allowed"},
		{"/v1/completions", `{"prompt":"x","stop":["a","` + strings.Repeat("s", engine.MaxStopBytes+1) + `"]}`, 400, "stop", "stop string 1 is 1025 bytes, more than the 1024 allowed"},
		{"/v1/completions", `{"prompt":"x","stop":"` + strings.Repeat("s", engine.MaxStopBytes+1) + `"}`, 400, "stop", "stop string 0 is 1025 bytes"},
		{"/v1/completions", `{"prompt":"x","stop":[` + strings.Repeat(`"`+strings.Repeat("s", 1000)+`",`, 9) + `"s"]}`, 400, "stop", "9001 bytes in all, more than the 8192 allowed"},
		{"/v1/completions", `{"prompt":"x","stop_token_ids":[` + strings.Repeat(`1,`, engine.MaxStopTokenIDs) + `1]}`, 400, "stop_token_ids", "1025 stop token ids, more than the 1024 allowed"},
		{"/v1/completions", `{"prompt":"x","logprobs":21}`, 400, "logprobs", "[0, 20]"},
		{"/v1/completions", `{"prompt":"x","echo":true}`, 400, "echo", "not supported"},
		{"/v1/completions", `{"prompt":[1,99999]}`, 400, "prompt", "id 99999 out of range"},
		{"/v1/completions", `{"max_tokens":3}`, 400, "prompt", "missing"},
		{"/v1/completions", `{"prompt":[1,2,3],"max_tokens":255}`, 400, "", "exceeds the model's context of 256 tokens"},
		{"/v1/completions", `{"prompt":"x","n":100}`, 400, "", "n = 100 exceeds the engine's batch"},
		{"/v1/completions", `not json`, 400, "", "not a JSON object"},
		{"/v1/chat/completions", `{"messages":[]}`, 400, "messages", "empty list"},
		{"/v1/chat/completions", `{"messages":[{"role":"robot","content":"x"}]}`, 400, "messages[0].role", "robot"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "messages[0].content", "only"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"top_logprobs":3}`, 400, "top_logprobs", "needs logprobs"},
		{"/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"x"}]}`, 404, "model", "does not exist"},
		{"/v1/embeddings", `{}`, 404, "", "no route"},
	}
	for _, tc := range tests {
		code, b := post(t, url+tc.path, tc.body)
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil {
			t.Errorf("%s %s: body %s is not JSON", tc.path, tc.body, b)
			continue
		}
		param := ""
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		if code != tc.status || param != tc.param || !strings.Contains(e.Error.Message, tc.want) || e.Error.Type == "" {
			t.Errorf("%s %s: status %d param %q body %s; want %d, param %q, message with %q", tc.path, tc.body, code, param, b, tc.status, tc.param, tc.want)
		}
	}
}

func TestServerModelsAndHealth(t *testing.T) {
	url, _ := startServer(t)
	get := func(path string) (int, []byte) {
		resp, err := client.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, _ := get("/health"); code != 200 {
		t.Errorf("health: %d", code)
	}
	code, b := get("/v1/models")
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
			MaxLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	json.Unmarshal(b, &list)
	if code != 200 || list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "tiny" || list.Data[0].MaxLen != 256 {
		t.Errorf("models: %d %s", code, b)
	}
	if code, b := get("/v1/models/tiny"); code != 200 || !bytes.Contains(b, []byte(`"id":"tiny"`)) {
		t.Errorf("model tiny: %d %s", code, b)
	}
	if code, _ := get("/v1/models/other"); code != 404 {
		t.Errorf("model other: %d, want 404", code)
	}
}
