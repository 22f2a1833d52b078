package vllm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

func TestLoadLoRA(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := newClient(t, Config{WeightVersion: 1}, a, b)
	ctx := testCtx(t)
	req := engine.Request{ID: "l", Prompt: promptOf(3), Params: params(6)}

	if err := c.LoadLoRA(ctx, "policy", "/ckpt/step-2/adapter", 2); err != nil {
		t.Fatal(err)
	}
	if c.Model() != "policy" || c.WeightVersion() != 2 {
		t.Errorf("after load: Model %q, WeightVersion %d; want policy, 2", c.Model(), c.WeightVersion())
	}
	for _, f := range []*vllmtest.Server{a, b} {
		var body loadLoRARequest
		json.Unmarshal(f.Body("/v1/load_lora_adapter", "lora_name"), &body.LoRAName)
		json.Unmarshal(f.Body("/v1/load_lora_adapter", "lora_path"), &body.LoRAPath)
		json.Unmarshal(f.Body("/v1/load_lora_adapter", "load_inplace"), &body.LoadInplace)
		if body != (loadLoRARequest{"policy", "/ckpt/step-2/adapter", true}) {
			t.Errorf("%s got load body %+v", f.URL(), body)
		}
	}
	ids, err := c.Models(ctx, 1)
	if err != nil || !slices.Contains(ids, "policy") {
		t.Errorf("server 1 lists %v (%v), want the adapter", ids, err)
	}
	res, err := c.Generate(ctx, []engine.Request{req, req})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res[0], req.Prompt, req.Params, "lora:/ckpt/step-2/adapter", 2)
	checkResult(t, res[1], req.Prompt, req.Params, "lora:/ckpt/step-2/adapter", 2)
	if m := append(a.Models(), b.Models()...); len(m) != 2 || m[0] != "policy" || m[1] != "policy" {
		t.Errorf("requests named models %v, want the adapter", m)
	}

	// The next version replaces the adapter in place under the same name.
	if err := c.LoadLoRA(ctx, "policy", "/ckpt/step-3/adapter", 3); err != nil {
		t.Fatal(err)
	}
	res, err = c.Generate(ctx, []engine.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res[0], req.Prompt, req.Params, "lora:/ckpt/step-3/adapter", 3)

	// A load that fails at the server names it and changes nothing.
	err = c.LoadLoRA(ctx, "other", "/missing/adapter", 4)
	var se *ServerError
	if !errors.As(err, &se) || se.Status != 404 || !strings.Contains(err.Error(), "POST /v1/load_lora_adapter") ||
		!strings.Contains(err.Error(), a.URL()) || !strings.Contains(err.Error(), "No adapter found") {
		t.Fatalf("err = %v, want a 404 naming the server and endpoint", err)
	}
	if c.Model() != "policy" || c.WeightVersion() != 3 {
		t.Errorf("after failed load: Model %q, WeightVersion %d; want policy, 3", c.Model(), c.WeightVersion())
	}

	if err := c.UnloadLoRA(ctx, "policy"); err == nil || !strings.Contains(err.Error(), "requests use it") {
		t.Errorf("unloading the adapter in use: err = %v", err)
	}
	if err := c.LoadLoRA(ctx, "spare", "/ckpt/spare", 3); err != nil {
		t.Fatal(err)
	}
	if err := c.UnloadLoRA(ctx, "policy"); err != nil {
		t.Fatal(err)
	}
	if err := c.UnloadLoRA(ctx, "policy"); err == nil || !strings.Contains(err.Error(), "cannot be found") {
		t.Errorf("unloading twice: err = %v, want the server's 404", err)
	}
	if err := c.LoadLoRA(ctx, "", "/x", 5); err == nil {
		t.Error("LoadLoRA with no name succeeded")
	}
}

