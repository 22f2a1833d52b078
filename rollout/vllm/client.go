package vllm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/internal/ctxio"
	"github.com/rlnode/rlnode/rollout/engine"
)

// Client talks to the vLLM servers of one policy. It is safe for concurrent
// use.
type Client struct {
	cfg  Config
	http *http.Client

	mu      sync.Mutex
	servers []*server
	// changed is closed and replaced whenever a request slot frees or
	// dispatch resumes, waking requests waiting for either.
	changed chan struct{}
	// userPaused is set between Pause and Resume; holds counts the
	// client-side pauses LoRA loads take. Dispatch waits while either is set.
	userPaused bool
	holds      int
	model      string // the name requests carry: the base model or a LoRA adapter
	next       int    // where the search for the least loaded server starts (ties rotate)
	closed     bool

	// What the servers were last told to load, so that servers which lost
	// their weights can be told again (heal): the last reload
	// (ReloadWeights) and the last adapter (LoadLoRA); nil when none.
	lastReload *reloadRecord
	lastLoRA   *loraRecord
	// healing is non-nil while a heal runs (closed when it ends); healErr
	// is the last heal's failure, returned to requests until a server is
	// usable again.
	healing chan struct{}
	healErr error

	ids atomic.Uint64 // numbers requests that come without an ID
}

type reloadRecord struct {
	path    string
	version int64
}

type loraRecord struct {
	name, path string
	version    int64
}

// server is one vLLM server and what the client knows of it. Fields other
// than index are guarded by Client.mu (url too: Config.Locate may move it;
// Client.urlOf reads it).
type server struct {
	url      string
	index    int
	inFlight int
	version  int64 // weight version it serves
	// epoch counts the pauses in which its weights may have changed; an
	// answer to a request sent in an earlier epoch is discarded and retried.
	epoch  uint64
	served int64 // requests answered
	// lost says why the server may no longer hold the weights it was
	// given: a request's connection broke (a vLLM that restarted serves the
	// weights it started with), or an adapter loaded there is no longer
	// listed. A lost server gets no requests until a weight update at it
	// succeeds; "" when it is not lost.
	lost string
	lora string // the adapter this client last loaded there
	// route is how ReloadWeights reloads it: Config.WeightUpdate, or with
	// WeightUpdateAuto what the server was found to offer ("" until its
	// first reload); noDisk is the server's answer that ruled the disk
	// backend out.
	route     WeightUpdate
	noDisk    string
	diskReady bool // init_weight_transfer_engine answered 200
	// With Config.Locate: process is the Location.Process last found
	// ("" before the first update); staged is Location.Staged; missing
	// says why the last update could not find it ("" when it did); goneAt
	// is the URL and process where it gave no answer (eachFound), which
	// it must answer /health at before it takes part again.
	process string
	staged  bool
	missing string
	goneAt  string
	// prestaged is the copy Client.Stage made on its node, for the update
	// of that folder that follows (used once, by the process that made it).
	prestaged prestage
}

// prestage is where a staged server's process holds its copy of dir.
type prestage struct {
	dir, process, path string
}

// ServerStatus is a snapshot of one server as the client sees it.
type ServerStatus struct {
	URL           string
	InFlight      int   // requests outstanding now
	WeightVersion int64 // the policy version it serves
	Served        int64 // requests it answered
	// Lost says why the server may have lost its weights (see
	// ErrServerLost); "" when it has not.
	Lost string
	// WeightUpdate is how ReloadWeights reloads it (WeightUpdateDisk or
	// WeightUpdateReloadWeights); "" while Config.WeightUpdate is auto and
	// no reload has asked it yet.
	WeightUpdate WeightUpdate
	// Missing says why Config.Locate did not find it at the last update
	// (restarting, or gone for good); "" when it did, or without Locate.
	Missing string
}

// ErrServerLost marks errors about servers that may no longer hold the
// weights they were given (a vLLM that restarted holds the ones it started
// with): they get no requests until a weight update reaches them again.
var ErrServerLost = errors.New("server may have lost its weights")

// New checks every server (GET /health, and GET /v1/models lists
// cfg.Model) and returns a client of them. A server that is down or does not
// serve the model is an error naming it.
func New(ctx context.Context, cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = cfg.MaxInFlight * len(cfg.Servers)
		tr.MaxIdleConnsPerHost = cfg.MaxInFlight
		// vLLM (uvicorn) closes a connection idle for
		// VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s by default. Dropping ours first
		// keeps a request from being written onto a connection the server
		// is closing: that breaks like a restart (the server is marked
		// lost, see ErrServerLost).
		tr.IdleConnTimeout = 4 * time.Second
		hc = &http.Client{Transport: tr}
	}
	c := &Client{cfg: cfg, http: hc, changed: make(chan struct{}), model: cfg.Model}
	for i, u := range cfg.Servers {
		s := &server{url: u, index: i, version: cfg.WeightVersion}
		if cfg.WeightUpdate != WeightUpdateAuto {
			s.route = cfg.WeightUpdate
		}
		c.servers = append(c.servers, s)
	}
	err = c.eachServer(ctx, func(ctx context.Context, s *server) error {
		return c.checkServer(ctx, s)
	})
	if err != nil {
		c.http.CloseIdleConnections()
		return nil, err
	}
	return c, nil
}

