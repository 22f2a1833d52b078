package traces

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rlnode/rlnode/internal/jsonlist"
)

// Exchange is one OpenAI-compatible request and its answer, as a recorder
// saw them.
type Exchange struct {
	Path        string // /v1/chat/completions or /v1/completions
	Request     []byte
	Status      int
	ContentType string // of the answer
	Response    []byte
	// Truncated says Response stops at the recorder's limit.
	Truncated  bool
	Start, End time.Time
}

// openAIRequest is the part of a chat or completion request a span keeps.
// Messages are decoded once their lists are known to be short enough
// (maxRecordedElements).
type openAIRequest struct {
	Model    string          `json:"model"`
	Messages json.RawMessage `json:"messages"`
	Prompt   json.RawMessage `json:"prompt"`
	Stream   bool            `json:"stream"`
}

// maxRecordedElements bounds the list elements (messages, their parts and
// tool calls, all together) of a request whose messages a span keeps in
// the conventions' schema; past it they are kept as sent. An empty one is
// 2 bytes and some 800 decoded and rewritten: an 8 MiB request of empty
// messages took 2.3 GB and became 100 MB of span text.
const maxRecordedElements = 1 << 16

type openAIMessage struct {
	Role       string           `json:"role"`
	Content    json.RawMessage  `json:"content"`
	Name       string           `json:"name,omitempty"`
	ToolCalls  []openAIToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

type openAIToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type openAIResponse struct {
	ID             string         `json:"id"`
	Model          string         `json:"model"`
	Choices        []openAIChoice `json:"choices"`
	Usage          *openAIUsage   `json:"usage"`
	PromptTokenIDs []int32        `json:"prompt_token_ids"`
	Error          *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	} `json:"error"`
}

type openAIChoice struct {
	Index          int            `json:"index"`
	Message        *openAIMessage `json:"message"`
	Delta          *openAIMessage `json:"delta"`
	Text           *string        `json:"text"`
	FinishReason   *string        `json:"finish_reason"`
	TokenIDs       []int32        `json:"token_ids"`
	PromptTokenIDs []int32        `json:"prompt_token_ids"`
	Logprobs       *struct {
		Content []struct {
			Logprob float32 `json:"logprob"`
		} `json:"content"`
		TokenLogprobs []float32 `json:"token_logprobs"`
	} `json:"logprobs"`
}

type openAIUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// part is a message part of the GenAI conventions' message schema.
type part struct {
	Type      string `json:"type"`
	Content   string `json:"content,omitempty"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments any    `json:"arguments,omitempty"`
	Response  any    `json:"response,omitempty"`
}

type message struct {
	Role         string `json:"role"`
	Parts        []part `json:"parts"`
	Name         string `json:"name,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
}

// choiceState gathers one choice of an answer, whole or streamed.
type choiceState struct {
	text      strings.Builder
	toolCalls []openAIToolCall
	finish    string
	ids       []int32
	logprobs  []float32
	seen      bool
}

