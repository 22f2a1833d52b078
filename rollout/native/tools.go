package native

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/rlnode/rlnode/internal/jsonlist"
	"github.com/rlnode/rlnode/learner/tokenizer"
)

// Bounds on the tool fields of a chat request.
const (
	maxTools     = 64
	maxToolCalls = 64 // per assistant message
)

// Qwen2.5's tool markup.
const (
	toolCallOpen  = "<tool_call>"
	toolCallClose = "</tool_call>"
)

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// chatTools are the tools of a chat request that the model may call
// (tool_choice auto): each tool object as Qwen2.5's template writes it,
// and the names.
type chatTools struct {
	defs  []string
	names map[string]bool
}

// tools reads "tools" and "tool_choice" (OpenAI's function tools). It
// returns nil when no tool is on offer: no tools, or tool_choice "none".
// Choices that need constrained decoding ("required", a named function)
// are refused.
func (b body) tools() (*chatTools, *apiError) {
	choice := "auto"
	if b.has("tool_choice") {
		if err := b.decode("tool_choice", `"auto" or "none" (the native engine cannot force a call)`, &choice); err != nil {
			return nil, err
		}
		if choice != "auto" && choice != "none" {
			return nil, badField("tool_choice", `want "auto" or "none", got %q (the native engine cannot force a call)`, choice)
		}
	}
	if !b.has("tools") {
		if b.has("tool_choice") {
			return nil, badField("tool_choice", "given without tools")
		}
		return nil, nil
	}
	if jsonlist.Longer(b["tools"], maxMessages) { // else counted once decoded
		return nil, badField("tools", "want 1 to %d tools, got more than %d", maxTools, maxMessages)
	}
	var raw []json.RawMessage
	if err := b.decode("tools", "a list of tool objects", &raw); err != nil {
		return nil, err
	}
	if len(raw) == 0 || len(raw) > maxTools {
		return nil, badField("tools", "want 1 to %d tools, got %d", maxTools, len(raw))
	}
	t := &chatTools{names: map[string]bool{}}
	for i, r := range raw {
		field := fmt.Sprintf("tools[%d]", i)
		var d struct {
			Type     string `json:"type"`
			Function *struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(r, &d); err != nil || d.Type != "function" || d.Function == nil {
			return nil, badField(field, `want {"type": "function", "function": {"name", "description", "parameters"}}, got %s`, abbreviate(r))
		}
		if !toolNameRE.MatchString(d.Function.Name) {
			return nil, badField(field+".function.name", "want 1 to 64 letters, digits, _ or -, got %q", abbreviate(json.RawMessage(d.Function.Name)))
		}
		if t.names[d.Function.Name] {
			return nil, badField(field+".function.name", "%q is given twice", d.Function.Name)
		}
		if p := bytes.TrimSpace(d.Function.Parameters); len(p) > 0 && p[0] != '{' && !bytes.Equal(p, []byte("null")) {
			return nil, badField(field+".function.parameters", "want a JSON Schema object, got %s", abbreviate(p))
		}
		s, err := pyJSON(r)
		if err != nil {
			return nil, badField(field, "%v", err)
		}
		t.defs = append(t.defs, s)
		t.names[d.Function.Name] = true
	}
	if choice == "none" {
		return nil, nil
	}
	return t, nil
}

// withTools puts the tools into msgs' system message as Qwen2.5's chat
// template does (adding the default system message when there is none).
func withTools(msgs []tokenizer.Message, t *chatTools) []tokenizer.Message {
	var sb strings.Builder
	sb.WriteString("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
	for _, d := range t.defs {
		sb.WriteString("\n" + d)
	}
	sb.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within " +
		toolCallOpen + toolCallClose + " XML tags:\n" + toolCallOpen + "\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n" + toolCallClose)
	out := append([]tokenizer.Message(nil), msgs...)
	if len(out) > 0 && out[0].Role == "system" {
		out[0].Content += sb.String()
		return out
	}
	return append([]tokenizer.Message{{Role: "system", Content: tokenizer.DefaultSystemPrompt + sb.String()}}, out...)
}

// wireToolCall is an assistant message's tool call, as OpenAI writes it.
type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// assistantToolCalls writes an assistant message's content and tool calls
// as Qwen2.5's template does. field names the message for errors.
func assistantToolCalls(content string, raw json.RawMessage, field string) (string, *apiError) {
	if jsonlist.Longer(raw, maxMessages) { // else counted once decoded
		return "", badField(field, "more than %d tool calls (at most %d)", maxMessages, maxToolCalls)
	}
	var calls []wireToolCall
	if err := json.Unmarshal(raw, &calls); err != nil {
		return "", badField(field, "want a list of {id, type, function: {name, arguments}}, got %s", abbreviate(raw))
	}
	if len(calls) > maxToolCalls {
		return "", badField(field, "%d tool calls, more than %d", len(calls), maxToolCalls)
	}
	var sb strings.Builder
	sb.WriteString(content)
	for j, c := range calls {
		f := fmt.Sprintf("%s[%d].function", field, j)
		if !toolNameRE.MatchString(c.Function.Name) {
			return "", badField(f+".name", "want 1 to 64 letters, digits, _ or -, got %q", abbreviate(json.RawMessage(c.Function.Name)))
		}
		args := strings.TrimSpace(c.Function.Arguments)
		if args == "" {
			args = "{}"
		}
		a, err := pyJSON([]byte(args))
		if err != nil || args[0] != '{' {
			return "", badField(f+".arguments", "want a JSON object in a string, got %s", abbreviate(json.RawMessage(args)))
		}
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		sb.WriteString(toolCallOpen + "\n{\"name\": \"" + c.Function.Name + "\", \"arguments\": " + a + "}\n" + toolCallClose)
	}
	return sb.String(), nil
}

// toolCallOut is one call parsed from the model's text.
type toolCallOut struct {
	Name      string
	Arguments string // compact JSON
}

// parseToolCalls reads the <tool_call>{"name", "arguments"}</tool_call>
// blocks of text. The calls stand only if every block is complete, valid
// JSON and names one of names with an object (or no) arguments: then
// content is the text before the first block. Otherwise there are no
// calls and the whole text is content, as vLLM's hermes parser does.
func parseToolCalls(text string, names map[string]bool) (content string, calls []toolCallOut) {
	first := strings.Index(text, toolCallOpen)
	if first < 0 {
		return text, nil
	}
	rest := text[first:]
	for {
		i := strings.Index(rest, toolCallOpen)
		if i < 0 {
			break
		}
		end := strings.Index(rest[i:], toolCallClose)
		if end < 0 {
			return text, nil
		}
		bodyText := strings.TrimSpace(rest[i+len(toolCallOpen) : i+end])
		rest = rest[i+end+len(toolCallClose):]
		var c struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(bodyText), &c); err != nil || !names[c.Name] {
			return text, nil
		}
		args := bytes.TrimSpace(c.Arguments)
		if len(args) == 0 || bytes.Equal(args, []byte("null")) {
			args = []byte("{}")
		}
		if args[0] != '{' {
			return text, nil
		}
		var compact bytes.Buffer
		if json.Compact(&compact, args) != nil {
			return text, nil
		}
		calls = append(calls, toolCallOut{Name: c.Name, Arguments: compact.String()})
	}
	if len(calls) > maxToolCalls {
		return text, nil
	}
	return text[:first], calls
}

