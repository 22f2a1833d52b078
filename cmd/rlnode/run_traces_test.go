package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/dashboard"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/traces"
)

// exportedSpan is what the checks below read of a line of
// `rlnode traces export --format jsonl`.
type exportedSpan struct {
	TraceID        string          `json:"trace_id"`
	SpanID         string          `json:"span_id"`
	Parent         string          `json:"parent_span_id"`
	Name           string          `json:"name"`
	Start          time.Time       `json:"start_time"`
	End            time.Time       `json:"end_time"`
	Operation      string          `json:"operation"`
	RequestModel   string          `json:"request_model"`
	ResponseModel  string          `json:"response_model"`
	InputMessages  string          `json:"input_messages"`
	OutputMessages string          `json:"output_messages"`
	PromptTokenIDs []int32         `json:"prompt_token_ids"`
	ToolName       string          `json:"tool_name"`
	ToolArguments  string          `json:"tool_arguments"`
	ToolResult     string          `json:"tool_result"`
	Status         string          `json:"status"`
	Turn           *int64          `json:"turn"`
	WeightVersion  *int64          `json:"weight_version"`
	Rewards        []traces.Reward `json:"rewards"`
}

// TestRunTracesToTraining: the loop from a run's traces to training. An
// agent run (its policy acts with a calculator) records its episodes;
// `rlnode traces stats` and `export` show the model, per-call durations,
// the prompts (the token ids the model saw are the chat template over the
// recorded messages) and the actions as tool calls; the dashboard's traces
// page shows the same; the trajectories exported from the store hold the
// recorded prompts, and a run trains on the store (data.traces) with every
// call's recorded token ids.
func TestRunTracesToTraining(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a policy")
	}
	runs := t.TempDir()
	dir := filepath.Join(runs, "agent")
	// 100 warm-up steps teach the tiny policy the action format, so its
	// episodes call the calculator.
	code, out, stderr := run(t, "run", "agent_tools", "--out", dir, "--set", "sft.steps=100", "--set", "sft.batch_size=16",
		"--set", "schedule.steps=2", "--set", "schedule.eval_every=0", "--set", "schedule.checkpoint_every=0",
		"--set", "algorithm.batch_prompts=2", "--set", "algorithm.group_size=4")
	if code != 0 {
		t.Fatalf("run agent_tools: exit %d:\n%s%s", code, out, stderr)
	}
	store := filepath.Join(dir, "traces")
	ckpt := filepath.Join(dir, "checkpoints", "step-102")
	tok, err := tokenizer.Load(filepath.Join(ckpt, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	const model = "scratch:Qwen2ForCausalLM/solver"

	// Export: every model call has what serve records of one.
	exp := filepath.Join(t.TempDir(), "spans.jsonl")
	if code, out, stderr := run(t, "traces", "export", "--store", store, "--format", "jsonl", "--out", exp); code != 0 {
		t.Fatalf("traces export: exit %d: %s%s", code, out, stderr)
	}
	spans := readExported(t, exp)
	byID := map[string]exportedSpan{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	var calls, tools []exportedSpan
	for _, s := range spans {
		switch s.Operation {
		case traces.OpChat, traces.OpTextCompletion:
			calls = append(calls, s)
		case traces.OpExecuteTool:
			tools = append(tools, s)
		}
	}
	// 2 RL steps × 2 prompts × 4 samples, up to 3 steps each.
	if len(calls) < 16 || len(calls) > 48 {
		t.Fatalf("%d model calls, want 16 to 48", len(calls))
	}
	for _, c := range calls {
		if c.Name != c.Operation+" "+model || c.RequestModel != model || c.ResponseModel != model {
			t.Errorf("call %s: name %q, models %q/%q; want %s", c.SpanID, c.Name, c.RequestModel, c.ResponseModel, model)
		}
		if !c.End.After(c.Start) {
			t.Errorf("call %s: %v to %v, want the engine call's duration", c.SpanID, c.Start, c.End)
		}
		root := byID[c.Parent]
		if root.Operation != traces.OpInvokeAgent || c.Start.Before(root.Start) || c.End.After(root.End) {
			t.Errorf("call %s (%v–%v) is not inside its episode's root %+v", c.SpanID, c.Start, c.End, root)
		}
		// The recorded prompt is what the model saw: encoded (a chat's
		// messages with the chat template), it gives the recorded prompt
		// token ids.
		if got := promptOf(tok, c.Operation, chatOf(t, c.InputMessages)); !slices.Equal(got, c.PromptTokenIDs) {
			t.Errorf("call %s: the recorded prompt encodes to %d tokens, not the %d the model saw:\n%s",
				c.SpanID, len(got), len(c.PromptTokenIDs), c.InputMessages)
		}
		if c.OutputMessages == "" || c.WeightVersion == nil || len(c.Rewards) == 0 || c.Rewards[0].Name != "reward" {
			t.Errorf("call %s: output %q, weight version %v, rewards %v", c.SpanID, c.OutputMessages, c.WeightVersion, c.Rewards)
		}
	}
	if len(tools) == 0 {
		t.Fatal("no execute_tool spans: the warmed-up policy took no action")
	}
	toolNames := map[string]bool{}
	for _, s := range tools {
		toolNames[s.ToolName] = true
		root := byID[s.Parent]
		if s.Name != "execute_tool "+s.ToolName || root.Operation != traces.OpInvokeAgent || s.Turn == nil || s.End.Before(s.Start) ||
			s.Start.Before(root.Start) || s.End.After(root.End) {
			t.Errorf("tool span %+v under %+v", s, root)
		}
		if s.Status != "error" && s.ToolResult == "" {
			t.Errorf("tool span %s: no result", s.SpanID)
		}
	}

	// Stats: the model's calls with their latency, and the tools.
	code, out, _ = run(t, "traces", "stats", "--store", store, "--by", "model")
	if code != 0 || !statsRowHasLatency(out, model) {
		t.Errorf("traces stats --by model: want a row for %s with its latencies:\n%s", model, out)
	}
	code, out, _ = run(t, "traces", "stats", "--store", store, "--by", "tool")
	for name := range toolNames {
		if code != 0 || !strings.Contains(out, "\n"+name+" ") {
			t.Errorf("traces stats --by tool: no row for %s:\n%s", name, out)
		}
	}
	code, out, _ = run(t, "traces", "list", "--store", store, "--model", model, "--limit", "0")
	if code != 0 || strings.Count(out, "\n") < 2 {
		t.Errorf("traces list --model %s found nothing:\n%s", model, out)
	}

	// The dashboard's traces page finds the run's store and shows the
	// model, the calls' durations and prompts, and the tools.
	srv, err := dashboard.Serve("127.0.0.1:0", dashboard.Config{RunDirs: []string{runs}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var search dashboard.TraceSearch
	getDashboardJSON(t, srv.URL+"api/traces?model="+url.QueryEscape(model), &search)
	if search.Total == 0 || len(search.Traces) == 0 {
		t.Fatalf("dashboard: no trace of %s: %+v", model, search)
	}
	row := search.Traces[0]
	if !slices.Contains(row.Models, model) || !(row.DurationMS > 0) {
		t.Errorf("dashboard trace row %+v: want model %s and a duration", row, model)
	}
	var view dashboard.TraceView
	getDashboardJSON(t, srv.URL+"api/trace?store="+url.QueryEscape(row.Store)+"&id="+row.ID, &view)
	var shown int
	for _, s := range view.Spans {
		if s.Operation == traces.OpChat || s.Operation == traces.OpTextCompletion {
			shown++
			if s.Model != model || !(s.DurationMS > 0) || s.Input == "" || s.Output == "" {
				t.Errorf("dashboard span %+v: want model, duration, prompt and answer", s)
			}
		}
	}
	if shown == 0 {
		t.Errorf("dashboard trace %s shows no model call: %+v", row.ID, view)
	}

	// The trajectories made from the store (what data.traces trains on)
	// hold the recorded calls: their prompt ids, and their prompts. The
	// agent's steps write each prompt anew (the observation before the
	// list of actions), so no call's prompt extends the step before it:
	// each is its own row, and the export says why.
	arrow := filepath.Join(t.TempDir(), "turns.arrow")
	code, out, stderr = run(t, "traces", "export", "--store", store, "--format", "trajectories", "--reward", "reward", "--out", arrow)
	if code != 0 {
		t.Fatalf("traces export --format trajectories: exit %d: %s%s", code, out, stderr)
	}
	turns, err := data.ReadTrajectoryFile(arrow)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != len(calls) {
		t.Fatalf("%d trajectory rows, want the %d model calls", len(turns), len(calls))
	}
	episodes := 0
	for _, s := range spans {
		if s.Operation == traces.OpInvokeAgent {
			episodes++
		}
	}
	if n := len(calls) - episodes; n > 0 && !strings.Contains(stderr, fmt.Sprintf("%d calls start a row of their own: prompt does not extend the conversation", n)) {
		t.Errorf("export of %d calls of %d episodes, as %d rows, does not say why %d calls were not merged:\n%s", len(calls), episodes, len(turns), n, stderr)
	}
	for i, tr := range turns {
		if tr.Call.Model != model || tr.Call.Prompt == "" && len(tr.Call.Messages) == 0 || tr.Note != "" {
			t.Errorf("row %d: call %+v note %q; want the model and prompt, recorded ids", i, tr.Call, tr.Note)
			continue
		}
		op, msgs := traces.OpTextCompletion, []tokenizer.Message{{Role: "user", Content: tr.Call.Prompt}}
		if tr.Call.Messages != nil {
			op, msgs = traces.OpChat, nil
			for _, m := range tr.Call.Messages {
				msgs = append(msgs, tokenizer.Message{Role: m.Role, Content: m.Content})
			}
		}
		if got := promptOf(tok, op, msgs); !slices.Equal(got, tr.PromptIDs) {
			t.Errorf("row %d: the prompt it holds (%+v) does not give its prompt ids", i, tr.Call)
		}
	}

	// A run trains on the store: every call with its recorded ids.
	sftDir := filepath.Join(t.TempDir(), "sft")
	code, out, stderr = run(t, "run", "quickstart", "--out", sftDir, "--set", "models.policy={path: "+ckpt+"}",
		"--set", "data.traces.store="+store, "--set", "data.traces.reward=reward", "--set", "sft.steps=1",
		"--set", "sft.batch_size=8", "--set", "schedule.steps=1", "--set", "schedule.eval_every=0", "--traces", "off")
	if code != 0 {
		t.Fatalf("run with data.traces: exit %d:\n%s%s", code, out, stderr)
	}
	if want := "data.traces: " + strconv.Itoa(len(calls)) + " model calls (" + strconv.Itoa(len(calls)) + " with recorded token ids, 0 re-tokenized)"; !strings.Contains(out, want) {
		t.Errorf("run with data.traces does not say %q:\n%s", want, out)
	}
	ms := readStepMetrics(t, filepath.Join(sftDir, "metrics.jsonl"))
	if len(ms) == 0 || ms[0].Phase != "warmup" || ms[0].Seqs != 8 || !(ms[0].Loss > 0) {
		t.Errorf("warm-up step on the run's traces %+v: want 8 sequences and a loss", ms)
	}
}

func readExported(t *testing.T, path string) []exportedSpan {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []exportedSpan
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var s exportedSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Bytes())
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// chatOf reads input messages of text parts as chat messages.
func chatOf(t *testing.T, messagesJSON string) []tokenizer.Message {
	t.Helper()
	var ms []struct {
		Role  string `json:"role"`
		Parts []struct {
			Type    string `json:"type"`
			Content string `json:"content"`
		} `json:"parts"`
	}
	if err := json.Unmarshal([]byte(messagesJSON), &ms); err != nil {
		t.Fatalf("input messages %q: %v", messagesJSON, err)
	}
	out := make([]tokenizer.Message, len(ms))
	for i, m := range ms {
		out[i].Role = m.Role
		for _, p := range m.Parts {
			out[i].Content += p.Content
		}
	}
	return out
}

// promptOf is the token ids of a recorded prompt: a completion's text
// (one message) encoded, a chat's messages through the chat template.
func promptOf(tok *tokenizer.Tokenizer, op string, msgs []tokenizer.Message) []int32 {
	if op == traces.OpTextCompletion {
		var text strings.Builder
		for _, m := range msgs {
			text.WriteString(m.Content)
		}
		return int32s(tok.Encode(text.String()))
	}
	return int32s(tok.EncodeChat(msgs, true))
}

func int32s(x []int) []int32 {
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32(v)
	}
	return out
}

// statsRowHasLatency says whether the stats table has a row for key whose
// p50 is a duration above zero.
func statsRowHasLatency(table, key string) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[0] == key {
			d, err := time.ParseDuration(f[5])
			return err == nil && d > 0
		}
	}
	return false
}

func getDashboardJSON(t *testing.T, u string, v any) {
	t.Helper()
	c := http.Client{Timeout: time.Minute}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v: %s", u, resp.StatusCode, err, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, body)
	}
}
