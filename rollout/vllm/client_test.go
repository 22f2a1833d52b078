package vllm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

var _ engine.Engine = (*Client)(nil)

// testCtx bounds every test: nothing here should take more than seconds.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fastRetries keeps backoff short so retry tests run quickly.
func fastRetries(cfg Config) Config {
	cfg.RetryBase, cfg.RetryMax = time.Millisecond, 4*time.Millisecond
	return cfg
}

// fakeModel is the base model the fake servers serve.
const fakeModel = "fake/qwen2-tiny"

// newFake starts a fake vLLM server, stopped at the test's end.
func newFake(t *testing.T) *vllmtest.Server {
	t.Helper()
	f := vllmtest.New(vllmtest.Options{Model: fakeModel})
	t.Cleanup(f.Close)
	return f
}

func newClient(t *testing.T, cfg Config, fakes ...*vllmtest.Server) *Client {
	t.Helper()
	for _, f := range fakes {
		cfg.Servers = append(cfg.Servers, f.URL())
	}
	if cfg.Model == "" {
		cfg.Model = fakeModel
	}
	c, err := New(testCtx(t), fastRetries(cfg))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func promptOf(k int) []int { return []int{151644, 100 + k, 200 + k, 300} }

func params(maxTokens int) engine.SamplingParams {
	return engine.SamplingParams{MaxTokens: maxTokens, Temperature: 1}
}

// checkResult compares res with what the fake generates for prompt under
// weights, and the weight version stamped on it.
func checkResult(t *testing.T, res engine.Result, prompt []int, p engine.SamplingParams, weights string, version int64) {
	t.Helper()
	if !slices.Equal(res.PromptTokenIDs, prompt) {
		t.Errorf("request %s: PromptTokenIDs = %v, want %v", res.RequestID, res.PromptTokenIDs, prompt)
	}
	if res.WeightVersion != version {
		t.Errorf("request %s: WeightVersion = %d, want %d", res.RequestID, res.WeightVersion, version)
	}
	n := max(p.N, 1)
	if len(res.Samples) != n {
		t.Fatalf("request %s: %d samples, want %d", res.RequestID, len(res.Samples), n)
	}
	seed := int64(-1)
	if p.Seed != nil {
		seed = *p.Seed
	}
	for j, s := range res.Samples {
		ids, lps, finish := vllmtest.Sample(prompt, vllmtest.Params{MaxTokens: p.MaxTokens, Temperature: p.Temperature, Seed: seed, StopTokenIDs: p.StopTokenIDs}, j, weights, vllmtest.DefaultVocab)
		if !slices.Equal(s.TokenIDs, ids) {
			t.Errorf("request %s sample %d: TokenIDs = %v, want %v", res.RequestID, j, s.TokenIDs, ids)
		}
		want := make([]float32, len(lps))
		for i, v := range lps {
			want[i] = float32(v)
		}
		if !slices.Equal(s.LogProbs, want) {
			t.Errorf("request %s sample %d: LogProbs = %v, want %v", res.RequestID, j, s.LogProbs, want)
		}
		if s.FinishReason != finish {
			t.Errorf("request %s sample %d: FinishReason = %q, want %q", res.RequestID, j, s.FinishReason, finish)
		}
		if s.Text != vllmtest.Text(ids) {
			t.Errorf("request %s sample %d: Text = %q, want %q", res.RequestID, j, s.Text, vllmtest.Text(ids))
		}
	}
}

// stopIDs are 2% of the fake's vocabulary: a 400-token sample stops early.
var stopIDs = func() []int {
	ids := make([]int, 100)
	for i := range ids {
		ids[i] = 50 * i
	}
	return ids
}()

// waitUntil polls cond until it holds, failing the test when ctx ends first.
func waitUntil(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func TestGenerateCompletions(t *testing.T) {
	f := newFake(t)
	c := newClient(t, Config{WeightVersion: 3}, f)
	seed := int64(42)
	cases := []struct {
		name string
		p    engine.SamplingParams
	}{
		{"one sample", params(8)},
		{"n=4 seeded", engine.SamplingParams{N: 4, MaxTokens: 16, Temperature: 1, TopP: 0.9, TopK: 50, Seed: &seed}},
		{"greedy n=3", engine.SamplingParams{N: 3, MaxTokens: 12, Temperature: 0}},
		{"stop ids", engine.SamplingParams{MaxTokens: 400, Temperature: 1, StopTokenIDs: stopIDs, Stop: []string{"\n\n"}}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := engine.Request{ID: fmt.Sprintf("c%d", i), Prompt: promptOf(i), Params: tc.p}
			res, err := c.Generate(testCtx(t), []engine.Request{req})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].RequestID != req.ID {
				t.Errorf("RequestID = %q, want %q", res[0].RequestID, req.ID)
			}
			checkResult(t, res[0], req.Prompt, tc.p, "base", 3)
		})
	}
	// The greedy samples are all the same; the stop-id case stopped on one.
	res, err := c.Generate(testCtx(t), []engine.Request{{Prompt: promptOf(9), Params: cases[3].p}})
	if err != nil {
		t.Fatal(err)
	}
	s := res[0].Samples[0]
	if s.FinishReason != "stop" || !slices.Contains(cases[3].p.StopTokenIDs, s.TokenIDs[len(s.TokenIDs)-1]) {
		t.Errorf("stop-id sample ends %v with %q; want a stop id and \"stop\"", s.TokenIDs[len(s.TokenIDs)-1:], s.FinishReason)
	}
	if !strings.HasPrefix(res[0].RequestID, "rlnode-") {
		t.Errorf("request without ID got RequestID %q, want a generated rlnode-N", res[0].RequestID)
	}
}

