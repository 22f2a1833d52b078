package traces

import (
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"strings"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
)

// TrajectoryOptions say how stored traces become trajectories.
type TrajectoryOptions struct {
	// Policy is the turns' PolicyID.
	Policy string
	// Reward names the reward the turns train on: a call's own rewards of
	// that name where it has some, else its trace's (Trace.Reward; "" sums
	// all). Traces without one are dropped.
	Reward string
	// KeepUnrewarded keeps traces without the reward, at reward 0 (SFT
	// needs none).
	KeepUnrewarded bool
	// Model keeps only calls to this model ("": every call).
	Model string
	// Tokenizer re-tokenizes calls recorded without token ids (chat: the
	// chat template over the input messages with the generation prompt;
	// completion: the prompt text; the answer: its text, without an
	// end-of-turn token). Nil drops such calls.
	Tokenizer *tokenizer.Tokenizer
}

// Dropped is a call (or a trace) that became no trajectory, and why.
type Dropped struct {
	Trace, Span string
	Why         string
}

// Trajectories turns stored traces into trajectory rows, the input of the
// learner's batch (train.BatchFromTrajectories): one row per model call
// (chat or text_completion span with an answer), the trace as the episode
// and its calls in start order as the turns. Token ids and logprobs are
// the recorded ones where the call carried them (vLLM's return_token_ids
// and logprobs; the first choice of a call); otherwise the text is
// re-tokenized and logprobs are zero (Note says so). Traces whose first
// prompt is the same share a GRPO group (offline GRPO groups traces by
// prompt), numbered in order of first appearance.
func Trajectories(traces []Trace, opt TrajectoryOptions) (turns []data.Turn, dropped []Dropped) {
	groups := map[uint64]int64{}
	samples := map[int64]int32{}
	for ti := range traces {
		t := &traces[ti]
		reward, ok := t.Reward(opt.Reward)
		if !ok && !opt.KeepUnrewarded {
			dropped = append(dropped, Dropped{Trace: t.ID.String(), Why: "no reward " + rewardName(opt.Reward)})
			continue
		}
		var rows []data.Turn
		for si := range t.Spans {
			s := &t.Spans[si]
			if s.Operation != OpChat && s.Operation != OpTextCompletion || s.OutputMessages == "" {
				continue
			}
			if opt.Model != "" && s.RequestModel != opt.Model && s.ResponseModel != opt.Model {
				continue
			}
			drop := func(why string) {
				dropped = append(dropped, Dropped{Trace: t.ID.String(), Span: s.SpanID.String(), Why: why})
			}
			if s.Failed() {
				drop("the call failed")
				continue
			}
			own := Trace{Spans: []Span{*s}}
			r, ok := own.Reward(opt.Reward)
			if !ok {
				r = reward
			}
			row := data.Turn{EpisodeID: t.ID.String(), Turn: int32(len(rows)), PolicyID: opt.Policy,
				WeightVersion: max(s.WeightVersion, 0), Reward: r, FinalReward: reward, FinishReason: "stop",
				ResponseText: MessagesText(s.OutputMessages)}
			if len(s.FinishReasons) > 0 && s.FinishReasons[0] != "" {
				row.FinishReason = s.FinishReasons[0]
			}
			row.Call = callOf(s)
			row.PromptIDs, row.ResponseIDs = s.PromptTokenIDs, s.OutputTokenIDs
			if row.PromptIDs == nil || row.ResponseIDs == nil {
				if opt.Tokenizer == nil {
					drop("no token ids recorded and no tokenizer to re-tokenize with")
					continue
				}
				row.Note = "re-tokenized"
				if row.PromptIDs == nil {
					row.PromptIDs = int32s32(promptIDs(s, opt.Tokenizer))
				}
				if row.ResponseIDs == nil {
					row.ResponseIDs = int32s32(opt.Tokenizer.Encode(firstAnswer(s.OutputMessages)))
				}
			}
			if len(row.ResponseIDs) == 0 {
				drop("empty answer")
				continue
			}
			row.LogProbs = s.OutputLogprobs
			if len(row.LogProbs) != len(row.ResponseIDs) {
				row.LogProbs = make([]float32, len(row.ResponseIDs))
				row.Note = joinNote(row.Note, "logprobs not recorded")
			}
			row.LossMask = make([]float32, len(row.ResponseIDs))
			for i := range row.LossMask {
				row.LossMask[i] = 1
			}
			rows = append(rows, row)
		}
		if len(rows) == 0 {
			continue
		}
		h := fnv.New64a()
		for _, id := range rows[0].PromptIDs {
			binary.Write(h, binary.LittleEndian, id)
		}
		g, ok := groups[h.Sum64()]
		if !ok {
			g = int64(len(groups))
			groups[h.Sum64()] = g
		}
		for i := range rows {
			rows[i].GroupID, rows[i].Sample = g, samples[g]
		}
		samples[g]++
		turns = append(turns, rows...)
	}
	return turns, dropped
}

func rewardName(n string) string {
	if n == "" {
		return "(any)"
	}
	return n
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func int32s32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// promptIDs re-tokenizes a call's input: the chat template of its
// messages (tool results as tool messages), or a completion's prompt.
func promptIDs(s *Span, tok *tokenizer.Tokenizer) []int {
	var ms []message
	json.Unmarshal([]byte(s.InputMessages), &ms)
	if s.Operation == OpTextCompletion {
		return tok.Encode(MessagesText(s.InputMessages))
	}
	msgs := make([]tokenizer.Message, 0, len(ms))
	for _, m := range ms {
		tm := tokenizer.Message{Role: m.Role}
		for _, p := range m.Parts {
			switch p.Type {
			case "text":
				tm.Content += p.Content
			case "tool_call_response":
				if r, ok := p.Response.(string); ok {
					tm.Content += r
				} else {
					b, _ := json.Marshal(p.Response)
					tm.Content += string(b)
				}
			}
		}
		msgs = append(msgs, tm)
	}
	return tok.EncodeChat(msgs, true)
}

// callOf is what a row keeps of call s for traces made from it again:
// its model, times and prompt (data.Call's bounds).
func callOf(s *Span) data.Call {
	c := data.Call{Model: s.ResponseModel, Start: s.Start, End: s.End}
	if c.Model == "" {
		c.Model = s.RequestModel
	}
	if s.Operation == OpTextCompletion {
		c.CutPrompt(MessagesText(s.InputMessages), nil)
		return c
	}
	var ms []message
	json.Unmarshal([]byte(s.InputMessages), &ms)
	msgs := make([]data.Message, 0, len(ms))
	for _, m := range ms {
		var text strings.Builder
		for _, p := range m.Parts {
			if p.Type == "text" {
				text.WriteString(p.Content)
			}
		}
		msgs = append(msgs, data.Message{Role: m.Role, Content: text.String()})
	}
	c.CutPrompt("", msgs)
	return c
}

// firstAnswer is the text of the first output message.
func firstAnswer(outputJSON string) string {
	var ms []message
	if json.Unmarshal([]byte(outputJSON), &ms) != nil || len(ms) == 0 {
		return ""
	}
	b, _ := json.Marshal(ms[:1])
	return MessagesText(string(b))
}
