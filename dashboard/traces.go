package dashboard

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rlnode/rlnode/traces"
)

// Bounds on one trace request's answer.
const (
	defaultTraceRows  = 50
	maxTraceRows      = 500
	searchedStores    = 16 // stores searched when none is named
	maxSpansShown     = 5000
	maxTextBytes      = 16 << 10 // of each message, argument or result sent
	defaultEpisodes   = 20
	maxEpisodesShown  = 200
	maxPromptIDsShown = 64
	maxToolsShown     = 64 // per turn of an episode
	maxSkippedShown   = 20
)

// TraceRow is one trace in the search results.
type TraceRow struct {
	ID         string             `json:"id"`
	Store      string             `json:"store"`
	Start      time.Time          `json:"start"`
	DurationMS float64            `json:"duration_ms"`
	Name       string             `json:"name"` // the root span's
	Spans      int                `json:"spans"`
	Errors     int                `json:"errors"`
	Agents     []string           `json:"agents,omitempty"`
	Models     []string           `json:"models,omitempty"`
	Tools      []string           `json:"tools,omitempty"`
	Run        string             `json:"run,omitempty"`
	Rewards    map[string]float64 `json:"rewards,omitempty"` // summed per name
}

// StatView is traces.StatRow for the page, durations in milliseconds.
type StatView struct {
	Key          string  `json:"key"`
	Calls        int     `json:"calls"`
	Errors       int     `json:"errors"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	P50MS        float64 `json:"p50_ms"`
	P90MS        float64 `json:"p90_ms"`
	P99MS        float64 `json:"p99_ms"`
	Rewards      int     `json:"rewards"`
	RewardMean   float64 `json:"reward_mean"`
}

// TraceSearch is the traces page's answer: the matching traces, newest
// first, a page of them, and the stats of them all.
type TraceSearch struct {
	Stores   []TraceStore          `json:"stores"`
	Searched []string              `json:"searched"`
	Errors   []string              `json:"errors,omitempty"`  // stores that could not be read
	Skipped  []string              `json:"skipped,omitempty"` // files of them that could not
	Total    int                   `json:"total"`
	Offset   int                   `json:"offset"`
	Traces   []TraceRow            `json:"traces"`
	Stats    map[string][]StatView `json:"stats"`
}

// SpanView is one span of a trace as the tree draws it; times are
// milliseconds from the trace's start.
type SpanView struct {
	ID             string          `json:"id"`
	Parent         string          `json:"parent,omitempty"`
	Name           string          `json:"name"`
	Operation      string          `json:"operation,omitempty"`
	StartMS        float64         `json:"start_ms"`
	DurationMS     float64         `json:"duration_ms"`
	EndShared      bool            `json:"end_shared,omitempty"` // the duration is the call's batch's
	Status         string          `json:"status"`
	StatusMessage  string          `json:"status_message,omitempty"`
	ErrorType      string          `json:"error_type,omitempty"`
	Agent          string          `json:"agent,omitempty"`
	Model          string          `json:"model,omitempty"`
	Provider       string          `json:"provider,omitempty"`
	Tool           string          `json:"tool,omitempty"`
	InputTokens    *int64          `json:"input_tokens,omitempty"`
	OutputTokens   *int64          `json:"output_tokens,omitempty"`
	Run            string          `json:"run,omitempty"`
	Step           *int64          `json:"step,omitempty"`
	Episode        *int64          `json:"episode,omitempty"`
	Turn           *int64          `json:"turn,omitempty"`
	WeightVersion  *int64          `json:"weight_version,omitempty"`
	Policy         string          `json:"policy,omitempty"`
	Conversation   string          `json:"conversation,omitempty"`
	Rewards        []traces.Reward `json:"rewards,omitempty"`
	FinishReasons  []string        `json:"finish_reasons,omitempty"`
	Input          string          `json:"input,omitempty"`
	Output         string          `json:"output,omitempty"`
	ToolArguments  string          `json:"tool_arguments,omitempty"`
	ToolResult     string          `json:"tool_result,omitempty"`
	PromptTokenIDs int             `json:"prompt_token_ids,omitempty"` // how many were recorded
	Attributes     string          `json:"attributes,omitempty"`
}

// TraceView is one trace, its spans in start order.
type TraceView struct {
	Store     string     `json:"store"`
	ID        string     `json:"id"`
	Start     time.Time  `json:"start"`
	Spans     []SpanView `json:"spans"`
	Truncated int        `json:"truncated,omitempty"` // spans not sent
}

// parseFilter reads the search parameters into a traces.Filter.
func parseFilter(q url.Values) (traces.Filter, error) {
	f := traces.Any()
	f.Agent, f.Model, f.Run, f.Tool = q.Get("agent"), q.Get("model"), q.Get("run"), q.Get("tool")
	f.TraceID, f.Reward = strings.TrimSpace(q.Get("trace")), q.Get("reward")
	// A trace id is 32 hex digits; the filter takes a prefix of one.
	if id := f.TraceID; len(id) > 32 || strings.Trim(strings.ToLower(id), "0123456789abcdef") != "" {
		return f, fmt.Errorf("trace=%q: want a trace id (32 hex digits) or a prefix of one", id)
	}
	for _, b := range []struct {
		name string
		to   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if s := q.Get(b.name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return f, fmt.Errorf("%s=%q: want a time like 2026-01-02T15:04:05Z", b.name, s)
			}
			*b.to = t
		}
	}
	for _, b := range []struct {
		name string
		to   *float64
	}{{"min_reward", &f.MinReward}, {"max_reward", &f.MaxReward}} {
		if s := q.Get(b.name); s != "" {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(v) {
				return f, fmt.Errorf("%s=%q: want a number", b.name, s)
			}
			*b.to = v
		}
	}
	return f, nil
}

// pageBounds reads offset and limit (default def, at most most). The
// offset is capped so that offset+limit cannot wrap negative: a page cut
// as s[min(offset, len(s)):min(offset+limit, len(s))] is then empty past
// the end, never out of range.
func pageBounds(q url.Values, def, most int) (offset, limit int) {
	limit = def
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 {
		limit = min(n, most)
	}
	if n, err := strconv.Atoi(q.Get("offset")); err == nil && n > 0 {
		offset = min(n, math.MaxInt-limit)
	}
	return offset, limit
}

func badRequest(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
}

func (h *handler) traceSearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := parseFilter(q)
	if err != nil {
		badRequest(w, err)
		return
	}
	offset, limit := pageBounds(q, defaultTraceRows, maxTraceRows)
	out := TraceSearch{Stores: h.traces.List(), Searched: []string{}, Traces: []TraceRow{}, Offset: offset}
	var stores []string
	if named := q["store"]; len(named) > 0 {
		if len(named) > searchedStores {
			badRequest(w, fmt.Errorf("%d stores asked; at most %d at once", len(named), searchedStores))
			return
		}
		for _, id := range named {
			st, err := h.traces.Resolve(id)
			if err != nil {
				out.Errors = append(out.Errors, err.Error())
				continue
			}
			stores = append(stores, st.ID)
		}
	} else {
		for _, st := range out.Stores[:min(len(out.Stores), searchedStores)] {
			stores = append(stores, st.ID)
		}
		if len(out.Stores) > searchedStores {
			out.Errors = append(out.Errors, fmt.Sprintf("%d stores; the first %d were searched: pick one to search the others", len(out.Stores), searchedStores))
		}
	}
	type hit struct {
		store string
		t     *traces.Trace
	}
	var hits []hit
	var matched []traces.Trace
	for _, dir := range stores {
		all, skipped, err := h.traces.Traces(r.Context(), dir)
		out.Searched = append(out.Searched, dir)
		if err != nil {
			out.Errors = append(out.Errors, err.Error())
			continue
		}
		for _, s := range skipped {
			if len(out.Skipped) < maxSkippedShown {
				out.Skipped = append(out.Skipped, s)
			}
		}
		for i := range all {
			if f.Match(&all[i]) {
				hits = append(hits, hit{dir, &all[i]})
				matched = append(matched, all[i])
			}
		}
	}
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].t.Start().After(hits[j].t.Start()) })
	out.Total = len(hits)
	for _, x := range hits[min(offset, len(hits)):min(offset+limit, len(hits))] {
		out.Traces = append(out.Traces, traceRow(x.store, x.t))
	}
	out.Stats = map[string][]StatView{}
	for _, by := range []string{"agent", "tool", "model"} {
		rows, _ := traces.Stats(matched, by, f.Reward)
		views := make([]StatView, len(rows))
		for i, s := range rows {
			views[i] = StatView{Key: s.Key, Calls: s.Calls, Errors: s.Errors, InputTokens: s.InputTokens, OutputTokens: s.OutputTokens,
				P50MS: ms(s.P50), P90MS: ms(s.P90), P99MS: ms(s.P99), Rewards: s.Rewards, RewardMean: round(s.RewardMean)}
		}
		out.Stats[by] = views
	}
	writeJSON(w, http.StatusOK, out)
}

func ms(d time.Duration) float64 { return round(float64(d) / float64(time.Millisecond)) }

// distinct appends v to list unless it is empty or there already.
func distinct(list []string, v string) []string {
	if v == "" || slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}

func traceRow(store string, t *traces.Trace) TraceRow {
	row := TraceRow{ID: t.ID.String(), Store: store, Start: t.Start(), DurationMS: ms(t.End().Sub(t.Start())),
		Name: t.Root().Name, Spans: len(t.Spans), Run: t.Root().RunID}
	for i := range t.Spans {
		s := &t.Spans[i]
		if s.Failed() {
			row.Errors++
		}
		row.Agents = distinct(row.Agents, s.AgentName)
		row.Models = distinct(row.Models, cmp(s.RequestModel, s.ResponseModel))
		row.Tools = distinct(row.Tools, s.ToolName)
		row.Run = cmp(row.Run, s.RunID)
		for _, rw := range s.Rewards {
			if row.Rewards == nil {
				row.Rewards = map[string]float64{}
			}
			row.Rewards[rw.Name] = round(row.Rewards[rw.Name] + rw.Value)
		}
	}
	return row
}

// cmp is the first non-empty string.
func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (h *handler) traceOne(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st, err := h.traces.Resolve(q.Get("store"))
	if err != nil {
		badRequest(w, err)
		return
	}
	id := strings.ToLower(strings.TrimSpace(q.Get("id")))
	if len(id) != 32 {
		badRequest(w, fmt.Errorf("id=%q: want a trace id of 32 hex digits", q.Get("id")))
		return
	}
	all, _, err := h.traces.Traces(r.Context(), st.ID)
	if err != nil {
		writeJSON(w, http.StatusOK, map[string]string{"error": err.Error()})
		return
	}
	for i := range all {
		if all[i].ID.String() == id {
			writeJSON(w, http.StatusOK, traceView(st.ID, &all[i]))
			return
		}
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("trace %s is not in the store %s", id, st.ID)})
}

func traceView(store string, t *traces.Trace) TraceView {
	v := TraceView{Store: store, ID: t.ID.String(), Start: t.Start()}
	n := min(len(t.Spans), maxSpansShown)
	v.Truncated = len(t.Spans) - n
	for i := range t.Spans[:n] {
		v.Spans = append(v.Spans, spanView(t.Start(), &t.Spans[i]))
	}
	return v
}

func spanView(t0 time.Time, s *traces.Span) SpanView {
	v := SpanView{ID: s.SpanID.String(), Name: clip(s.Name, 512), Operation: s.Operation,
		StartMS: ms(s.Start.Sub(t0)), DurationMS: ms(s.Duration()), EndShared: s.EndShared(), Status: s.Status.String(),
		StatusMessage: clip(s.StatusMessage, maxTextBytes), ErrorType: s.ErrorType, Agent: s.AgentName,
		Model: cmp(s.RequestModel, s.ResponseModel), Provider: s.Provider, Tool: s.ToolName,
		InputTokens: set(s.InputTokens), OutputTokens: set(s.OutputTokens), Run: s.RunID,
		Step: set(s.Step), Episode: set(s.Episode), Turn: set(s.Turn), WeightVersion: set(s.WeightVersion),
		Policy: s.Policy, Conversation: s.ConversationID, Rewards: slices.Clone(s.Rewards), FinishReasons: s.FinishReasons,
		Input: messagesText(s.InputMessages), Output: messagesText(s.OutputMessages),
		ToolArguments: clip(s.ToolArguments, maxTextBytes), ToolResult: clip(s.ToolResult, maxTextBytes),
		PromptTokenIDs: len(s.PromptTokenIDs), Attributes: clip(s.Attributes, maxTextBytes)}
	if s.ParentID.IsValid() {
		v.Parent = s.ParentID.String()
	}
	for i := range v.Rewards { // a copy: the store's traces are shared between requests
		v.Rewards[i].Reason = clip(v.Rewards[i].Reason, maxTextBytes)
	}
	return v
}

// set is a pointer to v, nil when v is unset (traces.NoValue).
func set(v int64) *int64 {
	if v == traces.NoValue {
		return nil
	}
	return &v
}

// clip cuts s to at most n bytes (at a character boundary), saying how
// much was left out.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d more bytes)", len(s)-cut)
}

// messagesText renders GenAI messages JSON ([{"role", "parts": [{"type",
// "content"}]}]) as "role: text" lines; anything else is shown as is.
func messagesText(raw string) string { return renderMessages(raw, true) }

// renderMessages is messagesText, the roles left out unless roles.
func renderMessages(raw string, roles bool) string {
	if raw == "" {
		return ""
	}
	var msgs []struct {
		Role  string `json:"role"`
		Parts []struct {
			Type    string          `json:"type"`
			Content json.RawMessage `json:"content"`
			Name    string          `json:"name"`
		} `json:"parts"`
	}
	if err := json.Unmarshal([]byte(raw), &msgs); err != nil {
		return clip(raw, maxTextBytes)
	}
	var b strings.Builder
	for _, m := range msgs {
		for _, p := range m.Parts {
			text := string(p.Content)
			var s string
			if json.Unmarshal(p.Content, &s) == nil {
				text = s
			}
			if p.Type != "text" && p.Type != "" {
				tag := p.Type
				if p.Name != "" {
					tag += " " + p.Name
				}
				text = "[" + tag + "] " + text
			}
			if roles {
				fmt.Fprintf(&b, "%s: ", cmp(m.Role, "?"))
			}
			b.WriteString(text + "\n")
		}
	}
	return clip(strings.TrimSuffix(b.String(), "\n"), maxTextBytes)
}
