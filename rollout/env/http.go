package env

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// HTTPOptions bound what an HTTP environment may cost. Zero fields take
// the defaults of DefaultHTTPOptions.
type HTTPOptions struct {
	Timeout     time.Duration // per request, retries included in none
	Retries     int           // further attempts of a request that could not be served; < 0: none
	Backoff     time.Duration // before the first retry, doubled each time
	MaxResponse int64         // bytes of one response body
}

// DefaultHTTPOptions: 30 s per request, 3 retries from 200 ms, 1 MiB
// responses.
var DefaultHTTPOptions = HTTPOptions{Timeout: 30 * time.Second, Retries: 3, Backoff: 200 * time.Millisecond, MaxResponse: 1 << 20}

func (o HTTPOptions) withDefaults() HTTPOptions {
	d := DefaultHTTPOptions
	if o.Timeout > 0 {
		d.Timeout = o.Timeout
	}
	switch {
	case o.Retries < 0:
		d.Retries = 0
	case o.Retries > 0:
		d.Retries = o.Retries
	}
	if o.Backoff > 0 {
		d.Backoff = o.Backoff
	}
	if o.MaxResponse > 0 {
		d.MaxResponse = o.MaxResponse
	}
	return d
}

// HTTP is an environment served over HTTP in OpenEnv's simulation
// protocol (the request and response bodies of openenv-core 0.2's
// HTTPEnvServer, src/openenv/core/env_server/types.py):
//
//	POST /reset {"seed": s, "episode_id": id, "task": t}
//	POST /step  {"action": {"name": n, "param": p}, "episode_id": id, "request_id": r}
//	GET  /state?episode_id=id  → {"episode_id": id, "step_count": k}
//
// /reset and /step answer {"observation": {...}, "reward": r, "done": d,
// "metadata": {...}}. OpenEnv's bodies allow fields beyond its own; this
// client sends task and, on /step, the episode_id, so that one server can
// hold many episodes at once. The observation is the environment's own in
// OpenEnv; here it must carry "text" (a string) and "actions" (a list of
// {"name", "description", "param"}). A null reward is 0. metadata becomes
// StepResult.Info (strings as they are, other values as JSON); its
// "invalid" entry, when a non-empty string, is StepResult.Invalid.
//
// Every request has Timeout. A request that was refused at connect or
// answered 429, 502, 503 or 504 is retried up to Retries times (/reset
// with any transport error: the same episode_id and seed make it
// idempotent); a /step that may have reached the server is never sent
// twice. A body over MaxResponse, malformed JSON, a missing observation,
// a redirect (never followed) or a non-finite reward (Python's json
// writes NaN, which JSON does not allow: ErrBadReward) is an error. Every
// error names the URL, the episode and the step.
type HTTP struct {
	base   string
	opt    HTTPOptions
	client *http.Client

	episode string
	steps   int
	live    bool
}

// NewHTTP checks rawURL (http or https, with a host) and makes an
// environment served there.
func NewHTTP(rawURL string, opt HTTPOptions) (*HTTP, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("environment url %q: %w", rawURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("environment url %q: want http(s)://host[:port][/path], no query", rawURL)
	}
	// A redirect is answered as it is (an error: not 200), never followed.
	client := &http.Client{Transport: envTransport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &HTTP{base: strings.TrimRight(u.String(), "/"), opt: opt.withDefaults(), client: client}, nil
}

// envTransport is the transport every HTTP environment shares: it keeps
// up to MaxIdlePerServer connections to each server alive between
// requests (Go's default keeps 2, so a batch of concurrent episodes
// dialed anew for nearly every step: a connection each, and with a small
// listen backlog, such as Python's http.server's 5, dropped connection
// attempts that waited seconds for the retransmission).
var envTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 4*MaxIdlePerServer, MaxIdlePerServer
	return t
}()

// MaxIdlePerServer bounds the idle connections kept to one environment
// server.
const MaxIdlePerServer = 256

// URL is the environment's base URL.
func (h *HTTP) URL() string { return h.base }