func TestGenerateChat(t *testing.T) {
	f := newFake(t)
	c := newClient(t, Config{}, f)
	msgs := []tokenizer.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "2+2?"}}
	p := engine.SamplingParams{N: 2, MaxTokens: 10, Temperature: 1}
	res, err := c.Generate(testCtx(t), []engine.Request{{ID: "chat", Messages: msgs, Params: p}})
	if err != nil {
		t.Fatal(err)
	}
	want := vllmtest.ChatPrompt([]vllmtest.ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "2+2?"}})
	checkResult(t, res[0], want, p, "base", 0)
	if len(f.Messages()) != 1 || f.Messages()[0][1].Content != "2+2?" {
		t.Errorf("server got messages %v", f.Messages())
	}
}

func TestGenerateBatchInOrder(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := newClient(t, Config{MaxInFlight: 4}, a, b)
	reqs := make([]engine.Request, 40)
	for i := range reqs {
		reqs[i] = engine.Request{ID: fmt.Sprintf("r%02d", i), Prompt: promptOf(i), Params: params(1 + i%7)}
	}
	res, err := c.Generate(testCtx(t), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.RequestID != reqs[i].ID {
			t.Fatalf("result %d is for %q, want %q", i, r.RequestID, reqs[i].ID)
		}
		checkResult(t, r, reqs[i].Prompt, reqs[i].Params, "base", 0)
	}
	na, _, _ := a.Stats()
	nb, _, _ := b.Stats()
	if na+nb != 40 || na == 0 || nb == 0 {
		t.Errorf("servers answered %d and %d requests, want 40 in all, spread over both", na, nb)
	}
}

