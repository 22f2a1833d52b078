package traces

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

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
	// SkipRefused makes a trace refused with an *AlignmentError a Dropped
	// entry (its Why starting "refused: ") instead of the error: the other
	// traces still become rows. Off, one such trace fails the whole call.
	SkipRefused bool
	// Tokenizer re-tokenizes calls recorded without token ids (chat: the
	// chat template over the input messages with the generation prompt;
	// completion: the prompt text; the answer: its text, without an
	// end-of-turn token). Nil drops such calls.
	Tokenizer *tokenizer.Tokenizer
	// PerCall makes every call its own row, as rlnode did before calls
	// were merged: a conversation of k calls is then k rows that each
	// hold the whole conversation before their answer. Off (the default),
	// a call whose prompt extends a row of its trace token for token
	// joins that row (see Build).
	PerCall bool
	// MergeRewards lets calls whose own rewards differ join one row, which
	// takes its last call's reward: for training that reads a trace's
	// reward only (offline RL credits every call with the trace's) or
	// none (plain SFT). Off, such a call starts a row (SplitReward), so
	// that each row's reward is each of its calls'.
	MergeRewards bool
}

// SplitReason is why a call starts a row of its own instead of joining a
// row of the calls of its trace before it.
type SplitReason string

const (
	// SplitPrefix: the call's prompt does not begin with the row's whole
	// sequence (the context was cut or summarized, a system prompt
	// rewritten, the history re-rendered).
	SplitPrefix SplitReason = "prompt does not extend the conversation"
	// SplitModel: the call was answered by another model than the row's.
	SplitModel SplitReason = "another model"
	// SplitVersion: the call was sampled from other weights (another
	// rlnode.weight_version) than the row's; a row has one version.
	SplitVersion SplitReason = "another weight version"
	// SplitReward: the call trains on another reward than the row's
	// calls (its own reward differs), which a row could not carry.
	SplitReward SplitReason = "another reward"
)

// Split is a call that starts a new row of its trace although rows of the
// trace's calls come before it, and why.
type Split struct {
	Trace, Span string
	Reason      SplitReason
	Why         string // the detail: where the tokens part, which models
}

// SplitSummary counts the splits of one reason and names the first.
type SplitSummary struct {
	Reason SplitReason
	Calls  int
	First  string // "trace T span S: why"
}

// SummarizeSplits is splits as one summary per reason, in the order the
// reasons first occur, so a store of thousands of calls that split for one
// reason reads as one line (the run and the export print the same lines).
func SummarizeSplits(splits []Split) []SplitSummary {
	var out []SplitSummary
	at := map[SplitReason]int{}
	for _, sp := range splits {
		i, seen := at[sp.Reason]
		if !seen {
			i = len(out)
			at[sp.Reason] = i
			out = append(out, SplitSummary{Reason: sp.Reason, First: fmt.Sprintf("trace %s span %s: %s", sp.Trace, sp.Span, sp.Why)})
		}
		out[i].Calls++
	}
	return out
}

// Built is what Build made of stored traces.
type Built struct {
	// Turns are the rows, one trace's next to each other.
	Turns   []data.Turn
	Dropped []Dropped
	// Calls is the number of model calls the rows hold, Retokenized how
	// many of them were re-tokenized (no token ids recorded).
	Calls, Retokenized int
	// Splits are the calls that joined no row of the calls of their trace
	// before them.
	Splits []Split
}

// Dropped is a call (or a trace) that became no trajectory, and why.
// Refused marks a trace left out for an *AlignmentError
// (TrajectoryOptions.SkipRefused); its Why starts "refused: ".
type Dropped struct {
	Trace, Span string
	Why         string
	Refused     bool
}

// AlignmentError refuses a trace whose token ids cannot be told apart into
// what the trained model wrote and what it did not, rather than guessing
// (a row of it would train tokens the model did not write as its own, or
// the other way round). Span is the call or tool span at fault.
type AlignmentError struct {
	Trace, Span string
	Why         string
	// Models are the models whose calls the trace holds, when it is
	// refused for holding calls of several with none named as trained.
	Models []string
}