// Episode is the episode_id of the episode in play ("" before Reset).
func (h *HTTP) Episode() string { return h.episode }

// ErrHTTPEnv marks errors of an environment served over HTTP.
var ErrHTTPEnv = errors.New("http environment")

type wireAction struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Param       string `json:"param,omitempty"`
}

type wireResponse struct {
	Observation *struct {
		Text    *string      `json:"text"`
		Actions []wireAction `json:"actions"`
	} `json:"observation"`
	Reward   *float64       `json:"reward"`
	Done     bool           `json:"done"`
	Metadata map[string]any `json:"metadata"`
}

// Reset implements Env.
func (h *HTTP) Reset(ctx context.Context, seed int64, task string) (Observation, error) {
	var id [8]byte
	rand.Read(id[:])
	h.episode, h.steps, h.live = "ep-"+hex.EncodeToString(id[:]), 0, false
	body := map[string]any{"seed": seed, "episode_id": h.episode, "task": task}
	r, err := h.post(ctx, "/reset", body, true)
	if err != nil {
		return Observation{}, err
	}
	if r.Done {
		return Observation{}, h.errorf("/reset", "the episode is done at reset")
	}
	h.live = true
	return r.obs, nil
}

// Step implements Env.
func (h *HTTP) Step(ctx context.Context, a Action) (StepResult, error) {
	if !h.live {
		return StepResult{}, ErrDone
	}
	h.steps++
	body := map[string]any{
		"action":     wireAction{Name: a.Name, Param: a.Param},
		"episode_id": h.episode,
		"request_id": fmt.Sprintf("%s-%d", h.episode, h.steps),
		"timeout_s":  h.opt.Timeout.Seconds(),
	}
	r, err := h.post(ctx, "/step", body, false)
	if err != nil {
		h.live = false
		return StepResult{}, err
	}
	if r.Done {
		h.live = false
	}
	return r.StepResult, nil
}

