package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/traces"
)

// clientsDir holds the npm package of official clients the trace tests run.
var clientsDir = filepath.Join("..", "..", "traces", "testdata", "clients")

// nodeClient runs testdata/clients/client.mjs with args and decodes what it
// prints into v; it skips without node or the npm packages.
func nodeClient(t *testing.T, v any, args ...string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	for _, pkg := range []string{"openai", "@opentelemetry/sdk-trace", "@opentelemetry/exporter-trace-otlp-proto"} {
		if _, err := os.Stat(filepath.Join(clientsDir, "node_modules", pkg, "package.json")); err != nil {
			t.Skipf("npm package %s is not installed: run npm ci in traces/testdata/clients", pkg)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"client.mjs"}, args...)...)
	cmd.Dir = clientsDir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.mjs %v: %v\n%s", args, err, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("client.mjs printed %q: %v", out, err)
	}
}

type openAIReport struct {
	Chat struct {
		Content        string    `json:"content"`
		Finish         string    `json:"finish"`
		TokenIDs       []int32   `json:"tokenIDs"`
		PromptTokenIDs []int32   `json:"promptTokenIDs"`
		Logprobs       []float32 `json:"logprobs"`
		Usage          struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		} `json:"usage"`
	} `json:"chat"`
	ChatStream struct {
		Content  string  `json:"content"`
		TokenIDs []int32 `json:"tokenIDs"`
		Usage    struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		} `json:"usage"`
	} `json:"chatStream"`
	Completion struct {
		Text     string  `json:"text"`
		TokenIDs []int32 `json:"tokenIDs"`
	} `json:"completion"`
}

type otlpTurn struct {
	TraceID    string `json:"traceId"`
	RootSpanID string `json:"rootSpanId"`
	ChatSpanID string `json:"chatSpanId"`
}

type otlpReport struct {
	Proto     otlpTurn `json:"proto"`
	JSON      otlpTurn `json:"json"`
	Malformed struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	} `json:"malformed"`
}

// stopServe sends SIGTERM and waits for the process to exit.
func stopServe(t *testing.T, cmd *exec.Cmd, exited <-chan struct{}) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("rlnode serve did not stop within 60s of SIGTERM")
	}
}

