package vllm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rlnode/rlnode/internal/ctxio"
)

// Weight updates. The weight-sync actor calls these; the client keeps the
// version each server serves and keeps samples from spanning two versions:
// dispatch is paused (new requests wait, bounded by their context) while a
// server's weights change, and an answer to a request sent before a pause
// that may have changed its server's weights is discarded and retried.

// PauseMode says what happens to requests in flight when generation pauses.
// vLLM's third mode, "keep", is not offered: requests frozen across an
// update would finish with the new weights, mixing two policies in one
// sample.
type PauseMode string

const (
	// PauseWait lets requests in flight finish under the old weights.
	PauseWait PauseMode = "wait"
	// PauseAbort aborts them at the server; the client sends them again
	// after Resume, to the new weights.
	PauseAbort PauseMode = "abort"
)

// Pause stops dispatch and pauses generation at every server (with
// Config.Locate, every server it finds) (POST /pause?mode=...). Requests made meanwhile wait for Resume. With
// PauseWait it first waits (within ctx) for the client's requests in
// flight to finish. If a server fails to pause, dispatch stays paused and
// the error names the server; call Resume to go on.
func (c *Client) Pause(ctx context.Context, mode PauseMode) error {
	list, err := c.located(ctx)
	if err != nil {
		return fmt.Errorf("vllm: pause: %w", err)
	}
	return c.pauseOn(ctx, mode, &list)
}

// pauseOn is Pause at the servers of *list (eachFound).
func (c *Client) pauseOn(ctx context.Context, mode PauseMode, list *[]*server) error {
	if mode != PauseWait && mode != PauseAbort {
		return fmt.Errorf("vllm: pause mode %q: want %q or %q", mode, PauseWait, PauseAbort)
	}
	c.mu.Lock()
	if c.userPaused {
		c.mu.Unlock()
		return errors.New("vllm: pause: already paused")
	}
	c.userPaused = true
	c.mu.Unlock()
	if mode == PauseWait {
		if err := c.drain(ctx); err != nil {
			c.mu.Lock()
			c.userPaused = false
			c.wakeLocked()
			c.mu.Unlock()
			return fmt.Errorf("vllm: pause: waiting for requests in flight: %w", err)
		}
	}
	c.mu.Lock()
	for _, s := range c.servers {
		s.epoch++ // answers to requests still out (mode abort) are stale
	}
	c.mu.Unlock()
	return c.eachFound(ctx, list, func(ctx context.Context, s *server) error {
		_, err := c.control(ctx, s, http.MethodPost, "/pause?mode="+string(mode), nil)
		return err
	})
}

// Resume resumes generation at every server (with Config.Locate, every
// server it finds) (POST /resume) and then dispatch. If a server fails to resume, dispatch stays paused and the
// error names it; Resume may be called again.
func (c *Client) Resume(ctx context.Context) error {
	list, err := c.located(ctx)
	if err != nil {
		return fmt.Errorf("vllm: resume: %w", err)
	}
	return c.resumeOn(ctx, &list)
}