// State asks the server for the episode in play: its id and the steps the
// server counted.
func (h *HTTP) State(ctx context.Context) (episode string, steps int, err error) {
	raw, err := h.do(ctx, http.MethodGet, "/state?episode_id="+url.QueryEscape(h.episode), nil, true)
	if err != nil {
		return "", 0, err
	}
	var s struct {
		EpisodeID string `json:"episode_id"`
		StepCount int    `json:"step_count"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", 0, h.errorf("/state", "malformed JSON: %v", err)
	}
	return s.EpisodeID, s.StepCount, nil
}

type response struct {
	StepResult
	obs Observation
}

func (h *HTTP) post(ctx context.Context, path string, body any, idempotent bool) (response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return response{}, h.errorf(path, "encode the request: %v", err)
	}
	raw, err := h.do(ctx, http.MethodPost, path, b, idempotent)
	if err != nil {
		return response{}, err
	}
	var w wireResponse
	if err := json.Unmarshal(raw, &w); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) && nonFinite(raw, syn.Offset) {
			return response{}, fmt.Errorf("%w: %w", h.errorf(path, "the response holds NaN or Infinity"), ErrBadReward)
		}
		return response{}, h.errorf(path, "malformed JSON: %v (%q)", err, clipLong(string(raw)))
	}
	if w.Observation == nil {
		return response{}, h.errorf(path, "the response has no observation object")
	}
	if w.Observation.Text == nil {
		return response{}, h.errorf(path, "the observation has no text")
	}
	var r response
	r.obs.Text = *w.Observation.Text
	for i, a := range w.Observation.Actions {
		if !isName(a.Name) {
			return response{}, h.errorf(path, "observation action %d: %q is not an action name (lower-case letters, digits, _)", i, clip(a.Name))
		}
		r.obs.Actions = append(r.obs.Actions, ActionSpec(a))
	}
	if w.Reward != nil {
		r.Reward = *w.Reward
		if math.IsNaN(r.Reward) || math.IsInf(r.Reward, 0) {
			return response{}, fmt.Errorf("%w: %w", h.errorf(path, "reward %v", r.Reward), ErrBadReward)
		}
	}
	r.Done = w.Done
	r.Observation = r.obs
	for k, v := range w.Metadata {
		if r.Info == nil {
			r.Info = map[string]string{}
		}
		if s, ok := v.(string); ok {
			r.Info[k] = s
		} else {
			j, _ := json.Marshal(v)
			r.Info[k] = string(j)
		}
	}
	// What rlnode reads of metadata must say what it means: an "invalid"
	// that is not a string (true, say) would otherwise pass as a valid
	// action, silently.
	for _, k := range []string{"invalid", "outcome"} {
		if v, ok := w.Metadata[k]; ok && v != nil {
			if _, ok := v.(string); !ok {
				j, _ := json.Marshal(v)
				why := map[string]string{"invalid": "saying why the action was not accepted", "outcome": "naming how the episode ended"}[k]
				return response{}, h.errorf(path, "metadata.%s: want a string %s, got %s", k, why, clip(string(j)))
			}
		}
	}
	if s, ok := w.Metadata["invalid"].(string); ok {
		r.Invalid = s
	}
	return r, nil
}

// nonFinite says whether the JSON syntax error at off is one of the
// tokens Python writes for non-finite floats.
func nonFinite(raw []byte, off int64) bool {
	for i := max(0, off-2); i < int64(len(raw)) && i <= off; i++ {
		rest := raw[i:]
		if bytes.HasPrefix(rest, []byte("NaN")) || bytes.HasPrefix(rest, []byte("Infinity")) || bytes.HasPrefix(rest, []byte("-Infinity")) {
			return true
		}
	}
	return false
}

// do sends one request with retries and returns a 200 body.
func (h *HTTP) do(ctx context.Context, method, path string, body []byte, idempotent bool) ([]byte, error) {
	wait := h.opt.Backoff
	for attempt := 0; ; attempt++ {
		raw, retry, err := h.once(ctx, method, path, body, idempotent)
		if err == nil {
			return raw, nil
		}
		if !retry || attempt >= h.opt.Retries || ctx.Err() != nil {
			if attempt > 0 {
				return nil, fmt.Errorf("%w (after %d attempts)", err, attempt+1)
			}
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w; then %v", err, ctx.Err())
		case <-time.After(wait):
		}
		wait *= 2
	}
}

func (h *HTTP) once(ctx context.Context, method, path string, body []byte, idempotent bool) (raw []byte, retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, h.opt.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, rd)
	if err != nil {
		return nil, false, h.errorf(path, "%v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return nil, idempotent, h.errorf(path, "no answer within %v", h.opt.Timeout)
		}
		return nil, idempotent || refused(err), h.errorf(path, "%v", err)
	}
	defer resp.Body.Close()
	raw, err = io.ReadAll(io.LimitReader(resp.Body, h.opt.MaxResponse+1))
	if err != nil {
		return nil, idempotent, h.errorf(path, "read the response: %v", err)
	}
	if int64(len(raw)) > h.opt.MaxResponse {
		return nil, false, h.errorf(path, "response over %d bytes", h.opt.MaxResponse)
	}
	if resp.StatusCode != http.StatusOK {
		switch resp.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			retry = true
		}
		return nil, retry, h.errorf(path, "status %s: %s", resp.Status, clipLong(strings.TrimSpace(string(raw))))
	}
	return raw, false, nil
}

// refused: the connection was refused, so the request never reached the
// server.
func refused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// errorf is an error naming the request, the episode and the step.
func (h *HTTP) errorf(path, format string, args ...any) error {
	where := h.base + path
	if i := strings.IndexByte(where, '?'); i >= 0 {
		where = where[:i]
	}
	return fmt.Errorf("%w %s (episode %s, step %d): %s", ErrHTTPEnv, where, h.episode, h.steps, fmt.Sprintf(format, args...))
}

// clipLong shortens a server's answer for an error message.
func clipLong(s string) string {
	if len(s) > 200 {
		return strings.ToValidUTF8(s[:200], "") + "..."
	}
	return s
}
