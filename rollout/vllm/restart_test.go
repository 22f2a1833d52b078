package vllm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// A vLLM server that restarts comes back with the weights it started
// with. Before: once it answered again it got requests, whose samples and
// logprobs came from those weights but carried the version the client
// had given it.

// Two servers, one restarts under requests in flight: it gets no more
// requests until a weight update reaches it; every sample is the reloaded
// version's.
func TestRestartedServerGetsNoRequests(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := newClient(t, Config{}, a, b)
	ctx := testCtx(t)
	if err := c.ReloadWeights(ctx, "/ckpt/step-1", 1); err != nil {
		t.Fatal(err)
	}
	reqs := make([]engine.Request, 8)
	for i := range reqs {
		reqs[i] = engine.Request{ID: fmt.Sprint("r", i), Prompt: promptOf(i), Params: params(4)}
	}
	// Every request is in flight (held) when a restarts; b answers once
	// a's have come back to it.
	a.HoldRequests()
	b.HoldRequests()
	arrived := vllmtest.WatchArrivals(a, b)
	done := make(chan error, 1)
	var res []engine.Result
	go func() {
		var err error
		res, err = c.Generate(ctx, reqs)
		done <- err
	}()
	vllmtest.WaitArrivals(ctx, t, arrived, len(reqs))
	if _, tries, _ := a.Stats(); tries == 0 {
		t.Fatalf("no request went to %s", a.URL())
	}
	if err := a.Restart(); err != nil {
		t.Fatal(err)
	}
	b.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// More requests: none may reach the restarted server.
	more, err := c.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		checkResult(t, res[i], reqs[i].Prompt, reqs[i].Params, "v1", 1)
		checkResult(t, more[i], reqs[i].Prompt, reqs[i].Params, "v1", 1)
	}
	if st := c.Servers(); st[0].Lost == "" || st[1].Lost != "" {
		t.Errorf("lost: %q, %q; want the restarted %s only", st[0].Lost, st[1].Lost, a.URL())
	}
	// The next reload reaches it again.
	if err := c.ReloadWeights(ctx, "/ckpt/step-2", 2); err != nil {
		t.Fatal(err)
	}
	if st := c.Servers(); st[0].Lost != "" {
		t.Errorf("after a reload %s is still lost: %s", a.URL(), st[0].Lost)
	}
	before := a.Generated()
	res, err = c.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		checkResult(t, res[i], reqs[i].Prompt, reqs[i].Params, "v2", 2)
	}
	if a.Generated() == before {
		t.Errorf("%s got no requests after the reload", a.URL())
	}
}