func TestWeightTransferSequence(t *testing.T) {
	a, b := newFake(t), newFake(t)
	c := newClient(t, Config{WeightVersion: 6}, a, b)
	ctx := testCtx(t)

	if err := c.InitWeightTransfer(ctx, []any{map[string]any{"rank_offset": 1}, map[string]any{"rank_offset": 2}}); err != nil {
		t.Fatal(err)
	}
	if err := c.InitWeightTransfer(ctx, []any{1, 2, 3}); err == nil || !strings.Contains(err.Error(), "3 init infos for 2 servers") {
		t.Errorf("InitWeightTransfer with 3 infos: err = %v", err)
	}
	if err := c.StartWeightUpdate(ctx); err == nil || !strings.Contains(err.Error(), "call Pause first") {
		t.Errorf("StartWeightUpdate before Pause: err = %v", err)
	}
	if err := c.Resume(ctx); err == nil || !strings.Contains(err.Error(), "not paused") {
		t.Errorf("Resume before Pause: err = %v", err)
	}
	if err := c.Pause(ctx, "keep"); err == nil || !strings.Contains(err.Error(), `pause mode "keep"`) {
		t.Errorf("Pause(keep): err = %v", err)
	}
	steps := []func() error{
		func() error { return c.Pause(ctx, PauseWait) },
		func() error { return c.StartWeightUpdate(ctx) },
		func() error {
			return c.UpdateWeights(ctx, map[string]any{"names": []string{"w"}, "dtype_names": []string{"bfloat16"}, "shapes": [][]int{{2, 2}}})
		},
		func() error { return c.FinishWeightUpdate(ctx, 7) },
		func() error { return c.Resume(ctx) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	want := []string{"POST /init_weight_transfer_engine", "POST /pause?mode=wait", "POST /start_weight_update",
		"POST /update_weights", "POST /finish_weight_update", "POST /resume"}
	for i, f := range []*vllmtest.Server{a, b} {
		if got := f.Calls(); !slices.Equal(got, want) {
			t.Errorf("server %d calls = %v, want %v", i, got, want)
		}
		if got := string(f.Body("/finish_weight_update", "weight_version")); got != `"7"` {
			t.Errorf("server %d weight_version = %s, want \"7\"", i, got)
		}
		if got := string(f.Body("/update_weights", "update_info")); !strings.Contains(got, `"dtype_names":["bfloat16"]`) {
			t.Errorf("server %d update_info = %s", i, got)
		}
	}
	if got := string(b.Body("/init_weight_transfer_engine", "init_info")); got != `{"rank_offset":2}` {
		t.Errorf("server 1 init_info = %s, want its own", got)
	}
	if c.WeightVersion() != 7 {
		t.Errorf("WeightVersion = %d, want 7", c.WeightVersion())
	}
	req := engine.Request{Prompt: promptOf(1), Params: params(4)}
	res, err := c.Generate(ctx, []engine.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res[0], req.Prompt, req.Params, "v7", 7)

	// A server's refusal names it; finishing twice conflicts.
	if err := c.Pause(ctx, PauseWait); err != nil {
		t.Fatal(err)
	}
	err = c.FinishWeightUpdate(ctx, 8)
	var se *ServerError
	if !errors.As(err, &se) || se.Status != 409 || !strings.Contains(err.Error(), "POST /finish_weight_update") {
		t.Errorf("finish without start: err = %v, want HTTP 409 naming the endpoint", err)
	}
	if c.WeightVersion() != 7 {
		t.Errorf("WeightVersion = %d after a refused finish, want 7", c.WeightVersion())
	}
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReloadWeights(t *testing.T) {
	f := newFake(t)
	c := newClient(t, Config{}, f)
	ctx := testCtx(t)
	if err := c.ReloadWeights(ctx, "/shared/checkpoints/step-100", 100); err != nil {
		t.Fatal(err)
	}
	// The server is asked once whether it runs the disk backend.
	want := []string{"POST /init_weight_transfer_engine", "POST /pause?mode=wait", "POST /start_weight_update",
		"POST /update_weights", "POST /finish_weight_update", "POST /resume"}
	if got := f.Calls(); !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	if got := string(f.Body("/update_weights", "update_info")); got != `{"path":"/shared/checkpoints/step-100"}` {
		t.Errorf("update_info = %s", got)
	}
	req := engine.Request{Prompt: promptOf(5), Params: params(3)}
	res, err := c.Generate(ctx, []engine.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res[0], req.Prompt, req.Params, "v100", 100)

	if err := c.ReloadWeights(ctx, "relative/path", 101); err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Errorf("relative path: err = %v", err)
	}
	// A failed step leaves dispatch paused and says so.
	// The server believes an update is under way: start conflicts.
	resp, err := http.Post(f.URL()+"/start_weight_update", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("start an update behind the client's back: %s", resp.Status)
	}
	err = c.ReloadWeights(ctx, "/shared/checkpoints/step-101", 101)
	if err == nil || !strings.Contains(err.Error(), "start") || !strings.Contains(err.Error(), "dispatch stays paused") ||
		!strings.Contains(err.Error(), "409") {
		t.Fatalf("err = %v, want the start conflict and a note that dispatch is paused", err)
	}
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
}

// With PauseAbort a request in flight is aborted at the server and sent
// again after Resume, so it comes back whole from the new weights.
func TestPauseAbortRetriesUnderNewWeights(t *testing.T) {
	f := newFake(t)
	c := newClient(t, Config{WeightVersion: 1}, f)
	ctx := testCtx(t)
	arrived := vllmtest.WatchArrivals(f)
	f.HoldRequests()
	req := engine.Request{ID: "inflight", Prompt: promptOf(8), Params: params(5)}
	done := make(chan []engine.Result, 1)
	go func() {
		res, err := c.Generate(ctx, []engine.Request{req})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	vllmtest.WaitArrivals(ctx, t, arrived, 1)
	if err := c.Pause(ctx, PauseAbort); err != nil {
		t.Fatal(err)
	}
	f.Release()
	// The aborted try comes back; its retry waits for Resume.
	waitUntil(ctx, t, "the aborted try to return", func() bool {
		_, tries, _ := f.Stats()
		return tries == 1 && c.Servers()[0].InFlight == 0
	})
	for _, step := range []func() error{
		func() error { return c.StartWeightUpdate(ctx) },
		func() error { return c.UpdateWeights(ctx, map[string]any{"names": []string{}}) },
		func() error { return c.FinishWeightUpdate(ctx, 2) },
		func() error { return c.Resume(ctx) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	res := <-done
	if res == nil {
		t.FailNow()
	}
	checkResult(t, res[0], req.Prompt, req.Params, "v2", 2)
	if _, tries, _ := f.Stats(); tries != 2 {
		t.Errorf("server got %d tries, want 2 (aborted, then after resume)", tries)
	}
}

// With PauseWait the request in flight finishes under the old weights and
// is stamped with the old version.
func TestPauseWaitLetsRequestsFinish(t *testing.T) {
	f := newFake(t)
	c := newClient(t, Config{WeightVersion: 1}, f)
	ctx := testCtx(t)
	arrived := vllmtest.WatchArrivals(f)
	f.HoldRequests()
	req := engine.Request{ID: "inflight", Prompt: promptOf(8), Params: params(5)}
	done := make(chan []engine.Result, 1)
	go func() {
		res, err := c.Generate(ctx, []engine.Request{req})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	vllmtest.WaitArrivals(ctx, t, arrived, 1)
	paused := make(chan error, 1)
	go func() { paused <- c.Pause(ctx, PauseWait) }()
	f.Release()
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res == nil {
		t.FailNow()
	}
	checkResult(t, res[0], req.Prompt, req.Params, "base", 1)
	if got := f.Calls(); len(got) != 1 || got[0] != "POST /pause?mode=wait" {
		t.Errorf("calls = %v", got)
	}
	if err := c.Pause(ctx, PauseWait); err == nil || !strings.Contains(err.Error(), "already paused") {
		t.Errorf("second Pause: err = %v", err)
	}
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
}

// A server started without the routes an update needs answers FastAPI's
// 404 "Not Found": the error says how to start it (before: "HTTP 404: Not
// Found" and nothing more).
func TestMissingRoutesSayHowToStartTheServer(t *testing.T) {
	ctx := testCtx(t)
	lora := vllmtest.New(vllmtest.Options{Model: fakeModel, NoRuntimeLoRA: true})
	t.Cleanup(lora.Close)
	c := newClient(t, Config{}, lora)
	err := c.LoadLoRA(ctx, "policy", "/ckpt/step-1", 1)
	for _, s := range []string{lora.URL(), "POST /v1/load_lora_adapter", "HTTP 404: Not Found", "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("LoadLoRA: err = %v, want it to say %q", err, s)
		}
	}
	wt := vllmtest.New(vllmtest.Options{Model: fakeModel, NoWeightTransfer: true})
	t.Cleanup(wt.Close)
	c = newClient(t, Config{}, wt)
	err = c.ReloadWeights(ctx, "/ckpt/step-1", 1)
	for _, s := range []string{wt.URL(), "POST /pause?mode=wait", "HTTP 404: Not Found", "VLLM_SERVER_DEV_MODE=1"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("ReloadWeights: err = %v, want it to say %q", err, s)
		}
	}
}

// A stock vLLM (main branch: no "disk" weight-transfer backend, started
// with VLLM_SERVER_DEV_MODE=1 and no --weight-transfer-config) reloads a
// checkpoint through collective_rpc reload_weights. Before, every reload
// stopped at POST /start_weight_update's 500 "Weight transfer not
// configured".
func TestReloadWeightsOnStockServer(t *testing.T) {
	f := vllmtest.New(vllmtest.Options{Model: fakeModel, Stock: true})
	t.Cleanup(f.Close)
	c := newClient(t, Config{}, f)
	ctx := testCtx(t)
	for v := int64(100); v <= 101; v++ {
		path := fmt.Sprintf("/shared/checkpoints/step-%d", v)
		if err := c.ReloadWeights(ctx, path, v); err != nil {
			t.Fatal(err)
		}
		req := engine.Request{Prompt: promptOf(5), Params: params(3)}
		res, err := c.Generate(ctx, []engine.Request{req})
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, res[0], req.Prompt, req.Params, vllmtest.ReloadLabel(path), v)
	}
	// Asked once (the 500 rules the disk backend out), then reloaded by
	// RPC each time, the prefix cache dropped after each reload.
	rpc := []string{"POST /pause?mode=wait", "POST /collective_rpc", "POST /reset_prefix_cache", "POST /resume"}
	want := append([]string{"POST /init_weight_transfer_engine"}, append(rpc, rpc...)...)
	if got := f.Calls(); !slices.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
	if got := string(f.Body("/collective_rpc", "method")); got != `"reload_weights"` {
		t.Errorf("method = %s", got)
	}
	if got := string(f.Body("/collective_rpc", "kwargs")); got != `{"weights_path":"/shared/checkpoints/step-101","is_checkpoint_format":true}` {
		t.Errorf("kwargs = %s", got)
	}
	if got := f.Reloads(); len(got) != 2 || got[1] != (vllmtest.Reload{Path: "/shared/checkpoints/step-101"}) {
		t.Errorf("reloads = %v", got)
	}
	if st := c.Servers()[0]; st.WeightUpdate != WeightUpdateReloadWeights || st.WeightVersion != 101 {
		t.Errorf("server status %+v, want route reload_weights at version 101", st)
	}
}

// With WeightUpdateAuto each server gets the route it offers.
func TestAutoPicksTheRoutePerServer(t *testing.T) {
	disk := newFake(t)
	stock := vllmtest.New(vllmtest.Options{Model: fakeModel, Stock: true})
	t.Cleanup(stock.Close)
	c := newClient(t, Config{}, disk, stock)
	ctx := testCtx(t)
	if err := c.ReloadWeights(ctx, "/ckpt/step-3", 3); err != nil {
		t.Fatal(err)
	}
	if got := disk.Reloads(); len(got) != 1 || got[0] != (vllmtest.Reload{Path: "/ckpt/step-3", Version: "3"}) {
		t.Errorf("disk-backend server: reloads %v, want one through the weight-transfer API", got)
	}
	if got := stock.Reloads(); len(got) != 1 || got[0] != (vllmtest.Reload{Path: "/ckpt/step-3"}) {
		t.Errorf("stock server: reloads %v, want one through collective_rpc", got)
	}
	if slices.Contains(disk.Calls(), "POST /collective_rpc") || slices.Contains(stock.Calls(), "POST /start_weight_update") {
		t.Errorf("a server got the other route: %v; %v", disk.Calls(), stock.Calls())
	}
	st := c.Servers()
	if st[0].WeightUpdate != WeightUpdateDisk || st[1].WeightUpdate != WeightUpdateReloadWeights {
		t.Errorf("routes %q, %q; want disk, reload_weights", st[0].WeightUpdate, st[1].WeightUpdate)
	}

	// Named routes are taken as given: reload_weights asks nothing.
	c = newClient(t, Config{WeightUpdate: WeightUpdateReloadWeights}, disk)
	before := len(disk.Calls())
	if err := c.ReloadWeights(ctx, "/ckpt/step-4", 4); err != nil {
		t.Fatal(err)
	}
	want := []string{"POST /pause?mode=wait", "POST /collective_rpc", "POST /reset_prefix_cache", "POST /resume"}
	if got := disk.Calls()[before:]; !slices.Equal(got, want) {
		t.Errorf("weight update reload_weights: calls %v, want %v", got, want)
	}
}

// A server that offers neither route is refused naming it and how to
// start it; so is a stock server told to use the disk backend.
func TestNoReloadRouteSaysHowToStartTheServer(t *testing.T) {
	ctx := testCtx(t)
	old := vllmtest.New(vllmtest.Options{Model: fakeModel, Stock: true, NoReloadPath: true})
	t.Cleanup(old.Close)
	c := newClient(t, Config{}, old)
	err := c.ReloadWeights(ctx, "/ckpt/step-1", 1)
	for _, s := range []string{old.URL(), "POST /collective_rpc", "HTTP 500", "unexpected keyword argument 'weights_path'",
		"Weight transfer not configured", "VLLM_SERVER_DEV_MODE=1", `--weight-transfer-config '{"backend": "disk"}'`,
		"dispatch stays paused"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("neither route: err = %v, want it to say %q", err, s)
		}
	}
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if c.WeightVersion() != 0 {
		t.Errorf("WeightVersion = %d after a failed reload, want 0", c.WeightVersion())
	}

	stock := vllmtest.New(vllmtest.Options{Model: fakeModel, Stock: true})
	t.Cleanup(stock.Close)
	c = newClient(t, Config{WeightUpdate: WeightUpdateDisk}, stock)
	err = c.ReloadWeights(ctx, "/ckpt/step-1", 1)
	for _, s := range []string{stock.URL(), "POST /init_weight_transfer_engine", `--weight-transfer-config '{"backend": "disk"}'`,
		`"reload_weights"`} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("disk on a stock server: err = %v, want it to say %q", err, s)
		}
	}
	if got := stock.Calls(); len(got) != 1 {
		t.Errorf("disk on a stock server: calls %v, want only the init that refused (no pause)", got)
	}

	// A reload the server fails (out of memory) leaves dispatch paused and
	// names the server.
	c = newClient(t, Config{}, stock)
	stock.Fail("/collective_rpc")
	err = c.ReloadWeights(ctx, "/ckpt/step-2", 2)
	for _, s := range []string{stock.URL(), "POST /collective_rpc", "out of memory", "dispatch stays paused"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("failed reload: err = %v, want it to say %q", err, s)
		}
	}
	stock.Fail("")
	if err := c.ReloadWeights(ctx, "/ckpt/step-2", 2); err == nil {
		t.Error("ReloadWeights while dispatch is still paused: want the pause conflict")
	}
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ReloadWeights(ctx, "/ckpt/step-2", 2); err != nil {
		t.Fatal(err)
	}
}
