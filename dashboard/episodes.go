package dashboard

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/rlnode/rlnode/traces"
)

// EpisodeTurn is one turn of an episode: what the policy was given and
// answered, and the reward it trained on.
type EpisodeTurn struct {
	Turn          int64    `json:"turn"`
	WeightVersion *int64   `json:"weight_version,omitempty"`
	Prompt        string   `json:"prompt,omitempty"` // the input messages, when recorded as text
	PromptTokens  int      `json:"prompt_tokens"`
	PromptIDs     []int32  `json:"prompt_ids,omitempty"` // the first maxPromptIDsShown
	Response      string   `json:"response"`
	OutputTokens  int64    `json:"output_tokens"`
	FinishReason  string   `json:"finish_reason,omitempty"`
	Reward        *float64 `json:"reward,omitempty"`
	Feedback      string   `json:"feedback,omitempty"` // the reward's reason: why it is what it is
	Status        string   `json:"status"`
	// Tools are the tools the turn called (an agent's actions), in order.
	Tools []EpisodeTool `json:"tools,omitempty"`
}

// EpisodeTool is one tool call of a turn: its execute_tool span.
type EpisodeTool struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments,omitempty"`
	Result    string `json:"result,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Episode is one recorded RL episode (a trace `rlnode run` wrote).
type Episode struct {
	Trace   string        `json:"trace"`
	ID      string        `json:"id"` // the episode id
	Step    int64         `json:"step"`
	Group   int64         `json:"group"`
	Policy  string        `json:"policy,omitempty"`
	Final   *float64      `json:"final,omitempty"` // the verifier's score of the last answer
	Verdict string        `json:"verdict"`         // correct, partial, wrong, or unscored
	Turns   []EpisodeTurn `json:"turns"`
}

// EpisodePage is a page of a run's episodes, by step then group.
type EpisodePage struct {
	Run     string    `json:"run"`
	Name    string    `json:"name"`
	Store   string    `json:"store"`
	Error   string    `json:"error,omitempty"`
	Skipped []string  `json:"skipped,omitempty"`
	Steps   []int64   `json:"steps"` // the steps with episodes
	Total   int       `json:"total"` // episodes (of the step asked, if one was)
	Offset  int       `json:"offset"`
	Items   []Episode `json:"episodes"`
}

// Verdict names a verifier score in [0, 1].
func Verdict(score float64, ok bool) string {
	switch {
	case !ok:
		return "unscored"
	case score >= 1:
		return "correct"
	case score > 0:
		return "partial"
	}
	return "wrong"
}

// EpisodeOf reads an episode from a trace: its root span names the
// episode, each model call with a turn number is a turn, each tool call
// one of its turn's tools. ok is false for a trace that is not an episode.
func EpisodeOf(t *traces.Trace) (Episode, bool) {
	root := t.Root()
	if root.Operation != traces.OpInvokeAgent || root.RunID == "" {
		return Episode{}, false
	}
	e := Episode{Trace: t.ID.String(), ID: root.ConversationID, Step: root.Step, Group: root.Episode, Turns: []EpisodeTurn{}}
	final, ok := 0.0, false
	for _, r := range root.Rewards {
		if r.Name == "final" {
			final, ok = r.Value, true
		}
	}
	if ok {
		e.Final = &final
	}
	e.Verdict = Verdict(final, ok)
	var tools []*traces.Span
	for i := range t.Spans {
		s := &t.Spans[i]
		if s == root || s.Turn == traces.NoValue {
			continue
		}
		if s.Operation == traces.OpExecuteTool {
			tools = append(tools, s)
			continue
		}
		e.Policy = cmp(e.Policy, s.Policy)
		turn := EpisodeTurn{Turn: s.Turn, WeightVersion: set(s.WeightVersion), Prompt: messagesText(s.InputMessages),
			PromptTokens: len(s.PromptTokenIDs), Response: renderMessages(s.OutputMessages, false), OutputTokens: max(s.OutputTokens, int64(len(s.OutputTokenIDs))),
			Status: s.Status.String()}
		turn.PromptIDs = slices.Clone(s.PromptTokenIDs[:min(len(s.PromptTokenIDs), maxPromptIDsShown)])
		if len(s.FinishReasons) > 0 {
			turn.FinishReason = s.FinishReasons[0]
		}
		for _, r := range s.Rewards {
			if r.Name == "reward" || turn.Reward == nil {
				v := r.Value
				turn.Reward, turn.Feedback = &v, clip(r.Reason, maxTextBytes)
			}
		}
		if turn.Feedback == "" {
			turn.Feedback = clip(s.StatusMessage, maxTextBytes)
		}
		e.Turns = append(e.Turns, turn)
	}
	sort.SliceStable(e.Turns, func(i, j int) bool { return e.Turns[i].Turn < e.Turns[j].Turn })
	sort.SliceStable(tools, func(i, j int) bool { return tools[i].Start.Before(tools[j].Start) })
	for _, s := range tools {
		for k := range e.Turns {
			if e.Turns[k].Turn == s.Turn && len(e.Turns[k].Tools) < maxToolsShown {
				e.Turns[k].Tools = append(e.Turns[k].Tools, EpisodeTool{Name: clip(s.ToolName, 256), Arguments: clip(s.ToolArguments, maxTextBytes),
					Result: clip(s.ToolResult, maxTextBytes), Error: clip(s.StatusMessage, maxTextBytes)})
				break
			}
		}
	}
	return e, true
}

func (h *handler) episodes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	run, err := h.runs.Resolve(q.Get("run"))
	if err != nil {
		badRequest(w, err)
		return
	}
	offset, limit := pageBounds(q, defaultEpisodes, maxEpisodesShown)
	store := filepath.Join(run, RunTracesFolder)
	page := EpisodePage{Run: run, Name: runName(run, readRecipeHead(run)), Store: store, Steps: []int64{}, Offset: offset, Items: []Episode{}}
	step := int64(-1)
	if s := q.Get("step"); s != "" {
		if step, err = strconv.ParseInt(s, 10, 64); err != nil || step < 0 {
			badRequest(w, fmt.Errorf("step=%q: want a step number", s))
			return
		}
	}
	all, skipped, err := h.traces.Traces(r.Context(), store)
	if err != nil {
		page.Error = err.Error() + " (runs record their episodes in DIR/traces unless started with --traces off)"
		writeJSON(w, http.StatusOK, page)
		return
	}
	page.Skipped = skipped[:min(len(skipped), maxSkippedShown)]
	var eps []*traces.Trace
	seen := map[int64]bool{}
	for i := range all {
		root := all[i].Root()
		if root.Operation != traces.OpInvokeAgent || root.RunID == "" {
			continue
		}
		if !seen[root.Step] {
			seen[root.Step] = true
			page.Steps = append(page.Steps, root.Step)
		}
		if step < 0 || root.Step == step {
			eps = append(eps, &all[i])
		}
	}
	slices.Sort(page.Steps)
	sort.SliceStable(eps, func(i, j int) bool {
		a, b := eps[i].Root(), eps[j].Root()
		if a.Step != b.Step {
			return a.Step < b.Step
		}
		if a.Episode != b.Episode {
			return a.Episode < b.Episode
		}
		return a.ConversationID < b.ConversationID
	})
	page.Total = len(eps)
	for _, t := range eps[min(offset, len(eps)):min(offset+limit, len(eps))] {
		if e, ok := EpisodeOf(t); ok {
			page.Items = append(page.Items, e)
		}
	}
	writeJSON(w, http.StatusOK, page)
}