func (e *AlignmentError) Error() string {
	return fmt.Sprintf("trace %s span %s: %s", e.Trace, e.Span, e.Why)
}

// Trajectories turns stored traces into trajectory rows, the input of the
// learner's batch (train.BatchFromTrajectories): the model calls of the
// trained model (chat or text_completion spans with an answer), the trace
// as the episode and its calls in start order, the calls of one
// conversation in one row unless opt.PerCall (Build says how). A call's
// prompt is what it was asked, its response what it answered:
// what came between two calls (tool results, observations, a user's or
// another model's messages) reaches the model only in a later call's
// prompt and carries no loss. Where a call's output ids also hold tokens
// the model did not write (a run's tool episode places tool results
// between the engine calls of one turn), the execute_tool spans of the
// call's turn say where (AttrInsertedStart, AttrInsertedEnd), the call how
// many (AttrInsertedTokens), and those tokens get loss mask 0. A trace
// whose pieces do not add up is refused with an *AlignmentError naming
// the span: logprobs or a usage count that disagree with the token ids,
// a placed result outside the call's output or overlapping another, a
// count the tool spans do not account for, or a tool that ran while a
// call was generating and says nothing of where its result went.
//
// Calls of other models than opt.Model are never trained (a judge's or
// another agent's answers are not the policy's to train on; one may sit,
// masked, in a later call's prompt); with
// opt.Model empty, a trace whose calls name more than one model is
// refused, as which one is being trained is not said.
//
// Token ids and logprobs are the recorded ones where the call carried
// them (vLLM's return_token_ids and logprobs; the first choice of a
// call); otherwise the text is re-tokenized and logprobs are zero (Note
// says so). Traces whose first prompt is the same share a GRPO group
// (offline GRPO groups traces by prompt), numbered in order of first
// appearance.
func Trajectories(traces []Trace, opt TrajectoryOptions) (turns []data.Turn, dropped []Dropped, err error) {
	b, err := Build(traces, opt)
	if err != nil {
		return nil, nil, err
	}
	return b.Turns, b.Dropped, nil
}

