package traces

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Attributes a multi-agent program puts on its spans for coordination
// rewards: the round a span belongs to (0-based) and the answer an agent
// gave in it.
const (
	AttrRound  = "rlnode.round"
	AttrAnswer = "rlnode.answer"
)

// CoordinationRewards score a multi-agent round trip as one "coordination"
// reward on the trace's root: a penalty per round after the first, a bonus
// when the agents' last answers agree, the trace's "answer" reward weighted
// (when one was given), and a penalty per 1,000 tokens.
type CoordinationRewards struct {
	RoundPenalty  float64 // per round after the first
	Consensus     float64 // when every agent's last answer is the same
	QualityWeight float64 // × the trace's "answer" reward
	TokenPenalty  float64 // per 1,000 input + output tokens
}

// DefaultCoordinationRewards: −0.1 a round, +1 for consensus, quality × 1,
// −0.01 per 1,000 tokens.
func DefaultCoordinationRewards() CoordinationRewards {
	return CoordinationRewards{RoundPenalty: -0.1, Consensus: 1, QualityWeight: 1, TokenPenalty: -0.01}
}

// Score is the coordination reward of t; ok is false for a trace with no
// rounds and no answers (not a multi-agent one).
func (c CoordinationRewards) Score(t *Trace) (a Annotation, ok bool) {
	rounds := 0
	last := map[string]struct {
		round  int64
		answer string
	}{}
	var tokens int64
	for i := range t.Spans {
		s := &t.Spans[i]
		tokens += max(s.InputTokens, 0) + max(s.OutputTokens, 0)
		if s.Attributes == "" {
			continue
		}
		var attrs map[string]any
		if json.Unmarshal([]byte(s.Attributes), &attrs) != nil {
			continue
		}
		round, hasRound := asInt(attrs[AttrRound])
		if hasRound && int(round)+1 > rounds {
			rounds = int(round) + 1
		}
		if ans, ok := attrs[AttrAnswer].(string); ok {
			agent := s.AgentName
			if agent == "" {
				agent = s.SpanID.String()
			}
			if prev, seen := last[agent]; !seen || round >= prev.round {
				last[agent] = struct {
					round  int64
					answer string
				}{round, strings.TrimSpace(ans)}
			}
		}
	}
	if rounds == 0 && len(last) == 0 {
		return a, false
	}
	var why []string
	v := 0.0
	if rounds > 1 {
		p := c.RoundPenalty * float64(rounds-1)
		v += p
		why = append(why, fmt.Sprintf("%d rounds (%+.3g)", rounds, p))
	}
	agree, first := len(last) > 1, ""
	for _, l := range last {
		if first == "" {
			first = l.answer
		} else if l.answer != first {
			agree = false
		}
	}
	if agree {
		v += c.Consensus
		why = append(why, fmt.Sprintf("consensus of %d agents (%+.3g)", len(last), c.Consensus))
	} else if len(last) > 1 {
		why = append(why, fmt.Sprintf("no consensus among %d agents", len(last)))
	}
	if q, ok := t.Reward("answer"); ok {
		v += c.QualityWeight * q
		why = append(why, fmt.Sprintf("answer %.3g × %.3g", q, c.QualityWeight))
	}
	if tokens > 0 {
		p := c.TokenPenalty * float64(tokens) / 1000
		v += p
		why = append(why, fmt.Sprintf("%d tokens (%+.3g)", tokens, p))
	}
	root := t.Root()
	return Annotation{TraceID: t.ID.String(), SpanID: root.SpanID.String(),
		Reward: Reward{Name: "coordination", Value: v, Reason: strings.Join(why, ", ")}}, true
}