// SpanOfExchange is the span of one chat or completion call: operation,
// model, messages in the conventions' schema, usage, finish reasons, and
// for the first choice the token ids and logprobs when the answer carried
// them (vLLM's return_token_ids and logprobs). A streamed answer is read
// from its server-sent events. The span's ids, source and RL fields are
// left for the caller.
func SpanOfExchange(ex Exchange) Span {
	s := NewSpan()
	s.Start, s.End = ex.Start.UTC(), ex.End.UTC()
	chat := strings.HasSuffix(ex.Path, "/chat/completions")
	s.Operation = OpTextCompletion
	if chat {
		s.Operation = OpChat
	}
	var req openAIRequest
	if err := json.Unmarshal(ex.Request, &req); err != nil {
		s.Status, s.ErrorType, s.StatusMessage = StatusError, "invalid_request", fmt.Sprintf("request body is not JSON: %v", err)
	}
	s.RequestModel = req.Model
	s.Name = strings.TrimSpace(s.Operation + " " + req.Model)
	unparsed := false
	if chat {
		var ms []openAIMessage
		switch {
		case jsonlist.LongerNested(req.Messages, maxRecordedElements):
			unparsed = true
			s.InputMessages = marshal([]message{{Role: "user", Parts: []part{{Type: "text", Content: string(req.Messages)}}}})
		case len(req.Messages) > 0:
			if err := json.Unmarshal(req.Messages, &ms); err != nil && s.Status != StatusError {
				s.Status, s.ErrorType, s.StatusMessage = StatusError, "invalid_request", fmt.Sprintf("request body is not JSON: messages: %v", err)
			}
			fallthrough
		default:
			s.InputMessages = marshal(inputMessages(ms))
		}
	} else if len(req.Prompt) > 0 {
		var p string
		if json.Unmarshal(req.Prompt, &p) != nil {
			p = string(req.Prompt) // a list of prompts or of token ids, kept as sent
		}
		s.InputMessages = marshal([]message{{Role: "user", Parts: []part{{Type: "text", Content: p}}}})
	}

	var choices []*choiceState
	at := func(i int) *choiceState {
		for len(choices) <= i && i < 1024 {
			choices = append(choices, &choiceState{})
		}
		if i >= len(choices) || i < 0 {
			return &choiceState{}
		}
		return choices[i]
	}
	var respErr string
	absorb := func(r *openAIResponse) {
		if r.Model != "" {
			s.ResponseModel = r.Model
		}
		if r.Usage != nil {
			s.InputTokens, s.OutputTokens = r.Usage.PromptTokens, r.Usage.CompletionTokens
		}
		if r.PromptTokenIDs != nil {
			s.PromptTokenIDs = r.PromptTokenIDs
		}
		if r.Error != nil {
			respErr = r.Error.Message
			if r.Error.Type != "" {
				s.ErrorType = r.Error.Type
			}
		}
		for _, c := range r.Choices {
			st := at(c.Index)
			st.seen = true
			if m := c.Message; m != nil {
				st.text.WriteString(contentText(m.Content))
				st.toolCalls = append(st.toolCalls, m.ToolCalls...)
			}
			if d := c.Delta; d != nil {
				st.text.WriteString(contentText(d.Content))
				mergeToolCallDeltas(&st.toolCalls, d.ToolCalls)
			}
			if c.Text != nil {
				st.text.WriteString(*c.Text)
			}
			if c.FinishReason != nil && *c.FinishReason != "" {
				st.finish = *c.FinishReason
			}
			st.ids = append(st.ids, c.TokenIDs...)
			if c.PromptTokenIDs != nil && c.Index == 0 {
				s.PromptTokenIDs = c.PromptTokenIDs
			}
			if lp := c.Logprobs; lp != nil {
				for _, t := range lp.Content {
					st.logprobs = append(st.logprobs, t.Logprob)
				}
				st.logprobs = append(st.logprobs, lp.TokenLogprobs...)
			}
		}
	}
	if strings.HasPrefix(ex.ContentType, "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(ex.Response))
		sc.Buffer(make([]byte, 0, 64<<10), len(ex.Response)+1)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			data = strings.TrimSpace(data)
			if !ok || data == "[DONE]" {
				continue
			}
			var r openAIResponse
			if json.Unmarshal([]byte(data), &r) == nil {
				absorb(&r)
			}
		}
	} else if len(ex.Response) > 0 {
		var r openAIResponse
		if err := json.Unmarshal(ex.Response, &r); err == nil {
			absorb(&r)
		} else if ex.Status < 300 && !ex.Truncated {
			respErr = fmt.Sprintf("answer is not JSON: %v", err)
		}
	}
	switch {
	case ex.Truncated && unparsed:
		s.Attributes = `{"rlnode.record.truncated":true,"rlnode.record.unparsed":true}`
	case ex.Truncated:
		s.Attributes = `{"rlnode.record.truncated":true}`
	case unparsed:
		s.Attributes = `{"rlnode.record.unparsed":true}`
	}

	var out []message
	for _, st := range choices {
		if !st.seen {
			continue
		}
		m := message{Role: "assistant", FinishReason: st.finish}
		if t := st.text.String(); t != "" || len(st.toolCalls) == 0 {
			m.Parts = append(m.Parts, part{Type: "text", Content: t})
		}
		for _, tc := range st.toolCalls {
			m.Parts = append(m.Parts, part{Type: "tool_call", ID: tc.ID, Name: tc.Function.Name, Arguments: jsonOrString(tc.Function.Arguments)})
		}
		out = append(out, m)
		s.FinishReasons = append(s.FinishReasons, st.finish)
	}
	if len(out) > 0 {
		s.OutputMessages = marshal(out)
		s.OutputTokenIDs = choices[0].ids
		if len(choices[0].logprobs) > 0 {
			s.OutputLogprobs = choices[0].logprobs
		}
	}
	if ex.Status >= 400 || respErr != "" {
		s.Status = StatusError
		if s.ErrorType == "" {
			s.ErrorType = fmt.Sprint(ex.Status)
		}
		s.StatusMessage = truncate(respErr, 1024)
	}
	return s
}

// inputMessages converts OpenAI chat messages to the conventions' schema.
func inputMessages(ms []openAIMessage) []message {
	out := make([]message, 0, len(ms))
	for _, m := range ms {
		cm := message{Role: m.Role, Name: m.Name, Parts: []part{}}
		if m.Role == "tool" {
			cm.Parts = append(cm.Parts, part{Type: "tool_call_response", ID: m.ToolCallID, Response: contentText(m.Content)})
		} else if t := contentText(m.Content); t != "" || len(m.ToolCalls) == 0 {
			cm.Parts = append(cm.Parts, part{Type: "text", Content: t})
		}
		for _, tc := range m.ToolCalls {
			cm.Parts = append(cm.Parts, part{Type: "tool_call", ID: tc.ID, Name: tc.Function.Name, Arguments: jsonOrString(tc.Function.Arguments)})
		}
		out = append(out, cm)
	}
	return out
}

// contentText is a message's content as text: a string, or the text parts
// of a list joined.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return string(raw)
}

// mergeToolCallDeltas adds streamed tool-call fragments: a fragment with
// an id starts a call, one without continues the last call's arguments.
func mergeToolCallDeltas(calls *[]openAIToolCall, deltas []openAIToolCall) {
	for _, d := range deltas {
		if d.ID != "" || len(*calls) == 0 {
			*calls = append(*calls, d)
			continue
		}
		last := &(*calls)[len(*calls)-1]
		if d.Function.Name != "" {
			last.Function.Name += d.Function.Name
		}
		last.Function.Arguments += d.Function.Arguments
	}
}

func jsonOrString(s string) any {
	var v any
	if json.Unmarshal([]byte(s), &v) == nil {
		return v
	}
	return s
}

func marshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// MessagesText is the text of messages in the conventions' schema: each
// text part, in order.
func MessagesText(messagesJSON string) string {
	var ms []message
	if json.Unmarshal([]byte(messagesJSON), &ms) != nil {
		return ""
	}
	var b strings.Builder
	for _, m := range ms {
		for _, p := range m.Parts {
			if p.Type == "text" {
				b.WriteString(p.Content)
			}
		}
	}
	return b.String()
}