// resumeOn is Resume at the servers of *list (eachFound).
func (c *Client) resumeOn(ctx context.Context, list *[]*server) error {
	c.mu.Lock()
	paused := c.userPaused
	c.mu.Unlock()
	if !paused {
		return errors.New("vllm: resume: not paused")
	}
	err := c.eachFound(ctx, list, func(ctx context.Context, s *server) error {
		_, err := c.control(ctx, s, http.MethodPost, "/resume", nil)
		return err
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.userPaused = false
	c.wakeLocked()
	c.mu.Unlock()
	return nil
}

// InitWeightTransfer sets up vLLM's weight-transfer engine at every server
// (POST /init_weight_transfer_engine {"init_info": ...}); once, before the
// first update. initInfo holds one backend-specific value for all servers,
// or one per server (NCCL ranks differ per server).
func (c *Client) InitWeightTransfer(ctx context.Context, initInfo []any) error {
	if len(initInfo) != 1 && len(initInfo) != len(c.servers) {
		return fmt.Errorf("vllm: init weight transfer: %d init infos for %d servers: give 1 or %d",
			len(initInfo), len(c.servers), len(c.servers))
	}
	return c.eachServer(ctx, func(ctx context.Context, s *server) error {
		info := initInfo[0]
		if len(initInfo) > 1 {
			info = initInfo[s.index]
		}
		_, err := c.control(ctx, s, http.MethodPost, "/init_weight_transfer_engine", initWeightTransferRequest{InitInfo: info})
		return err
	})
}

// StartWeightUpdate begins an update at every server
// (POST /start_weight_update). Generation must be paused.
func (c *Client) StartWeightUpdate(ctx context.Context) error {
	if err := c.requirePaused("start weight update"); err != nil {
		return err
	}
	return c.eachServer(ctx, c.startUpdate)
}

func (c *Client) startUpdate(ctx context.Context, s *server) error {
	_, err := c.control(ctx, s, http.MethodPost, "/start_weight_update", nil)
	return err
}

// UpdateWeights sends one batch of backend-specific update metadata to
// every server at once (POST /update_weights {"update_info": ...}). With
// the NCCL backend the servers receive while the trainer broadcasts, so run
// it beside the broadcast. May be called several times per update.
func (c *Client) UpdateWeights(ctx context.Context, updateInfo any) error {
	if err := c.requirePaused("update weights"); err != nil {
		return err
	}
	return c.eachServer(ctx, func(ctx context.Context, s *server) error {
		return c.updateWeights(ctx, s, updateInfo)
	})
}

func (c *Client) updateWeights(ctx context.Context, s *server, updateInfo any) error {
	_, err := c.control(ctx, s, http.MethodPost, "/update_weights", updateWeightsRequest{UpdateInfo: updateInfo})
	return err
}

// FinishWeightUpdate ends the update at every server
// (POST /finish_weight_update {"weight_version": "<version>"}); each server
// that finishes serves version from then on.
func (c *Client) FinishWeightUpdate(ctx context.Context, version int64) error {
	if err := c.requirePaused("finish weight update"); err != nil {
		return err
	}
	return c.eachServer(ctx, func(ctx context.Context, s *server) error {
		return c.finishUpdate(ctx, s, version)
	})
}

func (c *Client) finishUpdate(ctx context.Context, s *server, version int64) error {
	_, err := c.control(ctx, s, http.MethodPost, "/finish_weight_update",
		finishWeightUpdateRequest{WeightVersion: strconv.FormatInt(version, 10)})
	if err == nil {
		c.serves(s, version)
	}
	return err
}

// serves records that s serves version and holds the weights it was given.
func (c *Client) serves(s *server, version int64) {
	c.mu.Lock()
	s.version = version
	c.mu.Unlock()
	c.found(s)
}

// ReloadWeights makes every server load the safetensors checkpoint in
// directory path (absolute, visible to every server under that path, or
// staged on its node through Config.Stage) as weight version version:
// pause (requests in flight finish first), reload each server by its route
// (Config.WeightUpdate; with WeightUpdateAuto each server is asked once
// which it offers), resume. With Config.Locate only the servers it finds
// take part. If a server fails, dispatch stays paused — a server may hold
// partly loaded weights — and the error says so: call ReloadWeights again
// or Resume.
func (c *Client) ReloadWeights(ctx context.Context, path string, version int64) error {
	if path == "" || path[0] != '/' {
		return fmt.Errorf("vllm: reload weights: path %q is not absolute", path)
	}
	list, err := c.located(ctx)
	if err != nil {
		return fmt.Errorf("vllm: reload weights from %s (version %d): %w", path, version, err)
	}
	// Staged copies are fetched while the servers still generate.
	paths, err := c.stagedPaths(ctx, &list, path)
	if err != nil {
		return fmt.Errorf("vllm: reload weights from %s (version %d): %w", path, version, err)
	}
	if err := c.eachFound(ctx, &list, c.chooseRoute); err != nil {
		return fmt.Errorf("vllm: reload weights from %s (version %d): %w", path, version, err)
	}
	if err := c.pauseOn(ctx, PauseWait, &list); err != nil {
		return fmt.Errorf("vllm: reload weights from %s: %w", path, err)
	}
	err = c.eachFound(ctx, &list, func(ctx context.Context, s *server) error {
		return c.reload(ctx, s, paths[s], version)
	})
	if err != nil {
		return fmt.Errorf("vllm: reload weights from %s (version %d): %w (dispatch stays paused)", path, version, err)
	}
	c.mu.Lock()
	c.lastReload = &reloadRecord{path: path, version: version}
	c.mu.Unlock()
	if err := c.resumeOn(ctx, &list); err != nil {
		return fmt.Errorf("vllm: reload weights from %s (version %d): resume: %w", path, version, err)
	}
	return nil
}

// How to start a server for each route, for errors.
const (
	startForDisk = `VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config '{"backend": "disk"}' ` +
		`(a vLLM with the disk backend, pull request #52152)`
	startForReloadWeights = "VLLM_SERVER_DEV_MODE=1 (a vLLM whose reload_weights takes weights_path)"
)

// chooseRoute settles how s is reloaded. The disk backend is asked for
// with POST /init_weight_transfer_engine {"init_info": {}} (a no-op for
// that backend); with WeightUpdateAuto any other answer (a stock vLLM's
// 500 "Weight transfer not configured", another backend's refusal of the
// empty init_info, a 404 without dev-mode routes, which the pause then
// names) sends s down the reload_weights route.
func (c *Client) chooseRoute(ctx context.Context, s *server) error {
	c.mu.Lock()
	route, probed := s.route, s.diskReady
	c.mu.Unlock()
	if route == WeightUpdateReloadWeights || probed {
		return nil
	}
	_, err := c.control(ctx, s, http.MethodPost, "/init_weight_transfer_engine",
		initWeightTransferRequest{InitInfo: map[string]any{}})
	var se *ServerError
	switch {
	case err == nil:
		c.mu.Lock()
		s.route, s.diskReady = WeightUpdateDisk, true
		c.mu.Unlock()
		return nil
	case route == WeightUpdateDisk:
		return fmt.Errorf("%w: weight update %q needs the server started with %s; a stock vLLM takes weight update %q",
			err, WeightUpdateDisk, startForDisk, WeightUpdateReloadWeights)
	case !errors.As(err, &se) || se.Status == 0:
		return err // no answer: nothing learnt
	}
	c.mu.Lock()
	s.route, s.noDisk = WeightUpdateReloadWeights, se.Err.Error()
	c.mu.Unlock()
	return nil
}

// reload makes s load the checkpoint in path as version by its route.
func (c *Client) reload(ctx context.Context, s *server, path string, version int64) error {
	c.mu.Lock()
	route, noDisk := s.route, s.noDisk
	c.mu.Unlock()
	if route == WeightUpdateDisk {
		steps := []struct {
			name string
			run  func() error
		}{
			{"start", func() error { return c.startUpdate(ctx, s) }},
			{"update", func() error { return c.updateWeights(ctx, s, map[string]string{"path": path}) }},
			{"finish", func() error { return c.finishUpdate(ctx, s, version) }},
		}
		for _, st := range steps {
			if err := st.run(); err != nil {
				if c.cfg.WeightUpdate == WeightUpdateAuto {
					c.mu.Lock()
					s.route, s.diskReady = "", false // ask again next time: it may have restarted otherwise
					c.mu.Unlock()
				}
				return fmt.Errorf("%s: %w", st.name, err)
			}
		}
		return nil
	}
	if err := c.reloadWeightsRPC(ctx, s, path); err != nil {
		if noDisk != "" {
			var se *ServerError
			if errors.As(err, &se) {
				return &ServerError{Server: c.urlOf(s), Op: se.Op, Status: se.Status, Err: fmt.Errorf(
					"%w; and it offers no disk weight-transfer backend (POST /init_weight_transfer_engine answered %s): "+
						"neither route reloads it; start it with %s, or with %s", se.Err, noDisk, startForReloadWeights, startForDisk)}
			}
		}
		return err
	}
	c.serves(s, version)
	return nil
}

// reloadWeightsRPC calls the workers' reload_weights at s through
// POST /collective_rpc, then drops the prefix cache s computed with the
// old weights (POST /reset_prefix_cache).
func (c *Client) reloadWeightsRPC(ctx context.Context, s *server, path string) error {
	req := collectiveRPCRequest{Method: "reload_weights",
		Kwargs:  reloadWeightsKwargs{WeightsPath: path, IsCheckpointFormat: true},
		Timeout: c.cfg.ControlTimeout.Seconds()}
	if dl, ok := ctx.Deadline(); ok {
		req.Timeout = min(req.Timeout, time.Until(dl).Seconds())
	}
	body, err := c.control(ctx, s, http.MethodPost, "/collective_rpc", req)
	if err != nil {
		var se *ServerError
		if errors.As(err, &se) && strings.Contains(se.Err.Error(), "weights_path") {
			// vLLMs before layerwise reloading: reload_weights() takes
			// no arguments.
			se.Err = fmt.Errorf("%w (this vLLM's reload_weights takes no weights_path: it predates layerwise reloading)", se.Err)
		}
		return err
	}
	if err := checkRPCResults(body); err != nil {
		return &ServerError{Server: c.urlOf(s), Op: "POST /collective_rpc", Status: http.StatusOK, Err: err}
	}
	_, err = c.control(ctx, s, http.MethodPost, "/reset_prefix_cache", nil)
	return err
}

// LoadLoRA loads (or replaces in place) the LoRA adapter name from path at
// every server (POST /v1/load_lora_adapter) and makes it what requests use,
// as weight version version. Dispatch waits while the client's requests in
// flight finish and while the adapter loads. The servers run with
// --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True. Servers that
// loaded it serve version even if others failed; requests switch to the
// adapter only when every server has it. A server that lost its weights
// (ErrServerLost: a request's connection broke there, or an adapter this
// client loaded there is no longer listed — it restarted) is refused: an
// adapter on the base it started with is not the policy; reload the base
// first.
func (c *Client) LoadLoRA(ctx context.Context, name, path string, version int64) error {
	if name == "" || path == "" {
		return fmt.Errorf("vllm: load LoRA: name %q and path %q must both be set", name, path)
	}
	list, err := c.located(ctx)
	if err != nil {
		return fmt.Errorf("vllm: load LoRA %q from %s: %w", name, path, err)
	}
	paths, err := c.stagedPaths(ctx, &list, path)
	if err != nil {
		return fmt.Errorf("vllm: load LoRA %q from %s: %w", name, path, err)
	}
	if err := c.hold(ctx); err != nil {
		return fmt.Errorf("vllm: load LoRA %q: waiting for requests in flight: %w", name, err)
	}
	defer c.unhold()
	err = c.eachFound(ctx, &list, func(ctx context.Context, s *server) error {
		if err := c.checkAdapter(ctx, s); err != nil {
			return err
		}
		_, err := c.control(ctx, s, http.MethodPost, "/v1/load_lora_adapter",
			loadLoRARequest{LoRAName: name, LoRAPath: paths[s], LoadInplace: true})
		if err == nil {
			c.mu.Lock()
			s.version = version
			s.lora = name
			c.mu.Unlock()
		}
		return err
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.model = name
	c.lastLoRA = &loraRecord{name: name, path: path, version: version}
	c.mu.Unlock()
	return nil
}

// checkAdapter refuses s when it is lost, and marks it lost when the
// adapter this client loaded there is no longer listed (the server
// restarted between updates, no request saw it go).
func (c *Client) checkAdapter(ctx context.Context, s *server) error {
	c.mu.Lock()
	lost, had := s.lost, s.lora
	c.mu.Unlock()
	const op = "POST /v1/load_lora_adapter"
	if lost != "" {
		return &ServerError{Server: c.urlOf(s), Op: op, Err: fmt.Errorf("%w (%s): reload the base first", ErrServerLost, lost)}
	}
	if had == "" {
		return nil
	}
	body, err := c.control(ctx, s, http.MethodGet, "/v1/models", nil)
	if err != nil {
		return err
	}
	ids, err := decodeModels(body)
	if err != nil {
		return &ServerError{Server: c.urlOf(s), Op: "GET /v1/models", Err: err}
	}
	if !slices.Contains(ids, had) {
		why := fmt.Sprintf("adapter %q loaded there is no longer listed (the server restarted?)", had)
		c.markLost(s, why)
		return &ServerError{Server: c.urlOf(s), Op: op, Err: fmt.Errorf("%w (%s): reload the base first", ErrServerLost, why)}
	}
	return nil
}

// UnloadLoRA unloads adapter name at every server
// (POST /v1/unload_lora_adapter). The adapter requests use now cannot be
// unloaded.
func (c *Client) UnloadLoRA(ctx context.Context, name string) error {
	c.mu.Lock()
	inUse := c.model == name
	c.mu.Unlock()
	if inUse {
		return fmt.Errorf("vllm: unload LoRA %q: requests use it; load another adapter first", name)
	}
	return c.eachServer(ctx, func(ctx context.Context, s *server) error {
		_, err := c.control(ctx, s, http.MethodPost, "/v1/unload_lora_adapter", unloadLoRARequest{LoRAName: name})
		if err == nil {
			c.mu.Lock()
			if s.lora == name {
				s.lora = "" // gone on purpose: its absence says nothing of a restart
			}
			c.mu.Unlock()
		}
		return err
	})
}

func (c *Client) requirePaused(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.userPaused {
		return fmt.Errorf("vllm: %s: generation is not paused: call Pause first", op)
	}
	return nil
}

// hold pauses dispatch on the client side only and waits for the
// requests in flight to finish; unhold undoes it.
func (c *Client) hold(ctx context.Context) error {
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
	if err := c.drain(ctx); err != nil {
		c.unhold()
		return err
	}
	return nil
}

func (c *Client) unhold() {
	c.mu.Lock()
	c.holds--
	c.wakeLocked()
	c.mu.Unlock()
}

// drain waits, within ctx, until no request is in flight at any server.
func (c *Client) drain(ctx context.Context) error {
	for {
		c.mu.Lock()
		n := 0
		for _, s := range c.servers {
			n += s.inFlight
		}
		ch := c.changed
		c.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%d requests still in flight: %w", n, ctx.Err())
		}
	}
}

// control makes one control call to s: body (if not nil) as JSON, bounded
// by Config.ControlTimeout; any answer but 200 is an error.
func (c *Client) control(ctx context.Context, s *server, method, path string, body any) ([]byte, error) {
	data, _, err := c.controlOnce(ctx, s, method, path, body)
	return data, err
}

// controlRetry is control with the request retries: for calls that are safe
// to repeat (GET /health, GET /v1/models).
func (c *Client) controlRetry(ctx context.Context, s *server, method, path string, body any) ([]byte, error) {
	var err error
	for attempt := 1; attempt <= c.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if werr := ctxio.Sleep(ctx, backoff(c.cfg.RetryBase, c.cfg.RetryMax, attempt)); werr != nil {
				return nil, fmt.Errorf("%w (after: %v)", werr, err)
			}
		}
		var data []byte
		var retry bool
		data, retry, err = c.controlOnce(ctx, s, method, path, body)
		if err == nil || !retry || ctx.Err() != nil {
			return data, err
		}
	}
	return nil, fmt.Errorf("gave up after %d attempts: %w", c.cfg.MaxAttempts, err)
}

// maxControlBytes bounds a control call's answer (health, models, LoRA and
// weight-transfer endpoints answer a few hundred bytes).
const maxControlBytes = 8 << 20

func (c *Client) controlOnce(ctx context.Context, s *server, method, path string, body any) (data []byte, retry bool, err error) {
	op := method + " " + path
	url := c.urlOf(s)
	fail := func(status int, retry bool, err error) ([]byte, bool, error) {
		return nil, retry, &ServerError{Server: url, Op: op, Status: status, Err: err}
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fail(0, false, err)
		}
		rd = bytes.NewReader(b)
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.ControlTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, method, url+path, rd)
	if err != nil {
		return fail(0, false, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.auth(req)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fail(0, false, ctx.Err())
		}
		if errors.Is(actx.Err(), context.DeadlineExceeded) {
			return fail(0, true, fmt.Errorf("no answer within %v", c.cfg.ControlTimeout))
		}
		return fail(0, true, err)
	}
	defer resp.Body.Close()
	data, err = readBody(resp.Body, maxControlBytes)
	if err != nil {
		return fail(resp.StatusCode, ctx.Err() == nil, fmt.Errorf("reading the answer: %w", err))
	}
	if resp.StatusCode != http.StatusOK {
		msg := errorMessage(data)
		if resp.StatusCode == http.StatusNotFound && msg == "Not Found" {
			msg += missingRoute(path)
		}
		return fail(resp.StatusCode, retryableStatus(resp.StatusCode),
			fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg))
	}
	return data, false, nil
}

// missingRoute says how to start a vLLM server whose answer to path was
// "no such route": vLLM registers the LoRA and weight-transfer routes only
// when told to.
func missingRoute(path string) string {
	path, _, _ = strings.Cut(path, "?")
	switch path {
	case "/v1/load_lora_adapter", "/v1/unload_lora_adapter":
		return " (the server offers no runtime LoRA loading: start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora)"
	case "/pause", "/resume", "/collective_rpc", "/reset_prefix_cache",
		"/init_weight_transfer_engine", "/start_weight_update", "/update_weights", "/finish_weight_update":
		return " (the server offers no dev-mode routes, which every full-weight reload needs: start it with VLLM_SERVER_DEV_MODE=1)"
	}
	return ""
}