// TestProxyRecordsOpenAIClientAndOTLP runs the official openai npm client
// through `rlnode serve --upstream` to a real `rlnode serve --model`, and
// the OpenTelemetry JS SDK's OTLP exporters into the proxy's /v1/traces;
// the store must hold what the clients saw.
func TestProxyRecordsOpenAIClientAndOTLP(t *testing.T) {
	ckpt := tinyCheckpoint(t)
	upstream, _, _, _ := startServe(t, "--model", ckpt)
	store := filepath.Join(t.TempDir(), "traces")
	proxy, cmd, exited, errb := startServe(t, "--upstream", upstream, "--traces", store, "--trace-flush", "200ms")

	var oa openAIReport
	nodeClient(t, &oa, "openai", proxy, "tiny")
	var ot otlpReport
	nodeClient(t, &ot, "otlp", proxy)
	stopServe(t, cmd, exited)

	if ot.Malformed.Status != 400 || !strings.Contains(ot.Malformed.Body, "resourceSpans[0].scopeSpans[0].spans[0].traceId") {
		t.Errorf("malformed OTLP JSON answered %d %q, want 400 naming the traceId field", ot.Malformed.Status, ot.Malformed.Body)
	}
	all, skipped, err := traces.Load(store, traces.Any())
	if err != nil || len(skipped) > 0 {
		t.Fatalf("load: %v %v\nproxy stderr: %s", err, skipped, errb)
	}
	var calls []traces.Span
	for _, tr := range all {
		for _, s := range tr.Spans {
			if s.Provider == "openai" {
				calls = append(calls, s)
			}
		}
	}
	if len(calls) != 3 {
		t.Fatalf("%d recorded calls, want 3 (chat, streamed chat, completion): %+v", len(calls), calls)
	}
	chat, stream, comp := calls[0], calls[1], calls[2]
	if chat.Operation != traces.OpChat || chat.RequestModel != "tiny" || chat.AgentName != "scripted-agent" ||
		chat.ConversationID != "conv-1" || chat.Source != "scripted-agent" {
		t.Errorf("chat span %+v", chat)
	}
	if traces.MessagesText(chat.OutputMessages) != oa.Chat.Content || !slices.Equal(chat.OutputTokenIDs, oa.Chat.TokenIDs) ||
		!slices.Equal(chat.PromptTokenIDs, oa.Chat.PromptTokenIDs) || !reflect.DeepEqual(chat.OutputLogprobs, oa.Chat.Logprobs) ||
		chat.InputTokens != oa.Chat.Usage.Prompt || chat.OutputTokens != oa.Chat.Usage.Completion ||
		!slices.Equal(chat.FinishReasons, []string{oa.Chat.Finish}) || len(oa.Chat.TokenIDs) == 0 {
		t.Errorf("chat span %+v\nclient saw %+v", chat, oa.Chat)
	}
	if !strings.Contains(chat.InputMessages, `"content":"Tom has 3 apples."`) {
		t.Errorf("chat input messages %s", chat.InputMessages)
	}
	if traces.MessagesText(stream.OutputMessages) != oa.ChatStream.Content || !slices.Equal(stream.OutputTokenIDs, oa.ChatStream.TokenIDs) ||
		stream.OutputTokens != oa.ChatStream.Usage.Completion || len(oa.ChatStream.TokenIDs) == 0 {
		t.Errorf("streamed chat span %+v\nclient saw %+v", stream, oa.ChatStream)
	}
	if comp.Operation != traces.OpTextCompletion || traces.MessagesText(comp.OutputMessages) != oa.Completion.Text ||
		!slices.Equal(comp.OutputTokenIDs, oa.Completion.TokenIDs) || !strings.Contains(comp.InputMessages, "2 + 2 =") {
		t.Errorf("completion span %+v\nclient saw %+v", comp, oa.Completion)
	}

	for _, turn := range []struct {
		name  string
		agent string
		ids   otlpTurn
	}{{"protobuf", "agent-proto", ot.Proto}, {"JSON", "agent-json", ot.JSON}} {
		ts, _, _ := traces.Load(store, traces.Filter{TraceID: turn.ids.TraceID, MinReward: nan(), MaxReward: nan()})
		if len(ts) != 1 || len(ts[0].Spans) != 4 {
			t.Errorf("OTLP %s: traces %+v, want one of 4 spans", turn.name, ts)
			continue
		}
		tr := ts[0]
		root := tr.Root()
		if root.SpanID.String() != turn.ids.RootSpanID || root.Operation != traces.OpInvokeAgent || root.Source != turn.agent ||
			!reflect.DeepEqual(root.Rewards, []traces.Reward{{Name: "final", Value: 0.75, Reason: "judge"}}) {
			t.Errorf("OTLP %s root %+v", turn.name, *root)
		}
		var chatSpan, calc, search *traces.Span
		for i := range tr.Spans {
			switch s := &tr.Spans[i]; {
			case s.ToolName == "calc":
				calc = s
			case s.ToolName == "search":
				search = s
			case s.Operation == traces.OpChat:
				chatSpan = s
			}
		}
		if chatSpan == nil || calc == nil || search == nil {
			t.Errorf("OTLP %s spans %+v", turn.name, tr.Spans)
			continue
		}
		if chatSpan.SpanID.String() != turn.ids.ChatSpanID || chatSpan.ParentID != root.SpanID || chatSpan.RequestModel != "gpt-x" ||
			chatSpan.InputTokens != 12 || chatSpan.OutputTokens != 4 || !slices.Equal(chatSpan.OutputTokenIDs, []int32{52, 3}) ||
			chatSpan.Turn != 1 || traces.MessagesText(chatSpan.OutputMessages) != "4" {
			t.Errorf("OTLP %s chat span %+v", turn.name, *chatSpan)
		}
		if calc.Failed() || calc.ToolResult != "4" || !search.Failed() || search.ErrorType != "TypeError" || search.StatusMessage != "no network" {
			t.Errorf("OTLP %s tool spans %+v %+v", turn.name, *calc, *search)
		}
	}

	// The CLI over the same store: tool rewards, then a filter on them.
	code, out, stderr := run(t, "traces", "reward", "--store", store, "--kind", "tool")
	if code != 0 || !strings.HasPrefix(out, "4 tool rewards on 5 traces") {
		t.Fatalf("traces reward: exit %d: %s%s", code, out, stderr)
	}
	code, out, stderr = run(t, "traces", "list", "--store", store, "--tool", "search", "--reward", "tool", "--min-reward", "0", "--max-reward", "0")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, ot.Proto.TraceID) || !strings.Contains(out, ot.JSON.TraceID) {
		t.Errorf("traces list of traces whose tool rewards sum to 0 (calc +1, search −1): exit %d:\n%s%s", code, out, stderr)
	}
	code, out, _ = run(t, "traces", "show", "--store", store, ot.Proto.TraceID[:12])
	if code != 0 || !strings.Contains(out, `"execute_tool search"`) || !strings.Contains(out, "reward.tool=-1 (exception TypeError: no network)") ||
		!strings.Contains(out, "    "+ot.Proto.ChatSpanID) {
		t.Errorf("traces show:\n%s", out)
	}
	arrow := filepath.Join(t.TempDir(), "turns.arrow")
	code, out, stderr = run(t, "traces", "export", "--store", store, "--format", "trajectories", "--reward", "final",
		"--tokenizer", ckpt, "--out", arrow)
	turns, err := data.ReadTrajectoryFile(arrow)
	if code != 0 || err != nil || len(turns) != 2 {
		t.Fatalf("traces export --format trajectories: exit %d, %v, %d rows: %s%s", code, err, len(turns), out, stderr)
	}
	for _, tn := range turns {
		if tn.Reward != 0.75 || !slices.Equal(tn.ResponseIDs, []int32{52, 3}) || len(tn.PromptIDs) == 0 || tn.PolicyID != "actor" {
			t.Errorf("trajectory row %+v", tn)
		}
	}
	code, out, _ = run(t, "traces", "stats", "--store", store, "--by", "model")
	if code != 0 || !strings.Contains(out, "tiny") || !strings.Contains(out, "gpt-x") {
		t.Errorf("traces stats --by model:\n%s", out)
	}

	// A recipe warms the model that answered up on its recorded calls
	// (data.traces): 3 proxied calls with their token ids, and the 2 OTLP
	// chat calls (answer ids recorded, prompts re-tokenized).
	runDir := filepath.Join(t.TempDir(), "run")
	code, out, stderr = run(t, "run", "quickstart", "--out", runDir, "--set", "models.policy={path: "+ckpt+"}",
		"--set", "data.traces.store="+store, "--set", "sft.steps=2", "--set", "sft.batch_size=5",
		"--set", "schedule.steps=1", "--set", "schedule.eval_every=0", "--traces", "off")
	if code != 0 {
		t.Fatalf("run with data.traces: exit %d:\n%s%s", code, out, stderr)
	}
	wantTokens := len(oa.Chat.TokenIDs) + len(oa.ChatStream.TokenIDs) + len(oa.Completion.TokenIDs) + 2*2
	metrics, _ := os.ReadFile(filepath.Join(runDir, "metrics.jsonl"))
	lines := strings.Split(strings.TrimSpace(string(metrics)), "\n")
	for _, line := range lines[:2] {
		var m struct {
			Phase  string `json:"phase"`
			Tokens int    `json:"tokens"`
			Seqs   int    `json:"seqs"`
		}
		json.Unmarshal([]byte(line), &m)
		if m.Phase != "warmup" || m.Seqs != 5 || m.Tokens != wantTokens {
			t.Errorf("warm-up step on the traces %s: want 5 sequences of %d response tokens in all", line, wantTokens)
		}
	}

	// A person's rewards after the fact, then reward-weighted SFT and
	// offline GRPO on them, on full weights and on LoRA adapters.
	judged := map[string]string{calls[0].TraceID.String(): "1", calls[1].TraceID.String(): "0", calls[2].TraceID.String(): "1",
		ot.Proto.TraceID: "1", ot.JSON.TraceID: "0"}
	for id, v := range judged {
		if code, out, stderr := run(t, "traces", "annotate", "--store", store, "--trace", id, "--reward", "judge="+v); code != 0 {
			t.Fatalf("traces annotate: exit %d: %s%s", code, out, stderr)
		}
	}
	runs := t.TempDir()
	trainRun := func(name string, sets ...string) []stepMetrics {
		t.Helper()
		dir := filepath.Join(runs, name)
		args := []string{"run", "quickstart", "--out", dir, "--set", "models.policy={path: " + ckpt + "}", "--set", "data.traces.store=" + store,
			"--set", "data.traces.reward=judge", "--set", "schedule.eval_every=0", "--traces", "off"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		code, out, stderr := run(t, args...)
		if code != 0 {
			t.Fatalf("run %s: exit %d:\n%s%s", name, code, out, stderr)
		}
		// What was recorded with token ids and what re-tokenized is stated.
		if !strings.Contains(out, "data.traces: 5 model calls (3 with recorded token ids, 2 re-tokenized) in 5 rows\n") {
			t.Errorf("run %s does not state the recorded and re-tokenized calls:\n%s", name, out)
		}
		return readStepMetrics(t, filepath.Join(dir, "metrics.jsonl"))
	}
	// Reward-weighted SFT: the 5 judged calls, each step all of them.
	for _, m := range trainRun("rw-sft", "sft.steps=2", "sft.batch_size=5", "sft.weighting=exp", "schedule.steps=1")[:2] {
		if m.Phase != "warmup" || m.Seqs != 5 || m.Tokens != wantTokens || !(m.Loss > 0) {
			t.Errorf("reward-weighted warm-up step on the traces %+v: want 5 sequences of %d response tokens", m, wantTokens)
		}
	}
	// Offline GRPO: the two proxied chats share a prompt, so do the two
	// OTLP chats (re-tokenized); the completion's prompt has one trace and
	// is left out. Each step: both groups, 4 sequences.
	groupTokens := len(oa.Chat.TokenIDs) + len(oa.ChatStream.TokenIDs) + 2*2
	for _, lora := range []bool{false, true} {
		sets := []string{"data.traces.train=rl", "sft.steps=0", "algorithm.group_size=2", "algorithm.batch_prompts=2", "schedule.steps=2"}
		name := "offline-grpo"
		if lora {
			sets, name = append(sets, "models.policy.lora={rank: 4}"), "offline-grpo-lora"
		}
		ms := trainRun(name, sets...)
		if len(ms) != 2 {
			t.Fatalf("%s: %d steps in metrics.jsonl, want 2", name, len(ms))
		}
		for _, m := range ms {
			// Rewards 1 and 0 in each group: GRPO advantages ±1, a mean reward 0.5.
			if m.Phase != "rl" || m.Seqs != 4 || m.Tokens != groupTokens || m.RewardMean == nil || *m.RewardMean != 0.5 || !(m.GradNorm > 0) {
				t.Errorf("%s step %+v: want 4 sequences of %d response tokens, mean reward 0.5, a gradient", name, m, groupTokens)
			}
		}
	}
	// A run stopped after its first offline step and resumed trains the
	// second on the same batch (one group a step: the other prompt's) as
	// the run that went on, to the same weights.
	oneGroup := []string{"data.traces.train=rl", "sft.steps=0", "algorithm.group_size=2", "algorithm.batch_prompts=1"}
	trainRun("offline-grpo-one-group", append(oneGroup, "schedule.steps=2")...)
	half := filepath.Join(runs, "offline-grpo-resumed")
	trainRun("offline-grpo-resumed", append(oneGroup, "schedule.steps=1")...)
	code, out, stderr = run(t, "run", filepath.Join(half, "recipe.yaml"), "--out", half, "--resume", "--set", "schedule.steps=2", "--traces", "off")
	if code != 0 {
		t.Fatalf("resume the offline run: exit %d:\n%s%s", code, out, stderr)
	}
	whole, errW := os.ReadFile(filepath.Join(runs, "offline-grpo-one-group", "checkpoints", "step-2", "model.safetensors"))
	resumed, errR := os.ReadFile(filepath.Join(half, "checkpoints", "step-2", "model.safetensors"))
	if errW != nil || errR != nil || !bytes.Equal(whole, resumed) {
		t.Errorf("offline GRPO resumed after step 1: weights differ from the uninterrupted run's (%v, %v)", errW, errR)
	}
}

