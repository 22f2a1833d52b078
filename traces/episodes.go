package traces

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
)

// SpansFromTurns records one RL step's trajectories as spans: one trace per
// episode (its id derived from the run and the episode), one span per turn
// under a root invoke_agent span, with the turn's token ids, logprobs,
// policy, weight version and rewards ("reward": what the turn trained on;
// "final": the episode's last answer's score). sample ∈ [0, 1] keeps that
// share of episodes, picked by a hash of their ids so the choice is the
// same on every run. end is when the step finished.
func SpansFromTurns(run string, step int, turns []data.Turn, sample float64, end time.Time) []Span {
	var out []Span
	roots := map[string]int{}
	for i := range turns {
		t := &turns[i]
		h := sha256.Sum256([]byte(run + "\x00" + t.EpisodeID))
		if float64(binary.BigEndian.Uint64(h[16:24])>>11)/(1<<53) >= sample {
			continue
		}
		r, ok := roots[t.EpisodeID]
		if !ok {
			root := NewSpan()
			copy(root.TraceID[:], h[:16])
			copy(root.SpanID[:], h[16:24])
			root.Name, root.Operation = "invoke_agent "+t.PolicyID, OpInvokeAgent
			root.Start, root.End, root.Source, root.RunID = end, end, run, run
			root.ConversationID, root.Step, root.Episode = t.EpisodeID, int64(step), t.GroupID
			root.Rewards = []Reward{{Name: "final", Value: t.FinalReward}}
			out = append(out, root)
			r = len(out) - 1
			roots[t.EpisodeID] = r
		}
		s := NewSpan()
		s.TraceID, s.ParentID = out[r].TraceID, out[r].SpanID
		th := sha256.Sum256(append(h[:], byte(t.Turn), byte(t.Turn>>8)))
		copy(s.SpanID[:], th[:8])
		s.Name, s.Operation = "text_completion "+t.PolicyID, OpTextCompletion
		s.Start, s.End, s.Source = end, end, run
		s.RunID, s.Step, s.Episode, s.Turn, s.Policy = run, int64(step), t.GroupID, int64(t.Turn), t.PolicyID
		s.ConversationID, s.WeightVersion, s.Provider = t.EpisodeID, t.WeightVersion, "rlnode"
		s.PromptTokenIDs, s.OutputTokenIDs = slices.Clone(t.PromptIDs), slices.Clone(t.ResponseIDs)
		s.OutputLogprobs = slices.Clone(t.LogProbs)
		s.InputTokens, s.OutputTokens = int64(len(t.PromptIDs)), int64(len(t.ResponseIDs))
		s.OutputMessages = marshal([]message{{Role: "assistant", Parts: []part{{Type: "text", Content: t.ResponseText}}, FinishReason: t.FinishReason}})
		s.FinishReasons = []string{t.FinishReason}
		s.Rewards = []Reward{{Name: "reward", Value: t.Reward, Reason: t.Note}}
		if t.FinishReason == "error" {
			s.Status, s.StatusMessage = StatusError, t.Note
		}
		out = append(out, s)
	}
	return out
}

// isEpisodeRoot says whether s is the root span SpansFromTurns writes for a
// run's episode: its trace is recorded whole, root first, in one batch, so
// a second copy of the root starts a second recording of the episode.
func isEpisodeRoot(s *Span) bool {
	return !s.ParentID.IsValid() && s.Operation == OpInvokeAgent && s.RunID != "" && s.Source == s.RunID &&
		s.Step != NoValue && s.ConversationID != ""
}
