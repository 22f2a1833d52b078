package traces

import (
	"context"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/verify"
)

func TestSpanOfExchange(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		ex     Exchange
		check  func(s Span) bool
		wantOK bool
	}{
		{name: "chat with token ids and logprobs", ex: Exchange{Path: "/v1/chat/completions", Status: 200, ContentType: "application/json",
			Request: []byte(`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}]}`),
			Response: []byte(`{"model":"m-1","prompt_token_ids":[1,2],"usage":{"prompt_tokens":2,"completion_tokens":2},
				"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"yo"},"token_ids":[7,8],"logprobs":{"content":[{"logprob":-0.5},{"logprob":-1}]}}]}`)},
			check: func(s Span) bool {
				return s.Operation == OpChat && s.Name == "chat m" && s.ResponseModel == "m-1" && s.InputTokens == 2 && s.OutputTokens == 2 &&
					slices.Equal(s.PromptTokenIDs, []int32{1, 2}) && slices.Equal(s.OutputTokenIDs, []int32{7, 8}) &&
					slices.Equal(s.OutputLogprobs, []float32{-0.5, -1}) && slices.Equal(s.FinishReasons, []string{"stop"}) &&
					s.InputMessages == `[{"role":"system","parts":[{"type":"text","content":"be brief"}]},{"role":"user","parts":[{"type":"text","content":"hi"}]}]` &&
					s.OutputMessages == `[{"role":"assistant","parts":[{"type":"text","content":"yo"}],"finish_reason":"stop"}]` && s.Status == StatusUnset
			}},
		{name: "streamed chat with a tool call in fragments, two choices", ex: Exchange{Path: "/v1/chat/completions", Status: 200, ContentType: "text/event-stream",
			Request: []byte(`{"model":"m","stream":true,"messages":[{"role":"assistant","tool_calls":[{"id":"c0","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"c0","content":"2"}]}`),
			Response: []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"a\"},\"token_ids\":[5]}]}\n\n" +
				"data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"z\"},\"token_ids\":[9]}]}\n\n" +
				"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"id\":\"c1\",\"function\":{\"name\":\"calc\",\"arguments\":\"{\\\"a\\\":\"}}]},\"token_ids\":[6]}]}\n\n" +
				"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n" +
				"data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3}}\n\n" +
				"data: [DONE]\n\n")},
			check: func(s Span) bool {
				return s.OutputMessages == `[{"role":"assistant","parts":[{"type":"text","content":"a"},{"type":"tool_call","id":"c1","name":"calc","arguments":{"a":1}}],"finish_reason":"tool_calls"},{"role":"assistant","parts":[{"type":"text","content":"z"}],"finish_reason":"length"}]` &&
					s.InputMessages == `[{"role":"assistant","parts":[{"type":"tool_call","id":"c0","name":"f","arguments":{"x":1}}]},{"role":"tool","parts":[{"type":"tool_call_response","id":"c0","response":"2"}]}]` &&
					slices.Equal(s.OutputTokenIDs, []int32{5, 6}) && slices.Equal(s.FinishReasons, []string{"tool_calls", "length"}) && s.OutputTokens == 3
			}},
		{name: "completion", ex: Exchange{Path: "/v1/completions", Status: 200, ContentType: "application/json",
			Request:  []byte(`{"model":"m","prompt":"2+2="}`),
			Response: []byte(`{"choices":[{"index":0,"text":"4","finish_reason":"stop","prompt_token_ids":[3],"token_ids":[4],"logprobs":{"token_logprobs":[-0.1]}}]}`)},
			check: func(s Span) bool {
				return s.Operation == OpTextCompletion && MessagesText(s.InputMessages) == "2+2=" && MessagesText(s.OutputMessages) == "4" &&
					slices.Equal(s.PromptTokenIDs, []int32{3}) && slices.Equal(s.OutputLogprobs, []float32{-0.1})
			}},
		{name: "upstream error", ex: Exchange{Path: "/v1/chat/completions", Status: 429, ContentType: "application/json",
			Request: []byte(`{"model":"m","messages":[]}`), Response: []byte(`{"error":{"message":"busy","type":"rate_limit"}}`)},
			check: func(s Span) bool {
				return s.Status == StatusError && s.ErrorType == "rate_limit" && s.StatusMessage == "busy" && s.OutputMessages == ""
			}},
		{name: "request not JSON", ex: Exchange{Path: "/v1/chat/completions", Status: 400, Request: []byte(`{`)},
			check: func(s Span) bool { return s.Status == StatusError && s.ErrorType == "invalid_request" }},
		{name: "answer cut at the recording limit", ex: Exchange{Path: "/v1/completions", Status: 200, ContentType: "application/json",
			Request: []byte(`{"model":"m","prompt":"p"}`), Response: []byte(`{"choices":[{"te`), Truncated: true},
			check: func(s Span) bool {
				return s.Status == StatusUnset && s.Attributes == `{"rlnode.record.truncated":true}`
			}},
	} {
		c.ex.Start, c.ex.End = t0, t0.Add(time.Second)
		if s := SpanOfExchange(c.ex); !c.check(s) {
			t.Errorf("%s: span %+v", c.name, s)
		}
	}
}