// stepMetrics are the fields of a metrics.jsonl line the trace tests read.
type stepMetrics struct {
	Phase      string   `json:"phase"`
	Tokens     int      `json:"tokens"`
	Seqs       int      `json:"seqs"`
	Loss       float64  `json:"loss"`
	GradNorm   float64  `json:"grad_norm"`
	RewardMean *float64 `json:"reward_mean"`
}

func readStepMetrics(t *testing.T, path string) []stepMetrics {
	t.Helper()
	js, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []stepMetrics
	for _, line := range strings.Split(strings.TrimSpace(string(js)), "\n") {
		var m stepMetrics
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, m)
	}
	return out
}

func nan() float64 { return math.NaN() }

// TestServeRecordsItsOwnCalls: rlnode serve --model --traces records each
// call it answers, and a second writer on the same store is refused.
func TestServeRecordsItsOwnCalls(t *testing.T) {
	ckpt := tinyCheckpoint(t)
	store := filepath.Join(t.TempDir(), "traces")
	url, cmd, exited, _ := startServe(t, "--model", ckpt, "--traces", store)
	code, _, stderr := run(t, "serve", "--upstream", url, "--traces", store, "--listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "locked by another writer") {
		t.Errorf("second writer on %s: exit %d: %s", store, code, stderr)
	}
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"return_token_ids":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	stopServe(t, cmd, exited)
	ts, skipped, err := traces.Load(store, traces.Any())
	if err != nil || len(skipped) > 0 || len(ts) != 1 || len(answer.Choices) != 1 {
		t.Fatalf("traces %+v, skipped %v, err %v; answer %+v", ts, skipped, err, answer)
	}
	s := ts[0].Spans[0]
	if s.Provider != "rlnode" || s.Source != "serve" || s.RequestModel != "tiny" || !slices.Equal(s.OutputTokenIDs, answer.Choices[0].TokenIDs) {
		t.Errorf("recorded span %+v, answer token ids %v", s, answer.Choices[0].TokenIDs)
	}
}