func TestBadRequestsRefusedBeforeSending(t *testing.T) {
	f := newFake(t)
	c := newClient(t, Config{}, f)
	msgs := []tokenizer.Message{{Role: "user", Content: "hi"}}
	cases := []struct {
		name string
		req  engine.Request
		want string
	}{
		{"empty", engine.Request{Params: params(4)}, "no Prompt and no Messages"},
		{"both", engine.Request{Prompt: []int{1}, Messages: msgs, Params: params(4)}, "both Prompt and Messages"},
		{"max tokens", engine.Request{Prompt: []int{1}, Params: params(0)}, "MaxTokens = 0"},
		{"negative n", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{N: -1, MaxTokens: 1}}, "N = -1"},
		{"top p", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, TopP: 1.5}}, "TopP = 1.5"},
		{"negative token", engine.Request{Prompt: []int{1, -7}, Params: params(1)}, "Prompt[1] = -7"},
		{"no role", engine.Request{Messages: []tokenizer.Message{{Content: "x"}}, Params: params(1)}, "Messages[0] has no role"},
		{"stops", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, Stop: slices.Repeat([]string{"s"}, engine.MaxStopStrings+1)}}, "65 stop strings, more than the 64 allowed"},
		{"stop ids", engine.Request{Prompt: []int{1}, Params: engine.SamplingParams{MaxTokens: 1, StopTokenIDs: make([]int, engine.MaxStopTokenIDs+1)}}, "1025 stop token ids"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.ID = "bad-" + tc.name
			_, err := c.Generate(testCtx(t), []engine.Request{{Prompt: []int{1}, Params: params(1)}, tc.req})
			if !errors.Is(err, engine.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.req.ID) {
				t.Fatalf("err = %v, want ErrBadRequest naming %q and %q", err, tc.req.ID, tc.want)
			}
		})
	}
	if _, tries, _ := f.Stats(); tries != 0 {
		t.Errorf("server got %d requests, want none", tries)
	}
}

func TestServerRefusesRequest(t *testing.T) {
	f := newFake(t)
	c := newClient(t, Config{}, f)
	f.AddFaults(vllmtest.Fault400)
	_, err := c.Generate(testCtx(t), []engine.Request{{ID: "long", Prompt: promptOf(1), Params: params(4)}})
	if !errors.Is(err, engine.ErrBadRequest) || !strings.Contains(err.Error(), "maximum context length") {
		t.Fatalf("err = %v, want ErrBadRequest with the server's message", err)
	}
	if !errors.Is(err, engine.ErrContextFull) {
		t.Errorf("err = %v: vLLM's maximum-context answer should be ErrContextFull", err)
	}
	if _, tries, _ := f.Stats(); tries != 1 {
		t.Errorf("server got %d tries, want 1 (a 400 is not retried)", tries)
	}
}

func TestRetriesThenSuccess(t *testing.T) {
	cases := []struct {
		name   string
		faults []vllmtest.Fault
	}{
		{"503", []vllmtest.Fault{vllmtest.Fault503, vllmtest.Fault503}},
		{"connection dropped", []vllmtest.Fault{vllmtest.FaultDrop}},
		{"malformed JSON", []vllmtest.Fault{vllmtest.FaultBadJSON}},
		{"truncated JSON", []vllmtest.Fault{vllmtest.FaultTruncate}},
		{"timeout", []vllmtest.Fault{vllmtest.FaultHang}},
		{"mixed", []vllmtest.Fault{vllmtest.Fault503, vllmtest.FaultDrop, vllmtest.FaultBadJSON}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			c := newClient(t, Config{MaxAttempts: 4, RequestTimeout: 200 * time.Millisecond}, f)
			f.AddFaults(tc.faults...)
			req := engine.Request{ID: "r1", Prompt: promptOf(1), Params: params(5)}
			res, err := c.Generate(testCtx(t), []engine.Request{req})
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, res[0], req.Prompt, req.Params, "base", 0)
			_, tries, _ := f.Stats()
			if tries != len(tc.faults)+1 {
				t.Errorf("server got %d tries, want %d", tries, len(tc.faults)+1)
			}
			want := []string{"r1"}
			for k := 2; k <= tries; k++ {
				want = append(want, fmt.Sprintf("r1.try%d", k))
			}
			if !slices.Equal(f.RequestIDs(), want) {
				t.Errorf("X-Request-Id of the tries = %v, want %v", f.RequestIDs(), want)
			}
		})
	}
}

