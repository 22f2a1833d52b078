package native

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/tokenizer"
)

func TestPyJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":[1,2.50,{"x":null}],"c":"<é>"}`, `{"b": 1, "a": [1, 2.50, {"x": null}], "c": "<é>"}`},
		{`  [ ]`, `[]`},
		{`{}`, `{}`},
		{`"a\nb"`, `"a\nb"`},
		{`true`, `true`},
		{`{"a": {"b": {}}, "c": false}`, `{"a": {"b": {}}, "c": false}`},
	}
	for _, tc := range tests {
		got, err := pyJSON([]byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("pyJSON(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":}`, `{} {}`, `1 2`, `[1,]`} {
		if got, err := pyJSON([]byte(bad)); err == nil {
			t.Errorf("pyJSON(%q) = %q, no error", bad, got)
		}
	}
}

func TestParseToolCalls(t *testing.T) {
	names := map[string]bool{"add": true, "now": true}
	tests := []struct {
		text, content string
		calls         []toolCallOut
	}{
		{"no call here", "no call here", nil},
		{"<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>", "", []toolCallOut{{"add", `{"a":2,"b":3}`}}},
		{"Let me add.\n<tool_call>{\"name\":\"add\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"now\"}</tool_call>", "Let me add.\n",
			[]toolCallOut{{"add", `{}`}, {"now", `{}`}}},
		{"<tool_call>{\"name\": \"sub\", \"arguments\": {}}</tool_call>", "<tool_call>{\"name\": \"sub\", \"arguments\": {}}</tool_call>", nil},
		{"<tool_call>{\"name\": \"add\", \"arguments\": [1]}</tool_call>", "<tool_call>{\"name\": \"add\", \"arguments\": [1]}</tool_call>", nil},
		{"<tool_call>{\"name\": \"add\", \"argu", "<tool_call>{\"name\": \"add\", \"argu", nil},
		{"<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", nil},
		{"<tool_call>{\"name\":\"add\"}</tool_call><tool_call>{\"name\":\"add\"", "<tool_call>{\"name\":\"add\"}</tool_call><tool_call>{\"name\":\"add\"", nil},
	}
	for _, tc := range tests {
		content, calls := parseToolCalls(tc.text, names)
		if content != tc.content || fmt.Sprint(calls) != fmt.Sprint(tc.calls) {
			t.Errorf("parseToolCalls(%q) = %q, %v; want %q, %v", tc.text, content, calls, tc.content, tc.calls)
		}
	}
}

// TestToolSplitter streams texts cut at every byte and at no byte: what
// is sent plus what finish returns is the content parseToolCalls finds,
// and nothing of a call is ever sent.
func TestToolSplitter(t *testing.T) {
	names := map[string]bool{"add": true}
	texts := []string{
		"plain text <tool no call <tool_",
		"Sure. <tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1}}</tool_call>",
		"<tool_call>{\"name\": \"add\"}</tool_call>",
		"x <tool_call>{\"name\": \"bad\"}</tool_call> y",
		"ends in a prefix <tool_c",
	}
	for _, text := range texts {
		for _, step := range []int{1, 3, len(text)} {
			var s toolSplitter
			var sent strings.Builder
			for i := 0; i < len(text); i += step {
				out := s.add(text[i:min(i+step, len(text))])
				if strings.Contains(out, toolCallOpen) {
					t.Fatalf("%q by %d: sent %q", text, step, out)
				}
				sent.WriteString(out)
			}
			rest, calls := s.finish(names)
			content, want := parseToolCalls(text, names)
			if sent.String()+rest != content || fmt.Sprint(calls) != fmt.Sprint(want) {
				t.Errorf("%q by %d: sent %q + %q, calls %v; want %q, %v", text, step, sent.String(), rest, calls, content, want)
			}
		}
	}
}

func TestToolFields(t *testing.T) {
	tool := `{"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}`
	ok := []struct {
		body  string
		tools bool
	}{
		{`{}`, false},
		{`{"tools": [` + tool + `]}`, true},
		{`{"tools": [` + tool + `], "tool_choice": "auto"}`, true},
		{`{"tools": [` + tool + `], "tool_choice": "none"}`, false},
	}
	for _, tc := range ok {
		b, _ := parseBody([]byte(tc.body))
		got, err := b.tools()
		if err != nil || (got != nil) != tc.tools {
			t.Errorf("%s: %+v, %v", tc.body, got, err)
		}
	}
	bad := map[string]string{
		`{"tools": []}`:    "want 1 to 64 tools",
		`{"tools": "add"}`: "field tools: want a list",
		`{"tools": [{"type": "code_interpreter"}]}`:                                                   "field tools[0]: want {\"type\": \"function\"",
		`{"tools": [{"type": "function", "function": {}}]}`:                                           "field tools[0].function.name",
		`{"tools": [` + tool + `, ` + tool + `]}`:                                                     "\"add\" is given twice",
		`{"tools": [` + tool + `], "tool_choice": "required"}`:                                        "the native engine cannot force a call",
		`{"tools": [` + tool + `], "tool_choice": {"type": "function", "function": {"name": "add"}}}`: "field tool_choice",
		`{"tool_choice": "auto"}`:                                                                     "given without tools",
		`{"tools": [{"type": "function", "function": {"name": "a b"}}]}`:                              "tools[0].function.name",
		`{"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]}`:             "tools[0].function.parameters",
		`{"tools": [` + strings.Repeat(tool+",", 64) + tool + `]}`:                                    "want 1 to 64 tools, got 65",
	}
	for body, want := range bad {
		b, _ := parseBody([]byte(body))
		_, err := b.tools()
		if err == nil || err.status != 400 || !strings.Contains(err.message, want) {
			t.Errorf("%.80s: %v; want a 400 saying %q", body, err, want)
		}
	}
}

// TestToolPrompt checks the prompt of a chat with tools and a tool-call
// history against Qwen2.5's chat template, written out.
func TestToolPrompt(t *testing.T) {
	b, _ := parseBody([]byte(`{"messages": [
		{"role": "user", "content": "2+3?"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":2,\"b\":3}"}}]},
		{"role": "tool", "tool_call_id": "c1", "content": "5"}],
		"tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]}`))
	msgs, aerr := b.messages()
	if aerr != nil {
		t.Fatal(aerr)
	}
	tools, aerr := b.tools()
	if aerr != nil {
		t.Fatal(aerr)
	}
	got := tokenizer.ChatTemplate(withTools(msgs, tools), true)
	want := "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n" +
		"You may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
		`{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}` + "\n</tools>\n\n" +
		"For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
		"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n2+3?<|im_end|>\n" +
		"<|im_start|>assistant\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("prompt\n%s\nwant\n%s", got, want)
	}
	for body, want := range map[string]string{
		`{"messages": [{"role": "user", "content": "x", "tool_calls": []}]}`:                                       "only assistant messages",
		`{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "add", "arguments": "[1]"}}]}]}`: "arguments: want a JSON object",
		`{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "add", "arguments": "{"}}]}]}`:   "arguments: want a JSON object",
		`{"messages": [{"role": "assistant", "tool_calls": {"id": 1}}]}`:                                           "messages[0].tool_calls: want a list",
		`{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "", "arguments": "{}"}}]}]}`:     "function.name",
	} {
		b, _ := parseBody([]byte(body))
		if _, err := b.messages(); err == nil || err.status != 400 || !strings.Contains(err.message, want) {
			t.Errorf("%s: %v; want a 400 saying %q", body, err, want)
		}
	}
}

// The tools count against the model's context like the messages do, and
// tool fields are refused on /v1/completions.
func TestToolsThroughServer(t *testing.T) {
	url, _ := startServer(t)
	long := strings.Repeat("a very long description ", 200)
	body := `{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
		"tools": [{"type": "function", "function": {"name": "f", "description": "` + long + `"}}]}`
	code, b := post(t, url+"/v1/chat/completions", body)
	checkError(t, "tools beyond the context", code, b, 400, "invalid_request_error", "context_length_exceeded")
	code, b = post(t, url+"/v1/completions", `{"model": "tiny", "prompt": "hi", "max_tokens": 2, "tools": []}`)
	checkError(t, "tools on completions", code, b, 400, "invalid_request_error", "")
	if !strings.Contains(string(b), "only for /v1/chat/completions") {
		t.Errorf("tools on completions: %s", b)
	}
	// A short tool fits; with tool_choice none the prompt has no tools.
	short := `{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0,
		"tools": [{"type": "function", "function": {"name": "f"}}]`
	var with, without struct {
		Usage usageJSON `json:"usage"`
	}
	for _, c := range []struct {
		body string
		out  any
	}{{short + "}", &with}, {short + `, "tool_choice": "none"}`, &without}} {
		code, b := post(t, url+"/v1/chat/completions", c.body)
		if code != 200 {
			t.Fatalf("%s: %d %s", c.body, code, b)
		}
		if err := json.Unmarshal(b, c.out); err != nil {
			t.Fatal(err)
		}
	}
	tok := tokenizer.Builtin()
	plain := []tokenizer.Message{{Role: "user", Content: "hi"}}
	tools := &chatTools{defs: []string{`{"type": "function", "function": {"name": "f"}}`}}
	if with.Usage.Prompt != len(tok.EncodeChat(withTools(plain, tools), true)) || without.Usage.Prompt != len(tok.EncodeChat(plain, true)) {
		t.Errorf("prompt tokens %d with tools, %d with tool_choice none", with.Usage.Prompt, without.Usage.Prompt)
	}
}