// TestRunRecordsEpisodesWithoutChangingTheRun: rlnode run records its RL
// episodes in DIR/traces by default, and the run's checkpoint and metrics
// (less wall-clock fields) are the same bytes as with --traces off.
func TestRunRecordsEpisodesWithoutChangingTheRun(t *testing.T) {
	args := []string{"run", "quickstart", "--set", "sft.steps=4", "--set", "schedule.steps=2", "--set", "schedule.eval_every=0",
		"--set", "schedule.checkpoint_every=0"}
	on, off := filepath.Join(t.TempDir(), "on"), filepath.Join(t.TempDir(), "off")
	if code, out, stderr := run(t, append(args, "--out", on)...); code != 0 || !strings.Contains(out, "traces: "+filepath.Join(on, "traces")) {
		t.Fatalf("run: exit %d:\n%s%s", code, out, stderr)
	}
	if code, out, stderr := run(t, append(args, "--out", off, "--traces", "off")...); code != 0 || strings.Contains(out, "traces:") {
		t.Fatalf("run --traces off: exit %d:\n%s%s", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(off, "traces")); err == nil {
		t.Error("--traces off wrote a trace store")
	}
	for _, rel := range []string{"checkpoints/step-6/model.safetensors", "metrics.jsonl"} {
		a, errA := os.ReadFile(filepath.Join(on, rel))
		b, errB := os.ReadFile(filepath.Join(off, rel))
		if errA != nil || errB != nil {
			t.Fatalf("%s: %v %v", rel, errA, errB)
		}
		wall := regexp.MustCompile(`"[a-z_0-9]*(_s|per_s|_per_sec)":[-0-9.eE+]+,?`)
		if !bytes.Equal(wall.ReplaceAll(a, nil), wall.ReplaceAll(b, nil)) {
			t.Errorf("%s differs between the traced run and the one with --traces off", rel)
		}
	}
	ts, skipped, err := traces.Load(filepath.Join(on, "traces"), traces.Any())
	if err != nil || len(skipped) > 0 || len(ts) == 0 {
		t.Fatalf("%d traces, skipped %v: %v", len(ts), skipped, err)
	}
	perStep := map[int64]int{}
	for _, tr := range ts {
		for _, s := range tr.Spans {
			if s.Operation == traces.OpTextCompletion {
				perStep[s.Step]++
				if s.RunID != "on" || len(s.OutputTokenIDs) == 0 || len(s.OutputLogprobs) != len(s.OutputTokenIDs) || len(s.PromptTokenIDs) == 0 {
					t.Fatalf("turn span %+v", s)
				}
			}
		}
	}
	if len(perStep) != 2 || perStep[5] == 0 || perStep[5] != perStep[6] {
		t.Errorf("turn spans per step %v, want the same number at RL steps 5 and 6", perStep)
	}
}

// docTraceStore writes a trace store for the README's traces commands: one
// trace of an agent that called a model and a search tool, and returns its id.
func docTraceStore(t *testing.T, dir string) string {
	t.Helper()
	w, err := traces.OpenWriter(dir, traces.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	root, chat, tool := traces.NewSpan(), traces.NewSpan(), traces.NewSpan()
	root.TraceID, root.SpanID, root.Name, root.Operation, root.AgentName = [16]byte{7, 1}, [8]byte{7, 1}, "invoke_agent doc", traces.OpInvokeAgent, "doc"
	chat.TraceID, chat.SpanID, chat.ParentID, chat.Name, chat.Operation, chat.RequestModel = root.TraceID, [8]byte{7, 2}, root.SpanID, "chat tiny", traces.OpChat, "tiny"
	chat.PromptTokenIDs, chat.OutputTokenIDs = []int32{1, 2}, []int32{3}
	chat.OutputMessages = `[{"role":"assistant","parts":[{"type":"text","content":"search"}]}]`
	tool.TraceID, tool.SpanID, tool.ParentID, tool.Name, tool.Operation, tool.ToolName, tool.ToolResult = root.TraceID, [8]byte{7, 3}, root.SpanID, "execute_tool search", traces.OpExecuteTool, "search", "3 results"
	for i, s := range []*traces.Span{&root, &chat, &tool} {
		s.Start, s.End, s.Source = now.Add(time.Duration(i)*time.Millisecond), now.Add(10*time.Millisecond), "doc"
		w.Add(*s)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return root.TraceID.String()
}

// The recipe's trace section sets what --traces and --trace-sample were
// not given; the flags override it.
func TestRunTraceFlagsFromRecipe(t *testing.T) {
	no, half := false, 0.5
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	for _, c := range []struct {
		name       string
		trace      *recipes.Trace
		args       []string
		store      string
		sample     float64
		recordsAny bool
	}{
		{"no section", nil, nil, "", 1, true},
		{"enabled false", &recipes.Trace{Enabled: &no}, nil, "off", 1, false},
		{"sample", &recipes.Trace{Sample: &half}, nil, "", 0.5, true},
		{"--traces over enabled false", &recipes.Trace{Enabled: &no}, []string{"--traces", elsewhere}, elsewhere, 1, true},
		{"--trace-sample over sample", &recipes.Trace{Sample: &half}, []string{"--trace-sample", "0.25"}, "", 0.25, true},
		{"--traces off over the default", &recipes.Trace{Sample: &half}, []string{"--traces", "off"}, "off", 0.5, false},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		tf := addRunTraceFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		tf.fromRecipe(c.trace, fs)
		record, closeStore, err := tf.open(t.TempDir(), io.Discard, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		closeStore()
		if *tf.store != c.store || *tf.sample != c.sample || (record != nil) != c.recordsAny {
			t.Errorf("%s: store %q sample %v records %v, want %q %v %v", c.name, *tf.store, *tf.sample, record != nil, c.store, c.sample, c.recordsAny)
		}
	}
	// And through rlnode run: trace.enabled false writes no store.
	dir := filepath.Join(t.TempDir(), "run")
	code, out, stderr := run(t, "run", "quickstart", "--out", dir, "--set", "sft.steps=2", "--set", "schedule.steps=1",
		"--set", "schedule.eval_every=0", "--set", "trace.enabled=false")
	if code != 0 || strings.Contains(out, "traces:") {
		t.Fatalf("run with trace.enabled false: exit %d:\n%s%s", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "traces")); err == nil {
		t.Error("trace.enabled false wrote a trace store")
	}
}

// TestProxyDropsClientThatDoesNotRead: the recording proxy applies
// --write-timeout to each write as the native server does, so a client
// that stops reading an endless answer is dropped along with the
// upstream's connection. (The flag was ignored with --upstream: such a
// client held both connections for good.)
func TestProxyDropsClientThatDoesNotRead(t *testing.T) {
	dropped := make(chan struct{})
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := []byte("data: " + strings.Repeat("x", 64<<10) + "\n\n")
		rc := http.NewResponseController(w)
		for {
			if _, err := w.Write(chunk); err != nil {
				close(dropped)
				return
			}
			if rc.Flush() != nil {
				close(dropped)
				return
			}
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go upstream.Serve(ln)
	defer upstream.Close()
	url, _, _, _ := startServe(t, "--upstream", "http://"+ln.Addr().String(), "--write-timeout", "1s")

	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	body := `{"model":"m","prompt":"hi","stream":true}`
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// The client reads nothing more; the proxy must give up on it.
	select {
	case <-dropped:
	case <-time.After(2 * time.Minute):
		t.Fatal("the proxy still forwards to a client that has not read for 2 minutes (--write-timeout 1s)")
	}
}

// TestTracesOfARunStatsAndExport: a store as rlnode run records it (an
// invoke_agent span over each episode's calls). stats counts spans, and
// says so: its column was headed CALLS while it counted the agent spans
// too (10,240 "calls" for 5,120 one-call episodes). An export to
// trajectories under a reward no trace carries says so once per reason
// with a count, not once per trace (a line for each of 1,280 traces),
// and fails instead of writing an empty file with exit 0. list past its
// --limit says how many traces it left out (it cut 1,280 to 100 silently).
func TestTracesOfARunStatsAndExport(t *testing.T) {
	home := t.TempDir()
	store := writeRunTraces(t, filepath.Join(home, "traces"), 5)
	out, stderr, code := runRlnode(t, home, "traces", "stats", "--store", store, "--by", "agent")
	if fields := strings.Fields(out); code != 0 || len(fields) < 11 || fields[1] != "SPANS" || fields[10] != "10" {
		t.Errorf("traces stats: exit %d, want a SPANS column counting 10 spans (5 episodes, each an agent span and a call):\n%s%s", code, out, stderr)
	}
	// list shows the newest --limit traces, and says that there are more.
	out, stderr, code = runRlnode(t, home, "traces", "list", "--store", store, "--limit", "2")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(stderr, "the newest 2 of the 5 traces that pass the filters (--limit 0 lists all)") {
		t.Errorf("traces list --limit 2 of 5 traces: exit %d, want 2 rows and a note of the 5:\n%s%s", code, out, stderr)
	}
	arrow := filepath.Join(home, "turns.arrow")
	out, stderr, code = runRlnode(t, home, "traces", "export", "--store", store, "--format", "trajectories", "--reward", "human", "--out", arrow)
	if code != 1 || strings.Count(stderr, "left out") != 1 || !strings.Contains(stderr, "left out 5: no reward human (") ||
		!strings.Contains(stderr, "and 2 more)") || !strings.Contains(stderr, "no trajectory rows from the 5 traces") {
		t.Errorf("export under a reward no trace has: exit %d, want 1 with one summary line:\n%s%s", code, out, stderr)
	}
	if _, err := os.Stat(arrow); !os.IsNotExist(err) {
		t.Errorf("%s was written (%v)", arrow, err)
	}
	if _, stderr, code = runRlnode(t, home, "traces", "export", "--store", store, "--format", "trajectories", "--reward", "final", "--out", arrow); code != 0 {
		t.Errorf("export under the final reward: exit %d: %s", code, stderr)
	}
}

// writeRunTraces writes a store as rlnode run records one: n one-call
// episodes, each an invoke_agent span over a text_completion span.
func writeRunTraces(t *testing.T, store string, n int) string {
	t.Helper()
	w, err := traces.OpenWriter(store, traces.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var turns []data.Turn
	for e := range n {
		turns = append(turns, data.Turn{EpisodeID: fmt.Sprintf("e%d", e), GroupID: int64(e), PolicyID: "solver",
			PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3}, ResponseText: "4", FinishReason: "stop", Reward: 1, FinalReward: 1})
	}
	if err := w.Add(traces.SpansFromTurns("run1", 1, turns, 1, time.Now())...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return store
}

// TestTracesAnnotateNamesAStoredTrace: annotate takes a trace id or a
// unique prefix of one, as show does, and refuses an id no trace of the
// store has, a span not in the trace, and a store that does not exist.
// Before, a mistyped id was "annotated" (exit 0) and the reward never
// reached a trace, a prefix was refused as a malformed id, and a
// mistyped --store was created to hold the annotation.
func TestTracesAnnotateNamesAStoredTrace(t *testing.T) {
	home := t.TempDir()
	store := writeRunTraces(t, filepath.Join(home, "traces"), 2)
	out, stderr, code := runRlnode(t, home, "traces", "list", "--store", store)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("traces list: exit %d:\n%s%s", code, out, stderr)
	}
	id := strings.Fields(lines[1])[0]
	other := strings.Fields(lines[2])[0]
	missing := strings.Repeat("f", 32)
	if id == missing || other == missing {
		t.Skip("a trace id of all f")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", store, "--trace", missing}, "no trace " + missing + " in " + store},
		{[]string{"--store", store, "--trace", id, "--span", strings.Repeat("0", 15) + "1"}, "trace " + id + " has no span 0000000000000001"},
		{[]string{"--store", filepath.Join(home, "nostore"), "--trace", id}, "no such file or directory"},
	} {
		_, stderr, code := runRlnode(t, home, append([]string{"traces", "annotate", "--reward", "human=1"}, c.args...)...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("annotate %v: exit %d, want 1 and %q:\n%s", c.args, code, c.want, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "nostore")); !os.IsNotExist(err) {
		t.Errorf("annotate made the store it was given by mistake (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(store, traces.AnnotationsFile)); !os.IsNotExist(err) {
		t.Errorf("a refused annotate wrote %s (%v)", traces.AnnotationsFile, err)
	}
	// --span names one of the trace's spans: the reward is that span's,
	// not its root's nor its siblings'.
	ts, _, err := traces.Load(store, traces.Any())
	if err != nil || len(ts) != 2 {
		t.Fatalf("load: %v, %d traces", err, len(ts))
	}
	var child string
	for _, tr := range ts {
		if tr.ID.String() == other {
			for _, s := range tr.Spans {
				if s.ParentID.IsValid() {
					child = s.SpanID.String()
				}
			}
		}
	}
	if child == "" {
		t.Fatalf("trace %s has no span under its root", other)
	}
	if out, stderr, code := runRlnode(t, home, "traces", "annotate", "--store", store, "--trace", other, "--span", child, "--reward", "judge=0.5"); code != 0 {
		t.Fatalf("annotate a span: exit %d:\n%s%s", code, out, stderr)
	}
	if ts, _, err = traces.Load(store, traces.Any()); err != nil {
		t.Fatal(err)
	}
	for _, tr := range ts {
		for _, s := range tr.Spans {
			got := 0.0
			for _, r := range s.Rewards {
				if r.Name == "judge" {
					got = r.Value
				}
			}
			if want := map[bool]float64{true: 0.5}[s.SpanID.String() == child]; got != want {
				t.Errorf("trace %s span %s: judge %v, want %v", tr.ID, s.SpanID, got, want)
			}
		}
	}
	out, stderr, code = runRlnode(t, home, "traces", "annotate", "--store", store, "--trace", id[:8], "--reward", "human=1")
	if code != 0 || !strings.Contains(out, "annotated trace "+id+": human = 1") {
		t.Fatalf("annotate by a prefix: exit %d:\n%s%s", code, out, stderr)
	}
	out, _, _ = runRlnode(t, home, "traces", "list", "--store", store, "--reward", "human", "--min-reward", "1")
	if !strings.Contains(out, id) || strings.Contains(out, other) {
		t.Errorf("the annotated trace, listed by its reward:\n%s", out)
	}
}

// Spans the trace writer refuses (it fell behind) are said to be dropped,
// the first at once and the count at the end: they were dropped without a
// word, and the store silently lacked those steps.
func TestRunTracesDroppedAreSaid(t *testing.T) {
	old := traceWriterOptions
	traceWriterOptions = traces.WriterOptions{FlushInterval: time.Hour, MaxBuffered: 1}
	defer func() { traceWriterOptions = old }()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	tf := addRunTraceFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	record, closeStore, err := tf.open(t.TempDir(), io.Discard, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	turn := func(ep string) data.Turn {
		return data.Turn{EpisodeID: ep, PolicyID: "solver", PromptIDs: []int32{1}, ResponseIDs: []int32{2}, LogProbs: []float32{-1}, LossMask: []float32{1}}
	}
	// With one span buffered at most, the writer refuses a step of more
	// than four spans at once.
	record(1, []data.Turn{turn("a"), turn("b"), turn("c")})
	closeStore()
	if !strings.Contains(stderr.String(), "step 1's 6 spans dropped, the run goes on") || !strings.Contains(stderr.String(), "6 spans of 1 steps were dropped") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}