func TestRetriesExhausted(t *testing.T) {
	cases := []struct {
		name  string
		fault vllmtest.Fault
		want  string
	}{
		{"503", vllmtest.Fault503, "HTTP 503: engine overloaded"},
		{"malformed JSON", vllmtest.FaultBadJSON, "malformed JSON answer"},
		{"dropped", vllmtest.FaultDrop, "EOF"},
		{"timeout", vllmtest.FaultHang, "no answer within 100ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			c := newClient(t, Config{MaxAttempts: 3, RequestTimeout: 100 * time.Millisecond}, f)
			f.AddFaults(tc.fault, tc.fault, tc.fault, tc.fault)
			_, err := c.Generate(testCtx(t), []engine.Request{{ID: "req-7", Prompt: promptOf(1), Params: params(3)}})
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v (%T), want *RequestError", err, err)
			}
			if !re.Exhausted || re.Attempt != 3 || re.Server != f.URL() || re.RequestID != "req-7" {
				t.Errorf("RequestError = %+v, want exhausted after 3 attempts at %s for req-7", re, f.URL())
			}
			for _, s := range []string{f.URL(), `"req-7"`, "gave up after 3 attempts", tc.want} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if _, tries, _ := f.Stats(); tries != 3 {
				t.Errorf("server got %d tries, want 3", tries)
			}
		})
	}
}

func TestMissingTokenIDsIsNotRetried(t *testing.T) {
	f := newFake(t)
	c := newClient(t, Config{}, f)
	f.OmitTokenIDs()
	_, err := c.Generate(testCtx(t), []engine.Request{{ID: "x", Prompt: promptOf(1), Params: params(3)}})
	if err == nil || !strings.Contains(err.Error(), "return_token_ids") || !strings.Contains(err.Error(), f.URL()) {
		t.Fatalf("err = %v, want one naming return_token_ids and the server", err)
	}
	if _, tries, _ := f.Stats(); tries != 1 {
		t.Errorf("server got %d tries, want 1", tries)
	}
}

// deadURL is an address on 127.0.0.1 nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestServerDown(t *testing.T) {
	t.Run("at start", func(t *testing.T) {
		dead := deadURL(t)
		f := newFake(t)
		_, err := New(testCtx(t), fastRetries(Config{Servers: []string{f.URL(), dead}, Model: f.Model(), MaxAttempts: 2}))
		if err == nil || !strings.Contains(err.Error(), dead) || !strings.Contains(err.Error(), "GET /health") ||
			!strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("err = %v, want connection refused at %s", err, dead)
		}
		if strings.Contains(err.Error(), f.URL()) {
			t.Errorf("error %q blames the live server too", err)
		}
	})
	t.Run("after start, another server takes over", func(t *testing.T) {
		a, b := newFake(t), newFake(t)
		c := newClient(t, Config{}, a, b)
		a.Close()
		reqs := make([]engine.Request, 6)
		for i := range reqs {
			reqs[i] = engine.Request{ID: fmt.Sprint(i), Prompt: promptOf(i), Params: params(2)}
		}
		res, err := c.Generate(testCtx(t), reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range res {
			checkResult(t, res[i], reqs[i].Prompt, reqs[i].Params, "base", 0)
		}
		if nb, _, _ := b.Stats(); nb != 6 {
			t.Errorf("live server answered %d, want 6", nb)
		}
	})
	t.Run("after start, the only server", func(t *testing.T) {
		f := newFake(t)
		c := newClient(t, Config{MaxAttempts: 2}, f)
		f.Close()
		_, err := c.Generate(testCtx(t), []engine.Request{{ID: "lost", Prompt: promptOf(1), Params: params(2)}})
		// The broken connection marks it lost; giving it its weights back
		// finds it down.
		var re *RequestError
		if !errors.As(err, &re) || re.Server != f.URL() || re.RequestID != "lost" || !errors.Is(err, ErrServerLost) ||
			!strings.Contains(err.Error(), "GET /health") || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("err = %v, want a RequestError at %s for lost, the server lost and down", err, f.URL())
		}
	})
}