// checkServer asks s for its health and its models; it retries while s is
// unreachable or answers 5xx (a server that is still starting).
func (c *Client) checkServer(ctx context.Context, s *server) error {
	if _, err := c.controlRetry(ctx, s, http.MethodGet, "/health", nil); err != nil {
		return err
	}
	body, err := c.controlRetry(ctx, s, http.MethodGet, "/v1/models", nil)
	if err != nil {
		return err
	}
	ids, err := decodeModels(body)
	if err != nil {
		return &ServerError{Server: c.urlOf(s), Op: "GET /v1/models", Err: err}
	}
	if !slices.Contains(ids, c.cfg.Model) {
		return &ServerError{Server: c.urlOf(s), Op: "GET /v1/models",
			Err: fmt.Errorf("model %q is not served; the server lists %s", c.cfg.Model, quoteList(ids))}
	}
	return nil
}

// Health asks every server's /health once; the error names each server that
// did not answer 200.
func (c *Client) Health(ctx context.Context) error {
	return c.eachServer(ctx, func(ctx context.Context, s *server) error {
		_, err := c.control(ctx, s, http.MethodGet, "/health", nil)
		return err
	})
}

// Models returns the model ids server i lists (the base model and any
// LoRA adapters loaded).
func (c *Client) Models(ctx context.Context, i int) ([]string, error) {
	if i < 0 || i >= len(c.servers) {
		return nil, fmt.Errorf("vllm: server index %d out of range [0, %d)", i, len(c.servers))
	}
	s := c.servers[i]
	body, err := c.control(ctx, s, http.MethodGet, "/v1/models", nil)
	if err != nil {
		return nil, err
	}
	ids, err := decodeModels(body)
	if err != nil {
		return nil, &ServerError{Server: c.urlOf(s), Op: "GET /v1/models", Err: err}
	}
	return ids, nil
}

// Model is the name requests carry now: Config.Model, or the LoRA adapter
// last loaded.
func (c *Client) Model() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.model
}

// WeightVersion is the lowest weight version any server that gets
// requests serves (any server, when all are lost): every request goes to
// a server serving it or a newer one.
func (c *Client) WeightVersion() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, found := int64(0), false
	for _, s := range c.servers {
		if s.lost == "" && (!found || s.version < v) {
			v, found = s.version, true
		}
	}
	if found {
		return v
	}
	v = c.servers[0].version
	for _, s := range c.servers[1:] {
		v = min(v, s.version)
	}
	return v
}

// Servers reports each server's load and weight version.
func (c *Client) Servers() []ServerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ServerStatus, len(c.servers))
	for i, s := range c.servers {
		out[i] = ServerStatus{URL: s.url, InFlight: s.inFlight, WeightVersion: s.version, Served: s.served, Lost: s.lost,
			WeightUpdate: s.route, Missing: s.missing}
	}
	return out
}

// Close stops new requests and drops idle connections. Requests in flight
// finish or fail on their own.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.wakeLocked()
	c.mu.Unlock()
	c.http.CloseIdleConnections()
	return nil
}

// ErrClosed is returned for requests made after Close.
var ErrClosed = errors.New("vllm client is closed")

// slot is one request's claim on a server, taken by acquire.
type slot struct {
	srv     *server
	url     string
	version int64
	epoch   uint64
	model   string
}

// acquire waits until dispatch is not paused and some server has a free
// request slot, then claims the least loaded one (avoiding server avoid, the
// one that just failed, when another is free). Lost servers are skipped;
// when every server is lost it heals them (heal) or returns why it cannot.
// It waits no longer than ctx.
func (c *Client) acquire(ctx context.Context, avoid int) (slot, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return slot{}, ErrClosed
		}
		heal := false
		if !c.userPaused && c.holds == 0 {
			if s := c.pickLocked(avoid); s != nil {
				s.inFlight++
				sl := slot{srv: s, url: s.url, version: s.version, epoch: s.epoch, model: c.model}
				c.mu.Unlock()
				return sl, nil
			}
			if c.allLostLocked() && c.healing == nil {
				if err := c.healErr; err != nil {
					c.mu.Unlock()
					return slot{}, err
				}
				heal = true
				c.healing = make(chan struct{})
			}
		}
		ch := c.changed
		c.mu.Unlock()
		if heal {
			err := c.heal(ctx)
			c.mu.Lock()
			close(c.healing)
			c.healing = nil
			if err != nil && ctx.Err() == nil {
				c.healErr = err
			}
			c.wakeLocked()
			c.mu.Unlock()
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return slot{}, ctx.Err()
		}
	}
}