// toolSplitter streams a choice's text while holding back what may be the
// start of a tool call: text from the first <tool_call> on is held, and
// so is an ending that could begin one.
type toolSplitter struct {
	text   strings.Builder
	sent   int
	inCall bool
}

// add takes the next piece of text and returns what may be sent now.
func (s *toolSplitter) add(piece string) string {
	s.text.WriteString(piece)
	if s.inCall {
		return ""
	}
	all := s.text.String()
	if i := strings.Index(all, toolCallOpen); i >= 0 {
		s.inCall = true
		out := all[s.sent:i]
		s.sent = i
		return out
	}
	keep := 0
	for k := min(len(toolCallOpen)-1, len(all)-s.sent); k > 0; k-- {
		if strings.HasSuffix(all, toolCallOpen[:k]) {
			keep = k
			break
		}
	}
	out := all[s.sent : len(all)-keep]
	s.sent = len(all) - keep
	return out
}

// finish parses the whole text: the calls, and the held text still to
// send as content when there are none.
func (s *toolSplitter) finish(names map[string]bool) (rest string, calls []toolCallOut) {
	all := s.text.String()
	_, calls = parseToolCalls(all, names)
	if len(calls) > 0 {
		return "", calls
	}
	return all[s.sent:], nil
}

// openAIToolCalls is calls in a chat message (stream: with each call's
// index, as deltas carry).
func openAIToolCalls(calls []toolCallOut, stream bool) []any {
	out := make([]any, len(calls))
	for i, c := range calls {
		m := map[string]any{"id": "call_" + randomID(), "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
		if stream {
			m["index"] = i
		}
		out[i] = m
	}
	return out
}

// pyJSON rewrites one JSON value as Python's json.dumps writes it, as
// Qwen2.5's template's tojson does: ", " and ": " separators, keys in
// their order, non-ASCII as it is.
func pyJSON(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var sb strings.Builder
	type frame struct {
		obj bool
		n   int
	}
	var stack []frame
	started := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("not valid JSON: %v", err)
		}
		if started && len(stack) == 0 {
			return "", errors.New("not valid JSON: more than one value")
		}
		started = true
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			sb.WriteByte(byte(d))
			continue
		}
		if len(stack) > 0 {
			f := &stack[len(stack)-1]
			switch {
			case f.obj && f.n%2 == 1:
				sb.WriteString(": ")
			case f.n > 0:
				sb.WriteString(", ")
			}
			f.n++
		}
		switch v := tok.(type) {
		case json.Delim:
			sb.WriteByte(byte(v))
			stack = append(stack, frame{obj: v == '{'})
		case string:
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			enc.Encode(v)
			sb.WriteString(strings.TrimSuffix(b.String(), "\n"))
		case json.Number:
			sb.WriteString(v.String())
		case bool:
			fmt.Fprint(&sb, v)
		case nil:
			sb.WriteString("null")
		}
	}
	if !started || len(stack) > 0 {
		return "", errors.New("not valid JSON: empty or unclosed")
	}
	return sb.String(), nil
}
