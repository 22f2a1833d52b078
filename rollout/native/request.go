package native

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/rlnode/rlnode/internal/jsonlist"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
)

// apiError is an OpenAI-style error: the HTTP status, and the body's
// message, type, param and code.
type apiError struct {
	status  int
	message string
	typ     string
	param   string
	code    string
}

func (e *apiError) Error() string { return e.message }

func badField(field, format string, args ...any) *apiError {
	return &apiError{status: 400, typ: "invalid_request_error", param: field,
		message: fmt.Sprintf("field %s: ", field) + fmt.Sprintf(format, args...)}
}

// body is a JSON request object read field by field, so each error names
// the field at fault. JSON null counts as absent. Fields the server does
// not know are ignored, as OpenAI-compatible servers do.
type body map[string]json.RawMessage

func parseBody(data []byte) (body, *apiError) {
	var b body
	if err := json.Unmarshal(data, &b); err != nil || b == nil {
		msg := "request body is not a JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		return nil, &apiError{status: 400, typ: "invalid_request_error", message: msg}
	}
	return b, nil
}

func (b body) has(field string) bool {
	raw, ok := b[field]
	return ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

func (b body) decode(field, want string, v any) *apiError {
	if err := json.Unmarshal(b[field], v); err != nil {
		return badField(field, "want %s, got %s", want, abbreviate(b[field]))
	}
	return nil
}

func abbreviate(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

func (b body) str(field string, def string) (string, *apiError) {
	if !b.has(field) {
		return def, nil
	}
	var s string
	return s, b.decode(field, "a string", &s)
}

func (b body) boolean(field string, def bool) (bool, *apiError) {
	if !b.has(field) {
		return def, nil
	}
	var x bool
	return x, b.decode(field, "true or false", &x)
}

func (b body) integer(field string, def, lo, hi int) (int, *apiError) {
	if !b.has(field) {
		return def, nil
	}
	var f float64
	if err := b.decode(field, "an integer", &f); err != nil {
		return 0, err
	}
	if f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return 0, badField(field, "want an integer in [%d, %d], got %s", lo, hi, abbreviate(b[field]))
	}
	return int(f), nil
}

func (b body) number(field string, def, lo, hi float64) (float64, *apiError) {
	if !b.has(field) {
		return def, nil
	}
	var f float64
	if err := b.decode(field, "a number", &f); err != nil {
		return 0, err
	}
	if f < lo || f > hi {
		return 0, badField(field, "want a number in [%v, %v], got %v", lo, hi, f)
	}
	return f, nil
}

// stops reads "stop": a string or a list of strings.
func (b body) stops() ([]string, *apiError) {
	if !b.has("stop") {
		return nil, nil
	}
	var one string
	if json.Unmarshal(b["stop"], &one) == nil {
		if one == "" {
			return nil, badField("stop", "empty stop string")
		}
		if err := engine.CheckStop([]string{one}); err != nil {
			return nil, badField("stop", "%v", err)
		}
		return []string{one}, nil
	}
	var many []string
	if err := b.decode("stop", "a string or a list of strings", &many); err != nil {
		return nil, err
	}
	for i, s := range many {
		if s == "" {
			return nil, badField("stop", "entry %d is an empty string", i)
		}
	}
	if err := engine.CheckStop(many); err != nil {
		return nil, badField("stop", "%v", err)
	}
	return many, nil
}

// prompts reads a completions "prompt": a string, a list of strings, a
// list of token ids or a list of lists of token ids. Each prompt must
// leave room for a token in the model's context of positions, and all
// together may hold at most budget tokens; text is tokenized only as far
// as these limits allow.
func (b body) prompts(tok *tokenizer.Tokenizer, vocab, positions, budget int) ([][]int, *apiError) {
	if !b.has("prompt") {
		return nil, badField("prompt", "missing")
	}
	raw := b["prompt"]
	if most := max(maxPrompts, positions-1); jsonlist.Longer(raw, most) {
		return nil, badField("prompt", "a list of more than %d elements: more than the %d prompts a request may hold, or than the %d token ids the context holds", most, maxPrompts, positions-1)
	}
	var one string
	var texts []string
	var ids []int
	var idLists [][]int
	var out [][]int
	total := 0
	encode := func(s string) *apiError {
		limit := min(positions-1, budget-total)
		p, ok := tok.EncodeLimit(s, limit)
		if !ok {
			if limit < positions-1 {
				return overBudget(budget)
			}
			return tooLong("prompt", positions)
		}
		out = append(out, p)
		total += len(p)
		return nil
	}
	switch {
	case json.Unmarshal(raw, &one) == nil:
		if e := encode(one); e != nil {
			return nil, e
		}
	case json.Unmarshal(raw, &ids) == nil && len(ids) > 0:
		out = [][]int{ids}
	case json.Unmarshal(raw, &texts) == nil && len(texts) > 0:
		if len(texts) > maxPrompts {
			return nil, badField("prompt", "%d prompts, more than the %d a request may hold", len(texts), maxPrompts)
		}
		for _, s := range texts {
			if e := encode(s); e != nil {
				return nil, e
			}
		}
	case json.Unmarshal(raw, &idLists) == nil && len(idLists) > 0:
		if len(idLists) > maxPrompts {
			return nil, badField("prompt", "%d prompts, more than the %d a request may hold", len(idLists), maxPrompts)
		}
		out = idLists
	default:
		return nil, badField("prompt", "want a string, a list of strings, a list of token ids or a list of lists of token ids, got %s", abbreviate(raw))
	}
	if len(ids) > 0 || len(idLists) > 0 {
		total = 0
		for _, p := range out {
			if len(p) > positions-1 {
				return nil, tooLong("prompt", positions)
			}
			total += len(p)
		}
		if total > budget {
			return nil, overBudget(budget)
		}
	}
	for i, p := range out {
		if len(p) == 0 {
			return nil, badField("prompt", "prompt %d is empty", i)
		}
		for j, id := range p {
			if id < 0 || id >= vocab {
				return nil, badField("prompt", "prompt %d: token %d: id %d out of range [0, %d)", i, j, id, vocab)
			}
		}
	}
	return out, nil
}

// tooLong refuses a prompt (the field) that leaves no room in the
// model's context of positions tokens, as OpenAI does.
func tooLong(field string, positions int) *apiError {
	return &apiError{status: 400, typ: "invalid_request_error", param: field, code: "context_length_exceeded",
		message: fmt.Sprintf("the prompt is longer than this model's context of %d tokens allows (at most %d, to leave room for one generated token)", positions, positions-1)}
}

func overBudget(budget int) *apiError {
	return &apiError{status: 413, typ: "invalid_request_error", param: "prompt", code: "request_too_large",
		message: fmt.Sprintf("the prompts hold more than %d tokens, the server's limit for the requests in progress", budget)}
}

// messages reads chat "messages": role and content, the content a string
// or a list of text parts.
func (b body) messages() ([]tokenizer.Message, *apiError) {
	if !b.has("messages") {
		return nil, badField("messages", "missing")
	}
	if jsonlist.Longer(b["messages"], maxMessages) {
		return nil, badField("messages", "more than %d messages, more than any model's context holds", maxMessages)
	}
	var raw []struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls json.RawMessage `json:"tool_calls"`
	}
	if err := b.decode("messages", "a list of {role, content} objects", &raw); err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		return nil, badField("messages", "empty list")
	}
	out := make([]tokenizer.Message, len(raw))
	for i, m := range raw {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return nil, badField(fmt.Sprintf("messages[%d].role", i), "want system, developer, user, assistant or tool, got %q", m.Role)
		}
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		content, err := messageContent(m.Content)
		if err != nil {
			return nil, badField(fmt.Sprintf("messages[%d].content", i), "%s", err.Error())
		}
		if tc := bytes.TrimSpace(m.ToolCalls); len(tc) > 0 && !bytes.Equal(tc, []byte("null")) {
			if role != "assistant" {
				return nil, badField(fmt.Sprintf("messages[%d].tool_calls", i), "only assistant messages carry tool calls")
			}
			var aerr *apiError
			if content, aerr = assistantToolCalls(content, tc, fmt.Sprintf("messages[%d].tool_calls", i)); aerr != nil {
				return nil, aerr
			}
		}
		out[i] = tokenizer.Message{Role: role, Content: content}
	}
	return out, nil
}

func messageContent(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	if jsonlist.Longer(raw, maxMessages) {
		return "", fmt.Errorf("more than %d parts", maxMessages)
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", fmt.Errorf("want a string or a list of text parts, got %s", abbreviate(raw))
	}
	var out string
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", fmt.Errorf("part %d: only {\"type\": \"text\", \"text\": ...} parts are supported, got type %q", j, p.Type)
		}
		out += *p.Text
	}
	return out, nil
}
