package traces

import (
	"encoding/json"
	"io"
	"time"
)

// spanJSON is a span in rlnode's JSONL export: the store's column names,
// ids in hex, times in RFC 3339, unset numbers left out.
type spanJSON struct {
	TraceID        string    `json:"trace_id"`
	SpanID         string    `json:"span_id"`
	ParentSpanID   string    `json:"parent_span_id,omitempty"`
	Name           string    `json:"name"`
	Start          time.Time `json:"start_time"`
	End            time.Time `json:"end_time"`
	Status         string    `json:"status"`
	StatusMessage  string    `json:"status_message,omitempty"`
	Source         string    `json:"source,omitempty"`
	Operation      string    `json:"operation,omitempty"`
	Provider       string    `json:"provider,omitempty"`
	RequestModel   string    `json:"request_model,omitempty"`
	ResponseModel  string    `json:"response_model,omitempty"`
	ConversationID string    `json:"conversation_id,omitempty"`
	AgentName      string    `json:"agent_name,omitempty"`
	InputTokens    *int64    `json:"input_tokens,omitempty"`
	OutputTokens   *int64    `json:"output_tokens,omitempty"`
	InputMessages  string    `json:"input_messages,omitempty"`
	OutputMessages string    `json:"output_messages,omitempty"`
	FinishReasons  []string  `json:"finish_reasons,omitempty"`
	ToolName       string    `json:"tool_name,omitempty"`
	ToolCallID     string    `json:"tool_call_id,omitempty"`
	ToolArguments  string    `json:"tool_arguments,omitempty"`
	ToolResult     string    `json:"tool_result,omitempty"`
	ErrorType      string    `json:"error_type,omitempty"`
	RunID          string    `json:"run_id,omitempty"`
	Step           *int64    `json:"step,omitempty"`
	Episode        *int64    `json:"episode,omitempty"`
	Turn           *int64    `json:"turn,omitempty"`
	Policy         string    `json:"policy,omitempty"`
	WeightVersion  *int64    `json:"weight_version,omitempty"`
	PromptTokenIDs []int32   `json:"prompt_token_ids,omitempty"`
	OutputTokenIDs []int32   `json:"output_token_ids,omitempty"`
	OutputLogprobs []float32 `json:"output_logprobs,omitempty"`
	Rewards        []Reward  `json:"rewards,omitempty"`
	Attributes     string    `json:"attributes,omitempty"`
}

func opt(v int64) *int64 {
	if v < 0 {
		return nil
	}
	return &v
}

func toJSON(s *Span) spanJSON {
	j := spanJSON{TraceID: s.TraceID.String(), SpanID: s.SpanID.String(), Name: s.Name, Start: s.Start, End: s.End,
		Status: s.Status.String(), StatusMessage: s.StatusMessage, Source: s.Source, Operation: s.Operation,
		Provider: s.Provider, RequestModel: s.RequestModel, ResponseModel: s.ResponseModel,
		ConversationID: s.ConversationID, AgentName: s.AgentName, InputTokens: opt(s.InputTokens),
		OutputTokens: opt(s.OutputTokens), InputMessages: s.InputMessages, OutputMessages: s.OutputMessages,
		FinishReasons: s.FinishReasons, ToolName: s.ToolName, ToolCallID: s.ToolCallID, ToolArguments: s.ToolArguments,
		ToolResult: s.ToolResult, ErrorType: s.ErrorType, RunID: s.RunID, Step: opt(s.Step), Episode: opt(s.Episode),
		Turn: opt(s.Turn), Policy: s.Policy, WeightVersion: opt(s.WeightVersion), PromptTokenIDs: s.PromptTokenIDs,
		OutputTokenIDs: s.OutputTokenIDs, OutputLogprobs: s.OutputLogprobs, Rewards: s.Rewards, Attributes: s.Attributes}
	if s.ParentID.IsValid() {
		j.ParentSpanID = s.ParentID.String()
	}
	return j
}

func allSpans(traces []Trace) []Span {
	var out []Span
	for _, t := range traces {
		out = append(out, t.Spans...)
	}
	return out
}

// WriteJSONL writes the traces' spans, one JSON object a line, with their
// annotated rewards.
func WriteJSONL(w io.Writer, traces []Trace) error {
	enc := json.NewEncoder(w)
	for _, t := range traces {
		for i := range t.Spans {
			if err := enc.Encode(toJSON(&t.Spans[i])); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteParquet writes the traces' spans as one Parquet file in the
// store's schema.
func WriteParquet(w io.Writer, traces []Trace) error {
	return encodeParquet(w, allSpans(traces))
}

// WriteOTLPJSON writes the traces as one OTLP/HTTP JSON export request,
// which any OTLP receiver (this one included) takes.
func WriteOTLPJSON(w io.Writer, traces []Trace) error {
	b, err := EncodeOTLPJSON(ToOTLP(allSpans(traces)))
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