// allLostLocked reports whether every server is lost.
func (c *Client) allLostLocked() bool {
	for _, s := range c.servers {
		if s.lost == "" {
			return false
		}
	}
	return true
}

// markLost records that s may have lost its weights, and why.
func (c *Client) markLost(s *server, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.lost == "" {
		s.lost = why
	}
	c.wakeLocked()
}

// found records that s holds the weights it was given again.
func (c *Client) found(s *server) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.lost != "" {
		s.lora = "" // a restarted server holds no adapter
	}
	s.lost = ""
	c.healErr = nil
	c.wakeLocked()
}

// heal gives every server the weights it was last given: the last reload,
// then the adapter requests use. Requests wait meanwhile. A server that
// was never given weights serves those it started with, restarted or not.
func (c *Client) heal(ctx context.Context) error {
	c.mu.Lock()
	rl, lo, model := c.lastReload, c.lastLoRA, c.model
	var why []string
	for _, s := range c.servers {
		why = append(why, s.url+": "+s.lost)
	}
	c.mu.Unlock()
	fail := func(err error) error {
		return fmt.Errorf("vllm: every server may have lost its weights (%s); giving them back the last ones failed: %w: %w",
			strings.Join(why, "; "), ErrServerLost, err)
	}
	var err error
	if c.cfg.Locate != nil {
		// Launched servers start again, in place or on another node:
		// wait (bounded) until one is found and answers.
		err = c.awaitLocated(ctx)
	} else {
		// A restarting server answers /health once it can serve (retried
		// while it is down or starting, as at New).
		err = c.eachServer(ctx, func(ctx context.Context, s *server) error {
			_, err := c.controlRetry(ctx, s, http.MethodGet, "/health", nil)
			return err
		})
	}
	if err != nil {
		return fail(err)
	}
	if rl != nil {
		if err := c.ReloadWeights(ctx, rl.path, rl.version); err != nil {
			return fail(err)
		}
	}
	if lo != nil && model == lo.name {
		if err := c.LoadLoRA(ctx, lo.name, lo.path, lo.version); err != nil {
			return fail(err)
		}
	}
	if rl == nil && (lo == nil || model != lo.name) {
		// Nothing was loaded: a server that answers serves the weights it
		// started with.
		for _, s := range c.servers {
			c.mu.Lock()
			missing := s.missing
			c.mu.Unlock()
			if missing == "" {
				c.found(s)
			}
		}
	}
	return nil
}

// pickLocked returns the server with the fewest requests outstanding among
// those below MaxInFlight, or nil when all are full.
func (c *Client) pickLocked(avoid int) *server {
	n := len(c.servers)
	var best, fallback *server
	for k := range n {
		s := c.servers[(c.next+k)%n]
		switch {
		case s.inFlight >= c.cfg.MaxInFlight || s.lost != "":
		case s.index == avoid:
			fallback = s
		case best == nil || s.inFlight < best.inFlight:
			best = s
		}
	}
	if best == nil {
		best = fallback
	}
	if best != nil {
		c.next = (best.index + 1) % n
	}
	return best
}

// release returns sl's request slot; stale reports whether the server's
// weights may have changed while the request was out.
func (c *Client) release(sl slot, answered bool) (stale bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sl.srv.inFlight--
	if answered {
		sl.srv.served++
	}
	c.wakeLocked()
	return sl.srv.epoch != sl.epoch
}

func (c *Client) wakeLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// eachServer runs fn for every server at once and joins the errors.
func (c *Client) eachServer(ctx context.Context, fn func(context.Context, *server) error) error {
	return c.each(ctx, c.servers, fn)
}