func TestModelCheck(t *testing.T) {
	f := newFake(t)
	_, err := New(testCtx(t), Config{Servers: []string{f.URL()}, Model: "Qwen/Qwen2.5-7B"})
	if err == nil || !strings.Contains(err.Error(), f.URL()) || !strings.Contains(err.Error(), `model "Qwen/Qwen2.5-7B" is not served`) ||
		!strings.Contains(err.Error(), `"fake/qwen2-tiny"`) {
		t.Fatalf("err = %v, want one naming the server, the model and what it serves", err)
	}
	g := newFake(t)
	g.BreakModels()
	_, err = New(testCtx(t), Config{Servers: []string{g.URL()}, Model: g.Model()})
	if err == nil || !strings.Contains(err.Error(), "GET /v1/models") || !strings.Contains(err.Error(), "malformed JSON") {
		t.Fatalf("err = %v, want a malformed /v1/models answer named", err)
	}
	c := newClient(t, Config{}, f)
	ids, err := c.Models(testCtx(t), 0)
	if err != nil || !slices.Equal(ids, []string{f.Model()}) {
		t.Fatalf("Models = %v, %v", ids, err)
	}
	if err := c.Health(testCtx(t)); err != nil {
		t.Fatalf("Health: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Model: "m"}, "Servers is empty"},
		{Config{Servers: []string{"localhost:8000"}, Model: "m"}, `Servers[0] = "localhost:8000"`},
		{Config{Servers: []string{"http://h:1/v1"}, Model: "m"}, "without /v1"},
		{Config{Servers: []string{"http://h:1", "http://h:1/"}, Model: "m"}, "listed twice"},
		{Config{Servers: []string{"http://h:1"}}, "Model is empty"},
		{Config{Servers: []string{"http://h:1"}, Model: "m", MaxInFlight: -1}, "MaxInFlight = -1"},
		{Config{Servers: []string{"http://h:1"}, Model: "m", RequestTimeout: -time.Second}, "RequestTimeout = -1s"},
		{Config{Servers: []string{"http://h:1"}, Model: "m", RetryBase: time.Second, RetryMax: time.Millisecond}, "RetryMax 1ms is below RetryBase 1s"},
	}
	for _, tc := range cases {
		_, err := New(testCtx(t), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

func TestAPIKey(t *testing.T) {
	f := vllmtest.New(vllmtest.Options{Model: fakeModel, APIKey: "sk-test"})
	t.Cleanup(f.Close)
	_, err := New(testCtx(t), Config{Servers: []string{f.URL()}, Model: f.Model()})
	if err == nil || !strings.Contains(err.Error(), "HTTP 401: Unauthorized") || !strings.Contains(err.Error(), f.URL()) {
		t.Fatalf("err = %v, want HTTP 401 naming the server", err)
	}
	_, err = New(testCtx(t), Config{Servers: []string{f.URL()}, Model: f.Model(), APIKey: "wrong"})
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong key: err = %v, want HTTP 401", err)
	}
	c := newClient(t, Config{APIKey: "sk-test"}, f)
	req := engine.Request{ID: "k", Prompt: promptOf(2), Params: params(3)}
	res, err := c.Generate(testCtx(t), []engine.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res[0], req.Prompt, req.Params, "base", 0)
}

func TestLeastOutstandingBalancing(t *testing.T) {
	slow, fast := newFake(t), newFake(t)
	c := newClient(t, Config{}, slow, fast)
	ctx := testCtx(t)
	arrived := vllmtest.WatchArrivals(slow)
	slow.HoldRequests()

	// Two requests are held at the slow server (the first choice, then the
	// least loaded): one each would be round robin; least outstanding sends
	// the rest to the server with nothing outstanding.
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := c.Generate(ctx, []engine.Request{{ID: "held", Prompt: promptOf(0), Params: params(2)}}); err != nil {
			t.Error(err)
		}
	})
	vllmtest.WaitArrivals(ctx, t, arrived, 1)
	for i := range 20 {
		if _, err := c.Generate(ctx, []engine.Request{{Prompt: promptOf(i), Params: params(2)}}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _, _ := fast.Stats(); n != 20 {
		t.Errorf("fast server answered %d of 20, want all", n)
	}
	st := c.Servers()
	if st[0].InFlight != 1 || st[1].InFlight != 0 || st[1].Served != 20 {
		t.Errorf("Servers() = %+v, want 1 in flight at the slow one and 20 served by the fast one", st)
	}
	slow.Release()
	wg.Wait()

	// With all requests held, n requests split evenly.
	a, b := newFake(t), newFake(t)
	c2 := newClient(t, Config{}, a, b)
	arrived = vllmtest.WatchArrivals(a, b)
	a.HoldRequests()
	b.HoldRequests()
	reqs := make([]engine.Request, 10)
	for i := range reqs {
		reqs[i] = engine.Request{Prompt: promptOf(i), Params: params(1)}
	}
	done := make(chan error, 1)
	go func() { _, err := c2.Generate(ctx, reqs); done <- err }()
	vllmtest.WaitArrivals(ctx, t, arrived, 10)
	st = c2.Servers()
	if st[0].InFlight != 5 || st[1].InFlight != 5 {
		t.Errorf("in flight %d and %d, want 5 and 5", st[0].InFlight, st[1].InFlight)
	}
	a.Release()
	b.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestConcurrencyBound(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := newClient(t, Config{MaxInFlight: 3}, a, b)
	ctx := testCtx(t)
	arrived := vllmtest.WatchArrivals(a, b)
	a.HoldRequests()
	b.HoldRequests()
	reqs := make([]engine.Request, 30)
	for i := range reqs {
		reqs[i] = engine.Request{Prompt: promptOf(i), Params: params(1)}
	}
	done := make(chan error, 1)
	go func() { _, err := c.Generate(ctx, reqs); done <- err }()
	// Both servers fill up to the bound; the other 24 requests wait.
	vllmtest.WaitArrivals(ctx, t, arrived, 6)
	st := c.Servers()
	if st[0].InFlight != 3 || st[1].InFlight != 3 {
		t.Errorf("in flight %d and %d, want 3 and 3", st[0].InFlight, st[1].InFlight)
	}
	a.Release()
	b.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, f := range []*vllmtest.Server{a, b} {
		if _, _, maxSeen := f.Stats(); maxSeen > 3 {
			t.Errorf("server %s saw %d requests at once, bound is 3", f.URL(), maxSeen)
		}
	}
	na, _, _ := a.Stats()
	nb, _, _ := b.Stats()
	if na+nb != 30 {
		t.Errorf("answered %d, want 30", na+nb)
	}
}

func TestContextCancellation(t *testing.T) {
	t.Run("request in flight", func(t *testing.T) {
		f := newFake(t)
		c := newClient(t, Config{}, f)
		arrived := vllmtest.WatchArrivals(f)
		f.HoldRequests()
		ctx, cancel := context.WithCancel(testCtx(t))
		done := make(chan error, 1)
		go func() {
			_, err := c.Generate(ctx, []engine.Request{{ID: "cancel-me", Prompt: promptOf(1), Params: params(2)}})
			done <- err
		}()
		vllmtest.WaitArrivals(testCtx(t), t, arrived, 1)
		cancel()
		err := <-done
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "cancel-me") || !strings.Contains(err.Error(), f.URL()) {
			t.Fatalf("err = %v, want context.Canceled naming the request and server", err)
		}
		if st := c.Servers(); st[0].InFlight != 0 {
			t.Errorf("%d requests still counted in flight", st[0].InFlight)
		}
	})
	t.Run("during backoff", func(t *testing.T) {
		f := newFake(t)
		cfg := Config{Servers: []string{f.URL()}, Model: f.Model(), RetryBase: time.Hour, RetryMax: time.Hour}
		c, err := New(testCtx(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		arrived := vllmtest.WatchArrivals(f)
		f.AddFaults(vllmtest.Fault503)
		ctx, cancel := context.WithCancel(testCtx(t))
		done := make(chan error, 1)
		go func() {
			_, err := c.Generate(ctx, []engine.Request{{ID: "b", Prompt: promptOf(1), Params: params(2)}})
			done <- err
		}()
		vllmtest.WaitArrivals(testCtx(t), t, arrived, 1)
		waitUntil(testCtx(t), t, "the 503 to come back", func() bool { return c.Servers()[0].InFlight == 0 })
		cancel()
		err = <-done
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "HTTP 503") || !strings.Contains(err.Error(), f.URL()) {
			t.Fatalf("err = %v, want context.Canceled with the 503 that came before", err)
		}
	})
	t.Run("waiting for a slot", func(t *testing.T) {
		f := newFake(t)
		c := newClient(t, Config{MaxInFlight: 1}, f)
		arrived := vllmtest.WatchArrivals(f)
		f.HoldRequests()
		ctx := testCtx(t)
		held := make(chan error, 1)
		go func() {
			_, err := c.Generate(ctx, []engine.Request{{Prompt: promptOf(1), Params: params(2)}})
			held <- err
		}()
		vllmtest.WaitArrivals(ctx, t, arrived, 1)
		wctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := c.Generate(wctx, []engine.Request{{ID: "queued", Prompt: promptOf(2), Params: params(2)}})
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "queued") {
			t.Fatalf("err = %v, want context.Canceled naming the request", err)
		}
		f.Release()
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	})
}

func TestFirstFailureCancelsBatch(t *testing.T) {
	f := newFake(t)
	c := newClient(t, Config{MaxInFlight: 1}, f)
	f.AddFaults(vllmtest.Fault400)
	reqs := make([]engine.Request, 5)
	for i := range reqs {
		reqs[i] = engine.Request{ID: fmt.Sprint("b", i), Prompt: promptOf(i), Params: params(2)}
	}
	_, err := c.Generate(testCtx(t), reqs)
	if !errors.Is(err, engine.ErrBadRequest) {
		t.Fatalf("err = %v, want the 400", err)
	}
}

func TestClosed(t *testing.T) {
	f := newFake(t)
	c := newClient(t, Config{}, f)
	c.Close()
	_, err := c.Generate(testCtx(t), []engine.Request{{ID: "late", Prompt: promptOf(1), Params: params(1)}})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
}

func TestErrorMessage(t *testing.T) {
	cases := []struct{ body, want string }{
		{`{"error": {"message": "bad prompt", "type": "BadRequestError", "code": 400}}`, "bad prompt"},
		{`{"object": "error", "message": "old style", "type": "x", "code": 400}`, "old style"},
		{`{"error": "Unauthorized"}`, "Unauthorized"},
		{`{"detail": "Not Found"}`, "Not Found"},
		{`{"detail": [{"loc": ["body"], "msg": "field required"}]}`, `[{"loc": ["body"], "msg": "field required"}]`},
		{"<html>502</html>", "<html>502</html>"},
		{strings.Repeat("x", 300), strings.Repeat("x", 200) + "…"},
	}
	for _, tc := range cases {
		if got := errorMessage([]byte(tc.body)); got != tc.want {
			t.Errorf("errorMessage(%q) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

func TestBackoffBounds(t *testing.T) {
	base, maxD := 100*time.Millisecond, time.Second
	for attempt := 2; attempt <= 10; attempt++ {
		d := base << (attempt - 2)
		if d > maxD || d <= 0 {
			d = maxD
		}
		for range 50 {
			got := backoff(base, maxD, attempt)
			if got < d/2 || got > d {
				t.Fatalf("backoff(attempt %d) = %v, want in [%v, %v]", attempt, got, d/2, d)
			}
		}
	}
}

// The client must work with a caller's http.Client too.
func TestCustomHTTPClient(t *testing.T) {
	f := newFake(t)
	var calls int
	var mu sync.Mutex
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		return http.DefaultTransport.RoundTrip(r)
	})}
	c := newClient(t, Config{HTTPClient: hc}, f)
	if _, err := c.Generate(testCtx(t), []engine.Request{{Prompt: promptOf(1), Params: params(1)}}); err != nil {
		t.Fatal(err)
	}
	if calls != 3 { // health, models, completion
		t.Errorf("custom transport saw %d calls, want 3", calls)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Each request of a batch finishes when its own answer arrives: with one
// server holding its request, the other request's samples are done before
// the held one is let go, the held one's after.
func TestSamplesFinishWhenTheirAnswerArrives(t *testing.T) {
	a, b := newFake(t), newFake(t)
	b.HoldRequests()
	c := newClient(t, Config{MaxInFlight: 4}, a, b)
	reqs := []engine.Request{{ID: "r0", Prompt: promptOf(0), Params: params(3)}, {ID: "r1", Prompt: promptOf(1), Params: params(3)}}
	type answer struct {
		res []engine.Result
		err error
	}
	done := make(chan answer, 1)
	before := time.Now()
	go func() {
		res, err := c.Generate(testCtx(t), reqs)
		done <- answer{res, err}
	}()
	ctx := testCtx(t)
	// The client has the free server's answer once it counts it served.
	for c.Servers()[0].Served+c.Servers()[1].Served == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the free server's answer never arrived")
		case <-time.After(time.Millisecond):
		}
	}
	released := time.Now()
	b.Release()
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	var early, late int
	for _, r := range got.res {
		for _, s := range r.Samples {
			switch f := s.Finished; {
			case f.Before(before):
				t.Errorf("request %s: finished at %v, before the call", r.RequestID, f)
			case f.Before(released):
				early++
			default:
				late++
			}
		}
	}
	if early != 1 || late != 1 {
		t.Errorf("%d samples done before the held server was let go and %d after, want 1 and 1", early, late)
	}
}

// A request of a batch starts when it is sent: with one server taking one
// request at a time, the second is sent once the first's answer is in.
func TestSamplesStartWhenTheirRequestIsSent(t *testing.T) {
	c := newClient(t, Config{MaxInFlight: 1}, newFake(t))
	reqs := []engine.Request{{ID: "r0", Prompt: promptOf(0), Params: params(2)}, {ID: "r1", Prompt: promptOf(1), Params: params(2)}}
	before := time.Now()
	res, err := c.Generate(testCtx(t), reqs)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	var first []engine.Sample // each request's first sample
	for _, r := range res {
		for _, s := range r.Samples {
			if s.Started.Before(before) || s.Finished.Before(s.Started) || s.Finished.After(after) {
				t.Errorf("request %s: %v–%v, outside the call's %v–%v", r.RequestID, s.Started, s.Finished, before, after)
			}
			if s.Started != r.Samples[0].Started {
				t.Errorf("request %s: samples started at %v and %v; one request is sent once", r.RequestID, s.Started, r.Samples[0].Started)
			}
		}
		first = append(first, r.Samples[0])
	}
	slices.SortFunc(first, func(a, b engine.Sample) int { return a.Started.Compare(b.Started) })
	if len(first) != 2 || first[1].Started.Before(first[0].Finished) {
		t.Errorf("requests %v–%v and %v–%v: the second was sent before the first's answer arrived", first[0].Started, first[0].Finished, first[1].Started, first[1].Finished)
	}
}
