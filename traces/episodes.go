package traces

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
)

// SpansFromTurns records one RL step's trajectories as spans: one trace per
// episode (its id derived from the run and the episode), one span per turn
// under a root invoke_agent span, with the turn's model, prompt, token
// ids, logprobs, policy, weight version and rewards ("reward": what the
// turn trained on; "final": the episode's last answer's score), and an
// execute_tool span per tool a turn called. A turn's span lasts from its
// first engine call to its last answer; the root, from its episode's first
// call to its last call or tool. Tool spans are the root's children,
// beside the model calls (an agent calls a tool after the model's answer),
// and carry their turn's number. Rows without call times (written
// before they were recorded) are placed at end, when the step finished.
// sample ∈ [0, 1] keeps that share of episodes, picked by a hash of their
// ids so the choice is the same on every run.
func SpansFromTurns(run string, step int, turns []data.Turn, sample float64, end time.Time) []Span {
	var out []Span
	roots := map[string]int{}
	for i := range turns {
		t := &turns[i]
		h := sha256.Sum256([]byte(run + "\x00" + t.EpisodeID))
		if float64(binary.BigEndian.Uint64(h[16:24])>>11)/(1<<53) >= sample {
			continue
		}
		start, stop := end, end
		if !t.Call.Start.IsZero() && !t.Call.End.IsZero() {
			start, stop = t.Call.Start, t.Call.End
		}
		r, ok := roots[t.EpisodeID]
		if !ok {
			root := NewSpan()
			copy(root.TraceID[:], h[:16])
			copy(root.SpanID[:], h[16:24])
			root.Name, root.Operation = "invoke_agent "+t.PolicyID, OpInvokeAgent
			root.Start, root.End, root.Source, root.RunID = start, stop, run, run
			root.AgentName = t.PolicyID
			root.ConversationID, root.Step, root.Episode = t.EpisodeID, int64(step), t.GroupID
			root.Rewards = []Reward{{Name: "final", Value: t.FinalReward}}
			out = append(out, root)
			r = len(out) - 1
			roots[t.EpisodeID] = r
		}
		if start.Before(out[r].Start) {
			out[r].Start = start
		}
		if stop.After(out[r].End) {
			out[r].End = stop
		}
		model := t.Call.Model
		if model == "" {
			model = t.PolicyID
		}
		s := NewSpan()
		s.TraceID, s.ParentID = out[r].TraceID, out[r].SpanID
		th := sha256.Sum256(append(h[:], byte(t.Turn), byte(t.Turn>>8)))
		copy(s.SpanID[:], th[:8])
		s.Operation = OpTextCompletion
		if t.Call.Messages != nil {
			s.Operation = OpChat
		}
		s.Name = s.Operation + " " + model
		s.Start, s.End, s.Source = start, stop, run
		s.RunID, s.Step, s.Episode, s.Turn, s.Policy = run, int64(step), t.GroupID, int64(t.Turn), t.PolicyID
		s.ConversationID, s.WeightVersion, s.Provider = t.EpisodeID, t.WeightVersion, "rlnode"
		s.AgentName, s.RequestModel, s.ResponseModel = t.PolicyID, t.Call.Model, t.Call.Model
		s.PromptTokenIDs, s.OutputTokenIDs = slices.Clone(t.PromptIDs), slices.Clone(t.ResponseIDs)
		s.OutputLogprobs = slices.Clone(t.LogProbs)
		s.InputTokens, s.OutputTokens = int64(len(t.PromptIDs)), int64(len(t.ResponseIDs))
		s.InputMessages = callMessages(&t.Call)
		s.OutputMessages = marshal([]message{{Role: "assistant", Parts: []part{{Type: "text", Content: t.ResponseText}}, FinishReason: t.FinishReason}})
		s.FinishReasons = []string{t.FinishReason}
		s.Rewards = []Reward{{Name: "reward", Value: t.Reward, Reason: t.Note}}
		attrs := map[string]any{}
		if t.Call.PromptBytes > promptKept(&t.Call) {
			attrs["rlnode.record.truncated"] = true
		}
		// Tokens the model did not write (a tool episode's tool results,
		// mask 0): the tool spans below say where; this says how many, so
		// a reader can check that the two agree.
		if n := inserted(t.LossMask); n > 0 {
			attrs[AttrInsertedTokens] = n
		}
		if t.Call.EndShared && !t.Call.End.IsZero() {
			attrs[AttrEndShared] = true
		}
		if len(attrs) > 0 {
			s.Attributes = marshal(attrs)
		}
		if t.FinishReason == "error" {
			s.Status, s.StatusMessage = StatusError, t.Note
		}
		out = append(out, s)
		for k, tc := range t.Call.Tools {
			c := NewSpan()
			c.TraceID, c.ParentID = s.TraceID, out[r].SpanID
			ch := sha256.Sum256(append(th[:], byte(k), byte(k>>8)))
			copy(c.SpanID[:], ch[:8])
			c.Name, c.Operation, c.Source = "execute_tool "+tc.Name, OpExecuteTool, run
			c.Start, c.End = tc.Start, tc.End
			c.RunID, c.Step, c.Episode, c.Turn, c.Policy = run, int64(step), t.GroupID, int64(t.Turn), t.PolicyID
			c.ConversationID, c.AgentName = t.EpisodeID, t.PolicyID
			c.ToolName, c.ToolCallID = tc.Name, fmt.Sprintf("%s-t%d-c%d", t.EpisodeID, t.Turn, k)
			c.ToolArguments, c.ToolResult = tc.Arguments, tc.Result
			if tc.Error != "" {
				c.Status, c.StatusMessage, c.ErrorType = StatusError, tc.Error, "tool_error"
			}
			if tc.TokensTo > tc.TokensFrom {
				c.Attributes = marshal(map[string]int32{AttrInsertedStart: tc.TokensFrom, AttrInsertedEnd: tc.TokensTo})
			}
			if c.End.After(out[r].End) {
				out[r].End = c.End
			}
			out = append(out, c)
		}
	}
	return out
}

// inserted counts the response tokens a turn's mask leaves out.
func inserted(mask []float32) int {
	n := 0
	for _, m := range mask {
		if m == 0 {
			n++
		}
	}
	return n
}

// callMessages is a turn's prompt in the conventions' message schema: a
// text prompt as one user message (as the proxy records a completion's),
// a chat prompt's messages as they were.
func callMessages(c *data.Call) string {
	if c.Messages == nil {
		if c.Prompt == "" {
			return ""
		}
		return marshal([]message{{Role: "user", Parts: []part{{Type: "text", Content: c.Prompt}}}})
	}
	msgs := make([]message, len(c.Messages))
	for i, m := range c.Messages {
		msgs[i] = message{Role: m.Role, Parts: []part{{Type: "text", Content: m.Content}}}
	}
	return marshal(msgs)
}

// promptKept is the bytes of prompt text c kept.
func promptKept(c *data.Call) int64 {
	n := int64(len(c.Prompt))
	for _, m := range c.Messages {
		n += int64(len(m.Content))
	}
	return n
}

// isEpisodeRoot says whether s is the root span SpansFromTurns writes for a
// run's episode: its trace is recorded whole, root first, in one batch, so
// a second copy of the root starts a second recording of the episode.
func isEpisodeRoot(s *Span) bool {
	return !s.ParentID.IsValid() && s.Operation == OpInvokeAgent && s.RunID != "" && s.Source == s.RunID &&
		s.Step != NoValue && s.ConversationID != ""
}
