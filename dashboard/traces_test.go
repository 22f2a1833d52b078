package dashboard

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/traces"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// writeStore writes spans to a new store at dir through the store's own
// writer.
func writeStore(t *testing.T, dir string, spans []traces.Span) {
	t.Helper()
	w, err := traces.OpenWriter(dir, traces.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(spans...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// agentTrace is an agent's trace: a root, a chat call under it and a tool
// call under the chat, with a reward on the root.
func agentTrace(id byte, agent, model, tool string, start time.Time, reward float64, failed bool) []traces.Span {
	var tid oteltrace.TraceID
	tid[0], tid[15] = id, 1
	mk := func(n byte, parent oteltrace.SpanID, name, op string, from, to time.Duration) traces.Span {
		s := traces.NewSpan()
		s.TraceID, s.ParentID, s.Name, s.Operation = tid, parent, name, op
		s.SpanID[0], s.SpanID[7] = id, n
		s.Start, s.End, s.Source, s.AgentName = start.Add(from), start.Add(to), agent, agent
		return s
	}
	root := mk(1, oteltrace.SpanID{}, "invoke_agent "+agent, traces.OpInvokeAgent, 0, 900*time.Millisecond)
	root.Rewards = []traces.Reward{{Name: "judge", Value: reward, Reason: "checked"}}
	chat := mk(2, root.SpanID, "chat "+model, traces.OpChat, 100*time.Millisecond, 600*time.Millisecond)
	chat.RequestModel, chat.InputTokens, chat.OutputTokens = model, 12, 30
	chat.InputMessages = `[{"role":"user","parts":[{"type":"text","content":"what is 2+2?"}]}]`
	chat.OutputMessages = `[{"role":"assistant","parts":[{"type":"text","content":"4"}]}]`
	call := mk(3, chat.SpanID, "execute_tool "+tool, traces.OpExecuteTool, 200*time.Millisecond, 400*time.Millisecond)
	call.ToolName, call.ToolArguments, call.ToolResult = tool, `{"q":"2+2"}`, "4"
	if failed {
		call.Status, call.StatusMessage = traces.StatusError, "tool timed out"
	}
	return []traces.Span{root, chat, call}
}

func getJSONInto(t *testing.T, u string, wantCode int, v any) {
	t.Helper()
	code, body, _ := get(t, u)
	if code != wantCode {
		t.Fatalf("GET %s: %d, want %d: %s", u, code, wantCode, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, body)
	}
}

func TestTracesAPI(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(root, "agents")
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var spans []traces.Span
	spans = append(spans, agentTrace(1, "solver", "qwen-0.5b", "calculator", t0, 1, false)...)
	spans = append(spans, agentTrace(2, "solver", "qwen-0.5b", "search", t0.Add(time.Hour), 0.25, true)...)
	spans = append(spans, agentTrace(3, "critic", "llama-1b", "calculator", t0.Add(2*time.Hour), 0, false)...)
	writeStore(t, store, spans)
	// A run folder with its own store, found without naming it.
	run := filepath.Join(root, "runs", "r1")
	writeRun(t, run, 0, 2, 2)
	turns := []data.Turn{{EpisodeID: "e0", PolicyID: "policy", PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3}, ResponseText: "4", FinalReward: 1, Reward: 1, FinishReason: "stop"}}
	writeStore(t, filepath.Join(run, RunTracesFolder), traces.SpansFromTurns("r1", 1, turns, 1, t0))

	srv, err := Serve("127.0.0.1:0", Config{RunDirs: []string{filepath.Join(root, "runs")}, TraceDirs: []string{store}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	api := srv.URL + "api/"

	var all TraceSearch
	getJSONInto(t, api+"traces", 200, &all)
	if len(all.Stores) != 2 || all.Stores[0].ID != store || all.Stores[1].Run != run {
		t.Fatalf("stores %+v, want %s then %s's", all.Stores, store, run)
	}
	if all.Total != 4 || len(all.Traces) != 4 {
		t.Fatalf("every store: %d traces (%d sent), want 4", all.Total, len(all.Traces))
	}
	for i := 1; i < len(all.Traces); i++ {
		if all.Traces[i].Start.After(all.Traces[i-1].Start) {
			t.Fatalf("traces not newest first: %v after %v", all.Traces[i].Start, all.Traces[i-1].Start)
		}
	}

	cases := []struct {
		query string
		want  []byte // first bytes of the trace ids, in order
	}{
		{"agent=solver", []byte{2, 1}},
		{"model=llama-1b", []byte{3}},
		{"tool=calculator", []byte{3, 1}},
		{"reward=judge&min_reward=0.2", []byte{2, 1}},
		{"reward=judge&max_reward=0.5&min_reward=0.1", []byte{2}},
		{"since=" + url.QueryEscape(t0.Add(30*time.Minute).Format(time.RFC3339)) + "&until=" + url.QueryEscape(t0.Add(90*time.Minute).Format(time.RFC3339)), []byte{2}},
		{"trace=03", []byte{3}},
		{"agent=nobody", nil},
	}
	for _, c := range cases {
		var res TraceSearch
		getJSONInto(t, api+"traces?store="+url.QueryEscape(store)+"&"+c.query, 200, &res)
		var got []byte
		for _, r := range res.Traces {
			id, _ := oteltrace.TraceIDFromHex(r.ID)
			got = append(got, id[0])
		}
		if string(got) != string(c.want) || res.Total != len(c.want) {
			t.Errorf("%s: traces %v (total %d), want %v", c.query, got, res.Total, c.want)
		}
	}

	// Stats of the matching traces, per agent, tool and model.
	var solver TraceSearch
	getJSONInto(t, api+"traces?store="+url.QueryEscape(store)+"&agent=solver&reward=judge", 200, &solver)
	tools := map[string]StatView{}
	for _, s := range solver.Stats["tool"] {
		tools[s.Key] = s
	}
	if len(tools) != 2 || tools["search"].Calls != 1 || tools["search"].Errors != 1 || tools["calculator"].Errors != 0 || tools["search"].P50MS != 200 {
		t.Errorf("tool stats %+v", solver.Stats["tool"])
	}
	if a := solver.Stats["agent"]; len(a) != 1 || a[0].Key != "solver" || a[0].Calls != 6 || a[0].Rewards != 2 || a[0].RewardMean != 0.625 {
		t.Errorf("agent stats %+v, want solver: 6 spans, 2 rewards averaging 0.625", a)
	}
	if m := solver.Stats["model"]; len(m) != 1 || m[0].InputTokens != 24 || m[0].OutputTokens != 60 {
		t.Errorf("model stats %+v", m)
	}

	// Paging.
	var page TraceSearch
	getJSONInto(t, api+"traces?store="+url.QueryEscape(store)+"&limit=2&offset=2", 200, &page)
	if page.Total != 3 || len(page.Traces) != 1 || !strings.HasPrefix(page.Traces[0].ID, "01") {
		t.Errorf("page 2 of 2: total %d, %+v", page.Total, page.Traces)
	}
	// An offset past any page, even one that offset+limit would wrap
	// negative, is an empty page, not a panic (the connection cut).
	for _, off := range []string{"1000", "9223372036854775807"} {
		var far TraceSearch
		getJSONInto(t, api+"traces?store="+url.QueryEscape(store)+"&offset="+off, 200, &far)
		if far.Total != 3 || len(far.Traces) != 0 {
			t.Errorf("offset %s: total %d, %d traces, want 3 and none", off, far.Total, len(far.Traces))
		}
	}

	// One trace as spans with parents, offsets and text.
	var tv TraceView
	getJSONInto(t, api+"trace?store="+url.QueryEscape(store)+"&id="+solver.Traces[0].ID, 200, &tv)
	if len(tv.Spans) != 3 || tv.Spans[1].Parent != tv.Spans[0].ID || tv.Spans[2].Parent != tv.Spans[1].ID {
		t.Fatalf("trace spans %+v, want root → chat → tool", tv.Spans)
	}
	if c := tv.Spans[1]; c.StartMS != 100 || c.DurationMS != 500 || c.Input != "user: what is 2+2?" || c.Output != "assistant: 4" || *c.InputTokens != 12 || c.EndShared {
		t.Errorf("chat span %+v", c)
	}
	if tl := tv.Spans[2]; tl.Status != "error" || tl.StatusMessage != "tool timed out" || tl.ToolArguments != `{"q":"2+2"}` {
		t.Errorf("tool span %+v", tl)
	}

	// Requests side by side share the store read once (run with -race).
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := api + "trace?store=" + url.QueryEscape(store) + "&id=" + solver.Traces[0].ID
			if i%2 == 1 {
				u = api + "traces?agent=solver"
			}
			if resp, err := http.Get(u); err == nil {
				codes[i] = resp.StatusCode
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("request %d side by side: HTTP %d", i, c)
		}
	}

	// Bad input: answered with what is wrong, never read outside the stores.
	for _, c := range []struct {
		path string
		code int
		msg  string
	}{
		{"traces?since=yesterday", 400, `yesterday\": want a time`},
		{"traces?min_reward=high", 400, `high\": want a number`},
		{"traces?trace=zz", 400, `zz\": want a trace id (32 hex digits) or a prefix of one`},
		{"traces?store=" + url.QueryEscape(root), 200, "not a trace store of the dashboard"},
		{"trace?store=" + url.QueryEscape(store) + "&id=zz", 400, "32 hex digits"},
		{"trace?store=" + url.QueryEscape(store) + "&id=" + strings.Repeat("ab", 16), 404, "is not in the store"},
		{"trace?store=/etc&id=" + strings.Repeat("ab", 16), 400, "not a trace store"},
		{"episodes?run=/etc", 400, "not a run folder"},
	} {
		code, body, _ := get(t, api+c.path)
		if code != c.code || !strings.Contains(body, c.msg) {
			t.Errorf("GET %s: %d %s, want %d and %q", c.path, code, body, c.code, c.msg)
		}
	}

	// A file that turns unreadable is named, the rest still answers: the
	// critic's trace is lost, the solver's two and the run's one remain.
	parts, _ := filepath.Glob(filepath.Join(store, "*", "source=critic", "*.parquet"))
	if len(parts) == 0 {
		t.Fatalf("no Parquet file in %s", store)
	}
	if err := os.WriteFile(parts[0], []byte("PAR1 cut"), 0o644); err != nil {
		t.Fatal(err)
	}
	var broken TraceSearch
	getJSONInto(t, api+"traces", 200, &broken)
	if len(broken.Skipped) == 0 || !strings.Contains(broken.Skipped[0], parts[0]) || broken.Total != 3 {
		t.Errorf("after cutting %s: skipped %v, %d traces; want it named and the 3 other traces found", parts[0], broken.Skipped, broken.Total)
	}
}

func TestEpisodesAPI(t *testing.T) {
	runs := t.TempDir()
	run := filepath.Join(runs, "r")
	writeRun(t, run, 0, 3, 3)
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var spans []traces.Span
	for step := 1; step <= 3; step++ {
		var turns []data.Turn
		for g := range 2 {
			id := string(rune('a'+step)) + string(rune('0'+g))
			final := float64(g)
			turns = append(turns,
				data.Turn{EpisodeID: id, GroupID: int64(g), PolicyID: "p", WeightVersion: int64(step), PromptIDs: []int32{5, 6, 7}, ResponseIDs: []int32{1, 2},
					ResponseText: "first try", FinishReason: "stop", Reward: 0, FinalReward: final, Note: "no answer found"},
				data.Turn{EpisodeID: id, GroupID: int64(g), Turn: 1, PolicyID: "p", WeightVersion: int64(step), PromptIDs: []int32{5, 6, 7, 8}, ResponseIDs: []int32{3},
					ResponseText: "second try", FinishReason: "stop", Reward: final, FinalReward: final})
		}
		spans = append(spans, traces.SpansFromTurns("r", step, turns, 1, t0.Add(time.Duration(step)*time.Minute))...)
	}
	writeStore(t, filepath.Join(run, RunTracesFolder), spans)
	empty := filepath.Join(runs, "empty")
	writeRun(t, empty, 0, 1, 1)

	srv, err := Serve("127.0.0.1:0", Config{RunDirs: []string{runs}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	api := srv.URL + "api/episodes?run="

	var p EpisodePage
	getJSONInto(t, api+url.QueryEscape(run), 200, &p)
	if p.Total != 6 || len(p.Items) != 6 || len(p.Steps) != 3 || p.Steps[0] != 1 || p.Steps[2] != 3 {
		t.Fatalf("episodes: total %d, %d sent, steps %v; want 6 over steps 1–3", p.Total, len(p.Items), p.Steps)
	}
	e := p.Items[1]
	if e.Step != 1 || e.Group != 1 || e.Verdict != "correct" || *e.Final != 1 || len(e.Turns) != 2 || e.Policy != "p" {
		t.Fatalf("episode %+v", e)
	}
	first, second := e.Turns[0], e.Turns[1]
	if first.PromptTokens != 3 || len(first.PromptIDs) != 3 || first.Response != "first try" || *first.Reward != 0 || first.Feedback != "no answer found" {
		t.Errorf("turn 0 %+v", first)
	}
	if second.Turn != 1 || *second.Reward != 1 || second.PromptTokens != 4 || *second.WeightVersion != 1 {
		t.Errorf("turn 1 %+v", second)
	}
	if p.Items[0].Verdict != "wrong" {
		t.Errorf("group 0's verdict %q, want wrong (score 0)", p.Items[0].Verdict)
	}

	var s2 EpisodePage
	getJSONInto(t, api+url.QueryEscape(run)+"&step=2&limit=1&offset=1", 200, &s2)
	if s2.Total != 2 || len(s2.Items) != 1 || s2.Items[0].Step != 2 || s2.Items[0].Group != 1 {
		t.Errorf("step 2, second page: %+v", s2)
	}
	var far EpisodePage
	getJSONInto(t, api+url.QueryEscape(run)+"&offset=9223372036854775807", 200, &far)
	if far.Total != 6 || len(far.Items) != 0 {
		t.Errorf("offset past every page (offset+limit wraps): total %d, %d sent, want 6 and none", far.Total, len(far.Items))
	}
	// The episode opens as a trace of the run's store.
	var tv TraceView
	getJSONInto(t, srv.URL+"api/trace?store="+url.QueryEscape(p.Store)+"&id="+e.Trace, 200, &tv)
	if len(tv.Spans) != 3 {
		t.Errorf("episode trace: %d spans, want the root and 2 turns", len(tv.Spans))
	}

	// A run's turns carry their prompt text and tool calls (an agent's
	// actions): the calls are turns, the tools listed on theirs.
	agentRun := filepath.Join(runs, "agent")
	writeRun(t, agentRun, 0, 1, 1)
	at := []data.Turn{
		{EpisodeID: "g0-s0", PolicyID: "p", PromptIDs: []int32{5}, ResponseIDs: []int32{1}, ResponseText: "<action>calculate(2*3)</action>", FinishReason: "stop",
			Call: data.Call{Model: "m", Start: t0, End: t0.Add(time.Second), Prompt: "What is 2*3?", PromptBytes: 12,
				Tools: []data.ToolCall{{Name: "calculate", Arguments: "2*3", Result: "2*3 = 6", Start: t0.Add(time.Second), End: t0.Add(time.Second)}}}},
		{EpisodeID: "g0-s0", Turn: 1, PolicyID: "p", PromptIDs: []int32{5, 6}, ResponseIDs: []int32{2}, ResponseText: "<action>fly</action>", FinishReason: "stop",
			Call: data.Call{Model: "m", Start: t0.Add(2 * time.Second), End: t0.Add(3 * time.Second), Prompt: "What is 2*3? 2*3 = 6", PromptBytes: 20,
				Tools: []data.ToolCall{{Name: "fly", Error: "unknown action", Start: t0.Add(3 * time.Second), End: t0.Add(3 * time.Second)}}}},
	}
	writeStore(t, filepath.Join(agentRun, RunTracesFolder), traces.SpansFromTurns("agent", 1, at, 1, t0))
	var ap EpisodePage
	getJSONInto(t, api+url.QueryEscape(agentRun), 200, &ap)
	if ap.Total != 1 || len(ap.Items[0].Turns) != 2 {
		t.Fatalf("agent episodes %+v, want one of 2 turns", ap)
	}
	for k, want := range []struct {
		prompt string
		tool   EpisodeTool
	}{{"user: What is 2*3?", EpisodeTool{Name: "calculate", Arguments: "2*3", Result: "2*3 = 6"}}, {"user: What is 2*3? 2*3 = 6", EpisodeTool{Name: "fly", Error: "unknown action"}}} {
		turn := ap.Items[0].Turns[k]
		if turn.Prompt != want.prompt || len(turn.Tools) != 1 || turn.Tools[0] != want.tool {
			t.Errorf("agent turn %d: prompt %q tools %+v; want %q and %+v", k, turn.Prompt, turn.Tools, want.prompt, want.tool)
		}
	}

	// A run without a store says so.
	var none EpisodePage
	getJSONInto(t, api+url.QueryEscape(empty), 200, &none)
	if !strings.Contains(none.Error, "traces") || none.Total != 0 {
		t.Errorf("run without traces: %+v", none)
	}
	code, body, _ := get(t, api+url.QueryEscape(run)+"&step=x")
	if code != 400 || !strings.Contains(body, `want a step number`) {
		t.Errorf("step=x: %d %s", code, body)
	}
}

func TestClipAndMessages(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{`[{"role":"user","parts":[{"type":"text","content":"hi"},{"type":"tool_call","name":"calc","content":{"x":1}}]}]`, "user: hi\nuser: [tool_call calc] {\"x\":1}"},
		{"not json", "not json"},
	} {
		if got := messagesText(c.in); got != c.want {
			t.Errorf("messagesText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := clip("héllo", 2); got != "h… (5 more bytes)" {
		t.Errorf("clip inside a character: %q", got)
	}
}

// A run's call whose engine did not say when its sequence was done has its
// batch's end; the page is told so, and marks the duration.
func TestSpanViewSaysSharedEnd(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		attrs string
		want  bool
	}{
		{"", false},
		{`{"rlnode.call.end_shared":true}`, true},
		{`{"rlnode.call.end_shared":false,"rlnode.record.truncated":true}`, false},
		{`{"rlnode.call.end_shared":"yes"}`, false},
	} {
		s := traces.NewSpan()
		s.Operation, s.Start, s.End, s.Attributes = traces.OpChat, t0, t0.Add(time.Second), c.attrs
		if v := spanView(t0, &s); v.EndShared != c.want || v.DurationMS != 1000 {
			t.Errorf("attributes %s: end shared %v, duration %v ms; want %v", c.attrs, v.EndShared, v.DurationMS, c.want)
		}
	}
}