// The only server restarts: the client gives it the last weights again
// (reload, then the adapter requests use) before sending it requests.
func TestRestartedOnlyServerIsHealed(t *testing.T) {
	for _, lora := range []bool{false, true} {
		t.Run(fmt.Sprint("lora=", lora), func(t *testing.T) {
			f := newFake(t)
			c := newClient(t, Config{}, f)
			ctx := testCtx(t)
			if err := c.ReloadWeights(ctx, "/ckpt/base-1", 1); err != nil {
				t.Fatal(err)
			}
			want := "v1"
			if lora {
				if err := c.LoadLoRA(ctx, "policy", "/ckpt/step-1", 1); err != nil {
					t.Fatal(err)
				}
				want = "lora:/ckpt/step-1"
			}
			f.HoldRequests()
			arrived := vllmtest.WatchArrivals(f)
			req := engine.Request{ID: "h", Prompt: promptOf(1), Params: params(4)}
			done := make(chan error, 1)
			var res []engine.Result
			go func() {
				var err error
				res, err = c.Generate(ctx, []engine.Request{req})
				done <- err
			}()
			vllmtest.WaitArrivals(ctx, t, arrived, 1)
			if err := f.Restart(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			checkResult(t, res[0], req.Prompt, req.Params, want, 1)
			if rl := f.Reloads(); len(rl) != 2 || rl[1].Path != "/ckpt/base-1" || rl[1].Version != "1" {
				t.Errorf("reloads %+v, want /ckpt/base-1 as version 1 twice", rl)
			}
			if lora && !slices.Equal(f.LoRALoads(), []vllmtest.LoRALoad{{Name: "policy", Path: "/ckpt/step-1"}, {Name: "policy", Path: "/ckpt/step-1"}}) {
				t.Errorf("adapter loads %+v, want /ckpt/step-1 twice", f.LoRALoads())
			}
		})
	}
}

// A server restarted between two adapter loads (no request saw it go) no
// longer lists the adapter: the load is refused, naming it, as an adapter
// on the base it started with would not be the policy.
func TestLoRALoadAfterRestartRefused(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := newClient(t, Config{}, a, b)
	ctx := testCtx(t)
	if err := c.LoadLoRA(ctx, "policy", "/ckpt/step-1", 1); err != nil {
		t.Fatal(err)
	}
	if err := a.Restart(); err != nil {
		t.Fatal(err)
	}
	err := c.LoadLoRA(ctx, "policy", "/ckpt/step-2", 2)
	if !errors.Is(err, ErrServerLost) || !strings.Contains(err.Error(), a.URL()) || strings.Contains(err.Error(), b.URL()) ||
		!strings.Contains(err.Error(), `adapter "policy" loaded there is no longer listed`) {
		t.Fatalf("err = %v, want ErrServerLost naming %s only", err, a.URL())
	}
	// A reload of the base, then the adapter, reach it again.
	if err := c.ReloadWeights(ctx, "/ckpt/base-2", 2); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadLoRA(ctx, "policy", "/ckpt/step-2", 2); err != nil {
		t.Fatal(err)
	}
}

// A server restarted while requests use an adapter answers 404 for it:
// the server is lost and the request goes to one that holds the adapter
// (before: the run stopped on the 404).
func TestAdapterNotServedAfterRestart(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := newClient(t, Config{}, a, b)
	ctx := testCtx(t)
	if err := c.LoadLoRA(ctx, "policy", "/ckpt/step-1", 1); err != nil {
		t.Fatal(err)
	}
	if err := a.Restart(); err != nil {
		t.Fatal(err)
	}
	// No pooled connection to the old process: the requests reach the new
	// one (which holds no adapter).
	c.http.CloseIdleConnections()
	reqs := make([]engine.Request, 6)
	for i := range reqs {
		reqs[i] = engine.Request{ID: fmt.Sprint("n", i), Prompt: promptOf(i), Params: params(3)}
	}
	res, err := c.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		checkResult(t, res[i], reqs[i].Prompt, reqs[i].Params, "lora:/ckpt/step-1", 1)
	}
	if st := c.Servers(); !strings.Contains(st[0].Lost, `adapter "policy" not served`) {
		t.Errorf("%s lost = %q, want the adapter not served", a.URL(), st[0].Lost)
	}
}

// An adapter unloaded on purpose is not a restart: the next load is no
// ErrServerLost.
func TestUnloadedAdapterIsNoRestart(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := newClient(t, Config{}, a, b)
	ctx := testCtx(t)
	if err := c.LoadLoRA(ctx, "one", "/ckpt/one", 1); err != nil {
		t.Fatal(err)
	}
	// "two" loads at a only: requests keep "one", so "two" may be unloaded.
	b.Fail("/v1/load_lora_adapter")
	if err := c.LoadLoRA(ctx, "two", "/ckpt/two", 2); err == nil {
		t.Fatal("a load failing at one server succeeded")
	}
	b.Fail("")
	_ = c.UnloadLoRA(ctx, "two") // b never had it: its refusal is expected
	if err := c.LoadLoRA(ctx, "three", "/ckpt/three", 3); err != nil {
		t.Fatalf("after unloading an adapter: %v", err)
	}
}