// Build is Trajectories with what it counted, and the calls of a
// conversation merged into one row (unless opt.PerCall): a call whose
// prompt token ids begin with the whole sequence of one of its trace's
// latest rows (that row's prompt and response ids, token for token)
// joins that row. The row's response grows by what the call's prompt
// adds (tool results,
// observations, a user's or another model's messages: loss mask 0,
// logprob 0) and by the call's answer (its own mask and logprobs), so
// every token keeps its call's mask and logprob and the learner sees
// each answer in the context its call saw, computing the conversation's
// early tokens once instead of once per call. A call that extends no
// row, or whose row was answered by another model, sampled from another
// weight version or trains on another reward (unless opt.MergeRewards),
// starts a new row: Splits names it and why.
func Build(traces []Trace, opt TrajectoryOptions) (*Built, error) {
	var (
		turns   []data.Turn
		dropped []Dropped
		out     Built
	)
	groups := map[uint64]int64{}
	samples := map[int64]int32{}
	// skip reports whether err refuses the trace only (opt.SkipRefused):
	// it is dropped and the others go on.
	skip := func(err error) bool {
		var ae *AlignmentError
		if !opt.SkipRefused || !errors.As(err, &ae) {
			return false
		}
		dropped = append(dropped, Dropped{Trace: ae.Trace, Span: ae.Span, Why: "refused: " + ae.Why, Refused: true})
		return true
	}
traceLoop:
	for ti := range traces {
		t := &traces[ti]
		reward, ok := t.Reward(opt.Reward)
		if !ok && !opt.KeepUnrewarded {
			dropped = append(dropped, Dropped{Trace: t.ID.String(), Why: "no reward " + rewardName(opt.Reward)})
			continue
		}
		if opt.Model == "" {
			if err := oneModel(t); err != nil {
				if skip(err) {
					continue
				}
				return nil, err
			}
		}
		nested := toolsInCalls(t)
		placed, err := placedResults(t, nested)
		if err != nil {
			if skip(err) {
				continue
			}
			return nil, err
		}
		var (
			rows        []data.Turn
			spanIDs     []string
			retokenized int
		)
		for si := range t.Spans {
			s := &t.Spans[si]
			if !isAnswer(s) {
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
			mask, err := lossMask(t, s, nested.tools[si], placed[si])
			if err != nil {
				if skip(err) {
					continue traceLoop // none of its rows
				}
				return nil, err
			}
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
					// The answer's text is the model's own: nothing to mask.
					row.ResponseIDs = int32s32(opt.Tokenizer.Encode(firstAnswer(s.OutputMessages)))
					mask = nil
				}
			}
			if len(row.ResponseIDs) == 0 {
				drop("empty answer")
				continue
			}
			row.LogProbs = s.OutputLogprobs
			if row.LogProbs == nil || s.OutputTokenIDs == nil {
				row.LogProbs = make([]float32, len(row.ResponseIDs))
				row.Note = joinNote(row.Note, "logprobs not recorded")
			}
			if mask == nil {
				mask = make([]float32, len(row.ResponseIDs))
				for i := range mask {
					mask[i] = 1
				}
			}
			row.LossMask = mask
			rows = append(rows, row)
			spanIDs = append(spanIDs, s.SpanID.String())
			if strings.Contains(row.Note, "re-tokenized") {
				retokenized++
			}
		}
		if len(rows) == 0 {
			continue
		}
		out.Calls += len(rows)
		out.Retokenized += retokenized
		if !opt.PerCall {
			var splits []Split
			rows, splits = mergeCalls(rows, spanIDs, opt.MergeRewards)
			out.Splits = append(out.Splits, splits...)
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
	out.Turns, out.Dropped = turns, dropped
	return &out, nil
}

// openRows is how many of a trace's latest rows a call may extend, most
// recent first: agents that take turns in one trace (several
// conversations interleaved) merge, and a hostile trace of many calls
// costs at most this many comparisons of its tokens per call.
const openRows = 8

// mergeCalls folds each of one trace's call rows (in start order; spans
// their span ids) into the latest row whose sequence its prompt extends
// token for token (Build), and says where it could not. The check is on
// token ids, never on text: text that renders the same may tokenize
// differently, and only the ids say that the learner would see the
// call's answer in the context the call saw.
func mergeCalls(rows []data.Turn, spans []string, mergeRewards bool) ([]data.Turn, []Split) {
	var (
		out    []data.Turn
		owned  []bool // out[k]'s id, logprob and mask slices are its own
		splits []Split
	)
	last := -1 // the row of the call before
	for i, r := range rows {
		target, reason, why := -1, SplitReason(""), ""
		for k := len(out) - 1; k >= max(0, len(out)-openRows); k-- {
			if divergence(&out[k], &r) >= 0 {
				continue
			}
			if reason, why = compatible(&out[k], &r, mergeRewards); reason == "" {
				target = k
			}
			break
		}
		if target < 0 {
			if last >= 0 {
				if reason == "" {
					reason, why = SplitPrefix, mismatch(&out[last], &r)
				}
				splits = append(splits, Split{Trace: r.EpisodeID, Span: spans[i], Reason: reason, Why: why})
			}
			r.Turn = int32(len(out))
			out, owned = append(out, r), append(owned, false)
			last = len(out) - 1
			continue
		}
		cur := &out[target]
		if !owned[target] {
			// The first call's slices may share their arrays with the
			// stored span's ids: copy them once, append in place after.
			cur.ResponseIDs, cur.LogProbs, cur.LossMask = slices.Clone(cur.ResponseIDs), slices.Clone(cur.LogProbs), slices.Clone(cur.LossMask)
			owned[target] = true
		}
		inserted := r.PromptIDs[len(cur.PromptIDs)+len(cur.ResponseIDs):]
		cur.ResponseIDs = append(append(cur.ResponseIDs, inserted...), r.ResponseIDs...)
		cur.LogProbs = append(append(cur.LogProbs, make([]float32, len(inserted))...), r.LogProbs...)
		cur.LossMask = append(append(cur.LossMask, make([]float32, len(inserted))...), r.LossMask...)
		cur.ResponseText += r.ResponseText
		cur.FinishReason, cur.Reward = r.FinishReason, r.Reward
		if r.Note != "" && !strings.Contains(cur.Note, r.Note) {
			cur.Note = joinNote(cur.Note, r.Note)
		}
		cur.Call.End = r.Call.End
		cur.Call.EndShared = cur.Call.EndShared || r.Call.EndShared
		last = target
	}
	return out, splits
}

// divergence is the first token of call row r's prompt that differs from
// row cur's sequence (its prompt, then its response), len(r.PromptIDs)
// when the prompt ends before the sequence does, or -1 when the prompt
// extends the sequence.
func divergence(cur, r *data.Turn) int {
	if len(r.PromptIDs) < len(cur.PromptIDs)+len(cur.ResponseIDs) {
		return len(r.PromptIDs)
	}
	for k, id := range cur.PromptIDs {
		if r.PromptIDs[k] != id {
			return k
		}
	}
	for k, id := range cur.ResponseIDs {
		if r.PromptIDs[len(cur.PromptIDs)+k] != id {
			return len(cur.PromptIDs) + k
		}
	}
	return -1
}

// mismatch says where call row r's prompt stops extending row cur's
// sequence.
func mismatch(cur, r *data.Turn) string {
	seen := len(cur.PromptIDs) + len(cur.ResponseIDs)
	k := divergence(cur, r)
	if k < 0 {
		return "its prompt extends the conversation"
	}
	if k == len(r.PromptIDs) {
		return fmt.Sprintf("its prompt has %d tokens, fewer than the %d of the conversation so far (the context was cut?)", len(r.PromptIDs), seen)
	}
	want := cur.PromptIDs
	at := k
	if k >= len(cur.PromptIDs) {
		want, at = cur.ResponseIDs, k-len(cur.PromptIDs)
	}
	return fmt.Sprintf("its prompt token %d is %d where the conversation so far has %d", k, r.PromptIDs[k], want[at])
}

// compatible says why call row r, whose prompt extends row cur, still
// cannot join it ("" when it can).
func compatible(cur, r *data.Turn, mergeRewards bool) (SplitReason, string) {
	switch {
	case r.Call.Model != cur.Call.Model:
		return SplitModel, fmt.Sprintf("a call of %q after calls of %q", r.Call.Model, cur.Call.Model)
	case r.WeightVersion != cur.WeightVersion:
		return SplitVersion, fmt.Sprintf("weight version %d after %d", r.WeightVersion, cur.WeightVersion)
	case !mergeRewards && r.Reward != cur.Reward:
		return SplitReward, fmt.Sprintf("reward %v after %v", r.Reward, cur.Reward)
	}
	return "", ""
}

// isAnswer says whether s is a model call with an answer.
func isAnswer(s *Span) bool {
	return (s.Operation == OpChat || s.Operation == OpTextCompletion) && s.OutputMessages != ""
}

// modelOf is the model that answered call s (the one asked, when the
// answer names none).
func modelOf(s *Span) string {
	if s.ResponseModel != "" {
		return s.ResponseModel
	}
	return s.RequestModel
}

// oneModel refuses trace t when its calls were answered by more than one
// model and none was named as the one being trained.
func oneModel(t *Trace) error {
	var models []string
	for i := range t.Spans {
		s := &t.Spans[i]
		if !isAnswer(s) || s.Failed() || slices.Contains(models, modelOf(s)) {
			continue
		}
		models = append(models, modelOf(s))
		if len(models) > 1 {
			named := make([]string, len(models))
			for k, m := range models {
				named[k] = strconv.Quote(m)
			}
			return &AlignmentError{Trace: t.ID.String(), Span: s.SpanID.String(), Models: models, Why: fmt.Sprintf(
				"model calls of %s in one trace, and no model is named as the one being trained: another model's answers (a judge's, another agent's) are not the policy's to train on",
				strings.Join(named, " and "))}
		}
	}
	return nil
}

// placement is a tool result placed among a call's output token ids.
type placement struct {
	tool       *Span
	start, end int64
}

// nesting says which tools of a trace ran inside which model calls (of
// the same turn, or where either does not say its turn): tools maps a
// call's index in the trace's spans to its tools, calls a tool to its
// calls.
type nesting struct {
	tools map[int][]*Span
	calls map[*Span][]int
}

// toolsInCalls finds, for each model call of t, the tools that started
// after it and ended before it answered. Tools are searched in start
// order, so calls that do not overlap cost one look at each tool, not a
// scan of the trace each.
func toolsInCalls(t *Trace) nesting {
	n := nesting{tools: map[int][]*Span{}, calls: map[*Span][]int{}}
	var tools []*Span
	for i := range t.Spans {
		if t.Spans[i].Operation == OpExecuteTool {
			tools = append(tools, &t.Spans[i])
		}
	}
	if len(tools) == 0 {
		return n
	}
	slices.SortStableFunc(tools, func(a, b *Span) int { return a.Start.Compare(b.Start) })
	for k := range t.Spans {
		s := &t.Spans[k]
		if !isAnswer(s) {
			continue
		}
		lo, _ := slices.BinarySearchFunc(tools, s.Start, func(c *Span, at time.Time) int {
			if c.Start.After(at) {
				return 1
			}
			return -1
		})
		for _, c := range tools[lo:] {
			if !c.Start.Before(s.End) {
				break
			}
			if c.End.Before(s.End) && sameTurn(s, c) {
				n.tools[k] = append(n.tools[k], c)
				n.calls[c] = append(n.calls[c], k)
			}
		}
	}
	return n
}

// placedResults maps each model call of t (its index in t.Spans) to the
// tool results placed among its output ids (AttrInsertedStart/End): the
// call of the tool's turn that ran around it. A tool span with a
// placement and no such call, or a malformed one, is an *AlignmentError.
func placedResults(t *Trace, nested nesting) (map[int][]placement, error) {
	out := map[int][]placement{}
	for i := range t.Spans {
		c := &t.Spans[i]
		if c.Operation != OpExecuteTool {
			continue
		}
		a := intAttrs(c)
		start, okS := a[AttrInsertedStart]
		end, okE := a[AttrInsertedEnd]
		if !okS && !okE {
			continue
		}
		bad := func(why string, args ...any) error {
			return &AlignmentError{Trace: t.ID.String(), Span: c.SpanID.String(), Why: fmt.Sprintf("tool %q: ", c.ToolName) + fmt.Sprintf(why, args...)}
		}
		if !okS || !okE || start < 0 || end <= start {
			return nil, bad("its result's place among a call's output tokens (%s, %s) is not a range [start, end) with 0 ≤ start < end", AttrInsertedStart, AttrInsertedEnd)
		}
		calls := nested.calls[c]
		switch {
		case len(calls) == 0:
			return nil, bad("its result is placed among output tokens [%d, %d) of a call of its turn, but no model call of its turn ran around it", start, end)
		case len(calls) > 1:
			return nil, bad("its result is placed among the output tokens of a call of its turn, and two calls (%s, %s) ran around it", t.Spans[calls[0]].SpanID, t.Spans[calls[1]].SpanID)
		}
		out[calls[0]] = append(out[calls[0]], placement{c, start, end})
	}
	return out, nil
}

// lossMask is call s's mask over its recorded output ids: 0 where the
// tool results placed says are, 1 elsewhere; nil when all are the model's
// or no ids were recorded. It checks the pieces against the ids: among
// them the tools that ran inside the call (inside).
func lossMask(t *Trace, s *Span, inside []*Span, placed []placement) ([]float32, error) {
	bad := func(why string, args ...any) error {
		return &AlignmentError{Trace: t.ID.String(), Span: s.SpanID.String(), Why: fmt.Sprintf("call of %q: ", modelOf(s)) + fmt.Sprintf(why, args...)}
	}
	n := len(s.OutputTokenIDs)
	if s.OutputLogprobs != nil && len(s.OutputLogprobs) != n {
		return nil, bad("%d logprobs recorded for %d output token ids", len(s.OutputLogprobs), n)
	}
	if s.PromptTokenIDs != nil && s.InputTokens > 0 && s.InputTokens != int64(len(s.PromptTokenIDs)) {
		return nil, bad("its usage says %d input tokens, but %d prompt token ids are recorded", s.InputTokens, len(s.PromptTokenIDs))
	}
	declared := intAttrs(s)[AttrInsertedTokens]
	if s.OutputTokenIDs == nil {
		if declared > 0 || len(placed) > 0 {
			return nil, bad("tokens not the model's are placed among its output, but no output token ids are recorded to place them in")
		}
		return nil, nil
	}
	// A tool that ran while the call was generating may have its result
	// among the call's tokens; unless it says where, they cannot be told
	// from the model's (runs before rlnode recorded the places did this).
	for _, c := range inside {
		if !slices.ContainsFunc(placed, func(p placement) bool { return p.tool == c }) {
			return nil, bad("tool span %s (%q) ran while the call was generating and does not say which of the %d output tokens hold its result (%s, %s); refusing to train them all as the model's",
				c.SpanID, c.ToolName, n, AttrInsertedStart, AttrInsertedEnd)
		}
	}
	if len(placed) == 0 && declared == 0 {
		return nil, nil
	}
	mask := make([]float32, n)
	for i := range mask {
		mask[i] = 1
	}
	var total int64
	for _, p := range placed {
		if p.end > int64(n) {
			return nil, bad("tool span %s places its result at output tokens [%d, %d), past the %d recorded", p.tool.SpanID, p.start, p.end, n)
		}
		for k := p.start; k < p.end; k++ {
			if mask[k] == 0 {
				return nil, bad("tool span %s places its result at output tokens [%d, %d), over another tool's", p.tool.SpanID, p.start, p.end)
			}
			if s.OutputLogprobs != nil && s.OutputLogprobs[k] != 0 {
				// A run records 0 for tokens its engine did not sample;
				// a sampled one here means the place is not the result's.
				return nil, bad("tool span %s places its result at output tokens [%d, %d), but token %d has sampled logprob %v", p.tool.SpanID, p.start, p.end, k, s.OutputLogprobs[k])
			}
			mask[k] = 0
		}
		total += p.end - p.start
	}
	if total != declared {
		return nil, bad("%d of its output tokens are not the model's (%s), but its tools' results are placed at %d", declared, AttrInsertedTokens, total)
	}
	return mask, nil
}

// sameTurn says whether spans a and b are of the same turn (or either
// does not say).
func sameTurn(a, b *Span) bool { return a.Turn == NoValue || b.Turn == NoValue || a.Turn == b.Turn }

// intAttrs are s's integer attributes among its other attributes.
func intAttrs(s *Span) map[string]int64 {
	if !strings.Contains(s.Attributes, "rlnode.inserted_tokens") {
		return nil
	}
	var m map[string]any
	if json.Unmarshal([]byte(s.Attributes), &m) != nil {
		return nil
	}
	out := map[string]int64{}
	for _, k := range []string{AttrInsertedTokens, AttrInsertedStart, AttrInsertedEnd} {
		if f, ok := m[k].(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			out[k] = int64(f)
		} else if ok {
			out[k] = -1 // not an integer: refused as a bad range
		}
	}
	return out
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
	c := data.Call{Model: s.ResponseModel, Start: s.Start, End: s.End, EndShared: s.EndShared()}
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