// each runs fn for every server of list at once and joins the errors.
func (c *Client) each(ctx context.Context, list []*server, fn func(context.Context, *server) error) error {
	errs := make([]error, len(list))
	var wg sync.WaitGroup
	for i, s := range list {
		wg.Go(func() { errs[i] = fn(ctx, s) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// urlOf is where s listens now.
func (c *Client) urlOf(s *server) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return s.url
}

// Generate sends every request to a server and returns one Result per
// request, in order. The first request that fails (after its retries)
// cancels the others; its error names the server and the request.
func (c *Client) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	for i := range reqs {
		if err := validate(&reqs[i]); err != nil {
			return nil, fmt.Errorf("vllm: request %d (id %q): %w", i, reqs[i].ID, err)
		}
	}
	out := make([]engine.Result, len(reqs))
	if len(reqs) == 1 {
		r, err := c.generate(ctx, &reqs[0])
		if err != nil {
			return nil, err
		}
		out[0] = r
		return out, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for i := range reqs {
		wg.Go(func() {
			r, err := c.generate(ctx, &reqs[i])
			if err != nil {
				once.Do(func() { firstErr = err; cancel() })
				return
			}
			out[i] = r
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// validate refuses requests vLLM would refuse, before any is sent.
func validate(r *engine.Request) error {
	p := r.Params
	switch {
	case len(r.Prompt) == 0 && len(r.Messages) == 0:
		return fmt.Errorf("%w: no Prompt and no Messages", engine.ErrBadRequest)
	case len(r.Prompt) > 0 && len(r.Messages) > 0:
		return fmt.Errorf("%w: both Prompt and Messages are set", engine.ErrBadRequest)
	case p.MaxTokens <= 0:
		return fmt.Errorf("%w: MaxTokens = %d, want > 0", engine.ErrBadRequest, p.MaxTokens)
	case p.N < 0:
		return fmt.Errorf("%w: N = %d is negative", engine.ErrBadRequest, p.N)
	case p.Temperature < 0:
		return fmt.Errorf("%w: Temperature = %v is negative", engine.ErrBadRequest, p.Temperature)
	case p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("%w: TopP = %v, want in [0, 1]", engine.ErrBadRequest, p.TopP)
	case p.TopK < 0:
		return fmt.Errorf("%w: TopK = %d is negative", engine.ErrBadRequest, p.TopK)
	case len(p.StopTokenIDs) > engine.MaxStopTokenIDs:
		return fmt.Errorf("%w: %d stop token ids, more than the %d allowed", engine.ErrBadRequest, len(p.StopTokenIDs), engine.MaxStopTokenIDs)
	}
	// The same bounds as the native engine's, so a program behaves alike on both.
	if err := engine.CheckStop(p.Stop); err != nil {
		return fmt.Errorf("%w: %v", engine.ErrBadRequest, err)
	}
	for i, t := range r.Prompt {
		if t < 0 {
			return fmt.Errorf("%w: Prompt[%d] = %d is negative", engine.ErrBadRequest, i, t)
		}
	}
	for i, m := range r.Messages {
		if m.Role == "" {
			return fmt.Errorf("%w: Messages[%d] has no role", engine.ErrBadRequest, i)
		}
	}
	return nil
}

// generate runs one request to completion: tries, backoff and retries.
func (c *Client) generate(ctx context.Context, r *engine.Request) (engine.Result, error) {
	id := r.ID
	if id == "" {
		id = fmt.Sprintf("rlnode-%d", c.ids.Add(1))
	}
	var last *RequestError
	avoid := -1
	for attempt := 1; attempt <= c.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if err := ctxio.Sleep(ctx, backoff(c.cfg.RetryBase, c.cfg.RetryMax, attempt)); err != nil {
				return engine.Result{}, last.withCause(attempt-1, err)
			}
		}
		sl, err := c.acquire(ctx, avoid)
		if err != nil {
			if last != nil {
				return engine.Result{}, last.withCause(attempt-1, err)
			}
			return engine.Result{}, &RequestError{RequestID: id, Attempt: attempt - 1, Err: fmt.Errorf("waiting for a free server: %w", err)}
		}
		sent := time.Now() // after waiting for a free server
		res, err := c.try(ctx, sl, r, id, attempt)
		arrived := time.Now() // each request answers on its own
		stale := c.release(sl, err == nil)
		if err == nil && stale {
			err = &RequestError{Server: sl.url, RequestID: id, Attempt: attempt, retry: true,
				Err: errors.New("weights changed while the request was out; discarded")}
		}
		if err == nil {
			for i := range res.Samples {
				res.Samples[i].Started, res.Samples[i].Finished = sent, arrived
			}
			return res, nil
		}
		var re *RequestError
		if !errors.As(err, &re) || !re.retry || ctx.Err() != nil {
			return engine.Result{}, err
		}
		last = re
		avoid = sl.srv.index
	}
	last.Exhausted = true
	return engine.Result{}, last
}

// backoff is the jittered wait before try attempt (≥ 2).
func backoff(base, max time.Duration, attempt int) time.Duration {
	d := base
	for i := 2; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + time.Duration(randInt64N(int64(d/2)+1))
}

func quoteList(ss []string) string {
	if len(ss) == 0 {
		return "no models"
	}
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
