package traces

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rlnode/rlnode/rollout/verify"
)

// ToolRewards scores tool executions: a call that raised or failed, one
// that returned nothing, and one that returned something.
type ToolRewards struct {
	Success, Exception, Empty float64
}

// DefaultToolRewards: success +1, exception −1, empty −0.5.
func DefaultToolRewards() ToolRewards { return ToolRewards{Success: 1, Exception: -1, Empty: -0.5} }

// Score is the "tool" reward of an execute_tool span (ok false for other
// spans).
func (c ToolRewards) Score(s *Span) (r Reward, ok bool) {
	if s.Operation != OpExecuteTool && s.ToolName == "" {
		return Reward{}, false
	}
	r.Name = "tool"
	switch res := strings.TrimSpace(s.ToolResult); {
	case s.Failed():
		r.Value, r.Reason = c.Exception, "exception"
		if s.ErrorType != "" {
			r.Reason += " " + s.ErrorType
		}
		if s.StatusMessage != "" {
			r.Reason += ": " + truncate(s.StatusMessage, 200)
		}
	case res == "" || res == "null" || res == "[]" || res == "{}" || res == `""`:
		r.Value, r.Reason = c.Empty, "empty result"
	default:
		r.Value, r.Reason = c.Success, "returned a result"
	}
	return r, true
}

// Reference is the reference answer a trace carries in the rlnode.reference
// attribute of any of its spans: a JSON verify.Reference, or a bare answer.
func Reference(t *Trace) (verify.Reference, bool) {
	for _, s := range t.Spans {
		if s.Attributes == "" {
			continue
		}
		var attrs map[string]any
		if json.Unmarshal([]byte(s.Attributes), &attrs) != nil {
			continue
		}
		v, ok := attrs[AttrReference].(string)
		if !ok {
			continue
		}
		var ref verify.Reference
		if json.Unmarshal([]byte(v), &ref) == nil && (ref.Answer != "" || len(ref.Tests) > 0) {
			return ref, true
		}
		return verify.Reference{Answer: v}, true
	}
	return verify.Reference{}, false
}

// FinalAnswer is the text of the trace's last model call: the span that
// ends last among chat and text_completion spans with an output.
func FinalAnswer(t *Trace) (*Span, string, bool) {
	var last *Span
	for i := range t.Spans {
		s := &t.Spans[i]
		if (s.Operation == OpChat || s.Operation == OpTextCompletion) && s.OutputMessages != "" && (last == nil || !s.End.Before(last.End)) {
			last = s
		}
	}
	if last == nil {
		return nil, "", false
	}
	return last, MessagesText(last.OutputMessages), true
}

// AnswerReward is the "answer" reward of a trace: its final answer scored
// by v against its reference, put on the final model call's span. ok is
// false when the trace has no reference or no answer.
func AnswerReward(ctx context.Context, t *Trace, v verify.Verifier) (a Annotation, ok bool) {
	ref, ok := Reference(t)
	if !ok {
		return a, false
	}
	s, text, ok := FinalAnswer(t)
	if !ok {
		return a, false
	}
	res := v.Verify(ctx, text, ref)
	reason := fmt.Sprintf("verified against %q", truncate(ref.Answer, 80))
	if res.Error != "" {
		reason += ": " + res.Error
	}
	return Annotation{TraceID: t.ID.String(), SpanID: s.SpanID.String(), Reward: Reward{Name: "answer", Value: res.Reward, Reason: reason}}, true
}

// ToolAnnotations are the tool rewards of every tool span of the traces.
func ToolAnnotations(traces []Trace, c ToolRewards) []Annotation {
	var out []Annotation
	for _, t := range traces {
		for i := range t.Spans {
			if r, ok := c.Score(&t.Spans[i]); ok {
				out = append(out, Annotation{TraceID: t.ID.String(), SpanID: t.Spans[i].SpanID.String(), Reward: r})
			}
		}
	}
	return out
}
