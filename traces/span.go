package traces

import (
	"encoding/json"
	"strings"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
)

// Span is one operation of an agent or model: a model call (chat,
// text_completion), a tool execution, an agent invocation, or any other
// span an instrumented program exports. Field names follow the GenAI
// semantic conventions (see Attr* for the attribute keys); the rlnode
// fields carry what RL needs. Unset integers are -1 (see NoValue).
type Span struct {
	TraceID  oteltrace.TraceID
	SpanID   oteltrace.SpanID
	ParentID oteltrace.SpanID // zero for a root span
	Name     string
	Start    time.Time
	End      time.Time
	Status   StatusCode
	// StatusMessage is the error description when Status is StatusError.
	StatusMessage string
	// Source partitions the store: the run, the agent, or the service that
	// sent the span (see SourceOf).
	Source string

	Operation      string // gen_ai.operation.name: chat, text_completion, execute_tool, invoke_agent, ...
	Provider       string // gen_ai.provider.name
	RequestModel   string
	ResponseModel  string
	ConversationID string
	AgentName      string
	InputTokens    int64
	OutputTokens   int64
	// InputMessages and OutputMessages are JSON in the conventions' message
	// schema: [{"role":..., "parts":[{"type":"text","content":...}, ...]}].
	InputMessages  string
	OutputMessages string
	FinishReasons  []string
	ToolName       string
	ToolCallID     string
	ToolArguments  string
	ToolResult     string
	ErrorType      string // error.type

	RunID          string
	Step           int64
	Episode        int64
	Turn           int64
	Policy         string
	WeightVersion  int64
	PromptTokenIDs []int32
	OutputTokenIDs []int32
	OutputLogprobs []float32
	Rewards        []Reward
	// Attributes holds the span's other attributes as a JSON object.
	Attributes string
}

// NoValue marks an integer field that was not set.
const NoValue = -1

// NewSpan is a span with every integer field unset.
func NewSpan() Span {
	return Span{InputTokens: NoValue, OutputTokens: NoValue, Step: NoValue, Episode: NoValue, Turn: NoValue, WeightVersion: NoValue}
}

// StatusCode is OpenTelemetry's span status.
type StatusCode int8

const (
	StatusUnset StatusCode = 0
	StatusOK    StatusCode = 1
	StatusError StatusCode = 2
)

func (c StatusCode) String() string {
	switch c {
	case StatusOK:
		return "ok"
	case StatusError:
		return "error"
	}
	return "unset"
}

// ParseStatus reads what String writes.
func ParseStatus(s string) StatusCode {
	switch s {
	case "ok":
		return StatusOK
	case "error":
		return StatusError
	}
	return StatusUnset
}

// Reward is a named score on a span with the reason it was given.
type Reward struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Reason string  `json:"reason,omitempty"`
}

// Duration is End − Start (zero when End is before Start).
func (s *Span) Duration() time.Duration {
	if s.End.Before(s.Start) {
		return 0
	}
	return s.End.Sub(s.Start)
}

// Failed says whether the span ended in an error.
func (s *Span) Failed() bool { return s.Status == StatusError || s.ErrorType != "" }

// SourceOf picks the store partition for a span: its run, else its agent,
// else the service that sent it, else fallback.
func SourceOf(s *Span, service, fallback string) string {
	for _, v := range []string{s.RunID, s.AgentName, service} {
		if v != "" {
			return v
		}
	}
	return fallback
}

// EndShared says whether call s's end is its batch's, not its own
// (AttrEndShared): its duration is then the batch's.
func (s *Span) EndShared() bool {
	if !strings.Contains(s.Attributes, AttrEndShared) {
		return false
	}
	var m map[string]any
	return json.Unmarshal([]byte(s.Attributes), &m) == nil && m[AttrEndShared] == true
}
