package traces

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// StatRow summarises the spans of one agent, tool, model or source.
type StatRow struct {
	Key          string
	Calls        int
	Errors       int
	InputTokens  int64
	OutputTokens int64
	P50          time.Duration
	P90          time.Duration
	P99          time.Duration
	Rewards      int     // reward values seen on these spans
	RewardMean   float64 // their mean (0 when there are none)
}

// Stats groups the traces' spans by "agent" (the agent name, else the
// source), "tool" (tool spans only), "model" (spans naming a model) or
// "source", and summarises each group; rows come in key order. reward
// names the reward averaged ("" averages all).
func Stats(traces []Trace, by, reward string) ([]StatRow, error) {
	var key func(*Span) string
	switch by {
	case "agent":
		key = func(s *Span) string {
			if s.AgentName != "" {
				return s.AgentName
			}
			return s.Source
		}
	case "tool":
		key = func(s *Span) string { return s.ToolName }
	case "model":
		key = func(s *Span) string {
			if s.RequestModel != "" {
				return s.RequestModel
			}
			return s.ResponseModel
		}
	case "source":
		key = func(s *Span) string { return s.Source }
	default:
		return nil, fmt.Errorf("stats by %q: want agent, tool, model or source", by)
	}
	rows := map[string]*StatRow{}
	lat := map[string][]time.Duration{}
	sums := map[string]float64{}
	for ti := range traces {
		for si := range traces[ti].Spans {
			s := &traces[ti].Spans[si]
			k := key(s)
			if k == "" {
				continue
			}
			r := rows[k]
			if r == nil {
				r = &StatRow{Key: k}
				rows[k] = r
			}
			r.Calls++
			if s.Failed() {
				r.Errors++
			}
			r.InputTokens += max(s.InputTokens, 0)
			r.OutputTokens += max(s.OutputTokens, 0)
			lat[k] = append(lat[k], s.Duration())
			for _, rw := range s.Rewards {
				if reward == "" || rw.Name == reward {
					r.Rewards++
					sums[k] += rw.Value
				}
			}
		}
	}
	out := make([]StatRow, 0, len(rows))
	for k, r := range rows {
		d := lat[k]
		slices.Sort(d)
		r.P50, r.P90, r.P99 = Percentile(d, 0.5), Percentile(d, 0.9), Percentile(d, 0.99)
		if r.Rewards > 0 {
			r.RewardMean = sums[k] / float64(r.Rewards)
		}
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Percentile is the nearest-rank q-quantile of sorted durations (0 for none).
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