func TestToolRewards(t *testing.T) {
	c := DefaultToolRewards()
	tool := func(result string, status StatusCode, errType string) *Span {
		s := NewSpan()
		s.Operation, s.ToolName, s.ToolResult, s.Status, s.ErrorType = OpExecuteTool, "t", result, status, errType
		return &s
	}
	for _, tc := range []struct {
		name string
		s    *Span
		want Reward
	}{
		{"result", tool("42", StatusOK, ""), Reward{"tool", 1, "returned a result"}},
		{"empty", tool("", StatusOK, ""), Reward{"tool", -0.5, "empty result"}},
		{"empty list", tool(" [] ", StatusUnset, ""), Reward{"tool", -0.5, "empty result"}},
		{"exception", tool("", StatusError, "ValueError"), Reward{"tool", -1, "exception ValueError"}},
		{"error type only", tool("x", StatusUnset, "timeout"), Reward{"tool", -1, "exception timeout"}},
	} {
		if got, ok := c.Score(tc.s); !ok || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v", tc.name, got, ok, tc.want)
		}
	}
	chat := NewSpan()
	chat.Operation = OpChat
	if _, ok := c.Score(&chat); ok {
		t.Error("a chat span got a tool reward")
	}
}

func TestAnswerReward(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	call := func(id byte, end time.Duration, answer string) Span {
		s := sampleSpan(1, id, t0, "a")
		s.End = t0.Add(end)
		s.OutputMessages = `[{"role":"assistant","parts":[{"type":"text","content":"` + answer + `"}]}]`
		s.Attributes = ""
		return s
	}
	tr := Trace{Spans: []Span{call(1, 2*time.Second, `The final answer is \\boxed{4}`), call(2, time.Second, "5")}}
	if _, ok := AnswerReward(context.Background(), &tr, verify.Math{}); ok {
		t.Error("a trace without a reference got an answer reward")
	}
	tr.Spans[1].Attributes = `{"rlnode.reference":"4"}`
	a, ok := AnswerReward(context.Background(), &tr, verify.Math{})
	if !ok || a.Reward.Value != 1 || a.SpanID != tr.Spans[0].SpanID.String() {
		t.Errorf("answer reward %+v %v: want 1 on the call that ended last", a, ok)
	}
	tr.Spans[1].Attributes = `{"rlnode.reference":"{\"answer\":\"5\"}"}`
	if a, _ := AnswerReward(context.Background(), &tr, verify.Math{}); a.Reward.Value != 0 {
		t.Errorf("answer 4 against reference 5: %+v", a)
	}
}

