package vllmtest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/vllm"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// The fake answers the real client: generation within the vocabulary,
// reloads recorded with their directory and version, refusals and hangs
// surfacing as the client's errors.
func TestServerWithClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := vllmtest.New(vllmtest.Options{Model: "m", Vocab: 50}), vllmtest.New(vllmtest.Options{Model: "m", Vocab: 50})
	defer a.Close()
	defer b.Close()
	c, err := vllm.New(ctx, vllm.Config{Servers: []string{a.URL(), b.URL()}, Model: "m", ControlTimeout: 2 * time.Second, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reqs := make([]engine.Request, 8)
	for i := range reqs {
		reqs[i] = engine.Request{ID: string(rune('a' + i)), Prompt: []int{1, 2, i}, Params: engine.SamplingParams{N: 2, MaxTokens: 5, Temperature: 1}}
	}
	res, err := c.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		for _, s := range r.Samples {
			for _, id := range s.TokenIDs {
				if id < 0 || id >= 50 {
					t.Fatalf("token id %d outside the vocabulary 50", id)
				}
			}
		}
	}
	if a.Generated()+b.Generated() != len(reqs) {
		t.Fatalf("answered %d+%d requests, want %d", a.Generated(), b.Generated(), len(reqs))
	}
	if err := c.ReloadWeights(ctx, "/ckpt/step-1", 1); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*vllmtest.Server{a, b} {
		if got := s.Reloads(); len(got) != 1 || got[0] != (vllmtest.Reload{Path: "/ckpt/step-1", Version: "1"}) {
			t.Fatalf("%s reloads = %+v", s.URL(), got)
		}
	}
	b.RefuseReloads(true)
	if err := c.ReloadWeights(ctx, "/ckpt/step-2", 2); err == nil || !strings.Contains(err.Error(), b.URL()) {
		t.Fatalf("refused reload: err = %v, want one naming %s", err, b.URL())
	}
}

func TestHangingReloadIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := vllmtest.New(vllmtest.Options{Model: "m"})
	defer a.Close()
	c, err := vllm.New(ctx, vllm.Config{Servers: []string{a.URL()}, Model: "m", ControlTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a.HangReloads()
	if err := c.ReloadWeights(ctx, "/ckpt/step-1", 1); err == nil || !strings.Contains(err.Error(), "finish") {
		t.Fatalf("hanging reload: err = %v, want the finish step's error", err)
	}
}

// With ReadFiles the fake refuses what vLLM could not load: a weight
// update from a directory without a checkpoint and a LoRA adapter without
// the PEFT files; Fail makes an endpoint answer out of memory.
func TestReadFilesRefusesBadDirectories(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := vllmtest.New(vllmtest.Options{Model: "m", ReadFiles: true})
	defer a.Close()
	c, err := vllm.New(ctx, vllm.Config{Servers: []string{a.URL()}, Model: "m", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	empty := t.TempDir()
	if err := c.ReloadWeights(ctx, empty, 1); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("reload from an empty directory: err = %v, want HTTP 400", err)
	}
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadLoRA(ctx, "policy", empty, 2); err == nil || !strings.Contains(err.Error(), "No adapter found") {
		t.Errorf("LoRA from an empty directory: err = %v, want vLLM's refusal", err)
	}
	if got := a.LoRALoads(); len(got) != 0 {
		t.Errorf("LoRA loads %+v after refusals, want none", got)
	}
	a.Fail("/pause")
	if err := c.Pause(ctx, vllm.PauseWait); err == nil || !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("pause on a failing server: err = %v, want out of memory", err)
	}
}

// POST /collective_rpc and /reset_prefix_cache answer as vLLM's dev-mode
// routers do: the method's results, HTTPException's 400 in vLLM's error
// body, a failed worker call's 500, FastAPI's 404 without dev mode.
func TestCollectiveRPCAnswers(t *testing.T) {
	stock := vllmtest.New(vllmtest.Options{Model: "m", Stock: true})
	defer stock.Close()
	old := vllmtest.New(vllmtest.Options{Model: "m", Stock: true, NoReloadPath: true})
	defer old.Close()
	nodev := vllmtest.New(vllmtest.Options{Model: "m", NoWeightTransfer: true})
	defer nodev.Close()
	for _, c := range []struct {
		srv        *vllmtest.Server
		path, body string
		code       int
		answer     string
	}{
		{stock, "/collective_rpc", `{"method": "reload_weights", "kwargs": {"weights_path": "/ckpt/a", "is_checkpoint_format": true}}`,
			200, `{"results":[null]}`},
		{stock, "/collective_rpc", `{"kwargs": {}}`,
			400, `{"error":{"code":400,"message":"Missing 'method' in request body","param":null,"type":"Bad Request"}}`},
		{stock, "/collective_rpc", `{"method": "nope"}`,
			500, `{"error":{"code":500,"message":"Call to collective_rpc method failed: 'Worker' object has no attribute 'nope'","param":null,"type":"InternalServerError"}}`},
		{old, "/collective_rpc", `{"method": "reload_weights", "kwargs": {"weights_path": "/ckpt/a", "is_checkpoint_format": true}}`,
			500, `{"error":{"code":500,"message":"Call to collective_rpc method failed: Worker.reload_weights() got an unexpected keyword argument 'weights_path'","param":null,"type":"InternalServerError"}}`},
		{stock, "/start_weight_update", ``,
			500, `{"error":{"code":500,"message":"Call to start_weight_update method failed: Weight transfer not configured. Please set weight_transfer_config to enable weight transfer.","param":null,"type":"InternalServerError"}}`},
		{stock, "/reset_prefix_cache", ``, 200, ``},
		{nodev, "/collective_rpc", `{"method": "reload_weights"}`, 404, `{"detail":"Not Found"}`},
		{nodev, "/reset_prefix_cache", ``, 404, `{"detail":"Not Found"}`},
	} {
		resp, err := http.Post(c.srv.URL()+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || strings.TrimSpace(string(b)) != c.answer {
			t.Errorf("POST %s %s: %d %s, want %d %s", c.path, c.body, resp.StatusCode, b, c.code, c.answer)
		}
	}
	if rl := stock.Reloads(); len(rl) != 1 || rl[0] != (vllmtest.Reload{Path: "/ckpt/a"}) {
		t.Errorf("reloads = %v", rl)
	}
}