func TestStats(t *testing.T) {
	mk := func(tool string, d time.Duration, failed bool, reward float64) Span {
		s := NewSpan()
		s.ToolName, s.Start, s.End = tool, time.Unix(0, 0), time.Unix(0, 0).Add(d)
		s.InputTokens = 3
		if failed {
			s.Status = StatusError
		}
		s.Rewards = []Reward{{Name: "tool", Value: reward}}
		return s
	}
	ts := []Trace{{Spans: []Span{mk("a", time.Millisecond, false, 1), mk("a", 3*time.Millisecond, true, -1), mk("b", 2*time.Millisecond, false, 1)}},
		{Spans: []Span{mk("a", 2*time.Millisecond, false, 1)}}}
	rows, err := Stats(ts, "tool", "tool")
	if err != nil {
		t.Fatal(err)
	}
	want := []StatRow{
		{Key: "a", Calls: 3, Errors: 1, InputTokens: 9, P50: 2 * time.Millisecond, P90: 3 * time.Millisecond, P99: 3 * time.Millisecond, Rewards: 3, RewardMean: 1.0 / 3},
		{Key: "b", Calls: 1, InputTokens: 3, P50: 2 * time.Millisecond, P90: 2 * time.Millisecond, P99: 2 * time.Millisecond, Rewards: 1, RewardMean: 1},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("stats\n%+v\nwant\n%+v", rows, want)
	}
	if _, err := Stats(ts, "color", ""); err == nil {
		t.Error("stats by color was accepted")
	}
}

// TestSpanOfExchangeKeepsLongListsAsSent: a request whose messages hold
// more list elements than a span decodes (maxRecordedElements) keeps them
// as sent, marked, so recording it allocates about its copies. An empty
// message is 2 bytes and some 800 decoded and rewritten: before, an
// 8 MiB request of them took 2.3 GB and became 100 MB of span text.
func TestSpanOfExchangeKeepsLongListsAsSent(t *testing.T) {
	many := func(elem string) string { return elem + strings.Repeat(","+elem, 1_300_000) }
	for _, c := range []struct{ name, messages string }{
		{"messages", `[` + many(`{}`) + `]`},
		{"parts", `[{"role":"user","content":[` + many(`{}`) + `]}]`},
		{"tool calls", `[{"role":"assistant","tool_calls":[` + many(`{}`) + `]}]`},
	} {
		req := []byte(`{"model":"m","messages":` + c.messages + `}`)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := SpanOfExchange(Exchange{Path: "/v1/chat/completions", Status: 400, Request: req})
		runtime.ReadMemStats(&after)
		if s.RequestModel != "m" || !strings.Contains(s.Attributes, `"rlnode.record.unparsed":true`) || !strings.Contains(s.InputMessages, `{},{},{}`) {
			t.Errorf("%s: model %q, attributes %s, input %.80s; want the messages kept as sent and marked", c.name, s.RequestModel, s.Attributes, s.InputMessages)
		}
		if n := len(s.InputMessages); n > 2*len(req) {
			t.Errorf("%s: %d bytes of input text for a request of %d", c.name, n, len(req))
		}
		// The request's copies (its messages, the text part, its JSON),
		// and some slack.
		if alloc, bound := after.TotalAlloc-before.TotalAlloc, uint64(8*len(req))+(1<<20); alloc > bound {
			t.Errorf("%s: recording allocated %d bytes for a request of %d (bound %d)", c.name, alloc, len(req), bound)
		}
	}
	// A request within the bound is kept in the conventions' schema.
	s := SpanOfExchange(Exchange{Path: "/v1/chat/completions", Status: 200, Request: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)})
	if s.Attributes != "" || s.InputMessages != `[{"role":"user","parts":[{"type":"text","content":"hi"}]}]` {
		t.Errorf("a short request: attributes %q, input %s", s.Attributes, s.InputMessages)
	}
}
