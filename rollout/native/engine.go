package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
)

// Config sizes the engine. Zero fields take the defaults.
type Config struct {
	// MaxBatch is how many sequences decode together (default 64). A
	// request's n samples must fit in it.
	MaxBatch int
	// MaxQueue is how many requests may wait for a place in the batch
	// (default 1024); Generate and Stream wait for room beyond that.
	MaxQueue int
	// MaxStepTokens caps the prompt tokens prefilled in one step across
	// the batch (default 1024), so long prompts do not stall decoding.
	MaxStepTokens int
	// WeightVersion is the policy version of the initial weights.
	WeightVersion int64
	// Device is where Load puts the model, its KV caches and activations:
	// "" or "cpu" (the cpu backend), "cuda" or "cuda-bf16" with an
	// optional device index ("cuda:1"), as cuda.OpenBackend opens them.
	// New ignores it (its model already has a backend).
	Device string
}

func (c *Config) defaults() {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 64
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = 1024
	}
	if c.MaxStepTokens <= 0 {
		c.MaxStepTokens = 1024
	}
}

// ErrClosed is returned for work submitted to, or cut short by, a closed
// engine.
var ErrClosed = errors.New("native engine closed")

// Engine generates with a model in process. It is safe for concurrent use.
type Engine struct {
	m       *model.Model
	tok     *tokenizer.Tokenizer
	cfg     Config
	inf     *model.Inference
	eos     []int
	params  map[string]*model.Param
	version atomic.Int64

	queue    chan *job
	swaps    chan *swap
	scores   chan *scoreOp
	closing  chan struct{}
	done     chan struct{}
	closeErr sync.Once
	// backend is closed after the scheduler stops: the device backend
	// Load opened; nil for New's engines and the cpu backend.
	backend io.Closer
}

var _ engine.Engine = (*Engine)(nil)

// New starts an engine over m (on any learner/backend: the KV caches and
// activations live in the backend's memory) and tok. The engine owns m from now on:
// change its weights only through SetWeights.
func New(m *model.Model, tok *tokenizer.Tokenizer, cfg Config) (*Engine, error) {
	cfg.defaults()
	if tok == nil {
		return nil, fmt.Errorf("native engine: no tokenizer")
	}
	if tok.VocabSize() > m.Config.VocabSize {
		return nil, fmt.Errorf("native engine: tokenizer has %d tokens but the model's vocab_size is %d", tok.VocabSize(), m.Config.VocabSize)
	}
	inf, err := m.NewInference()
	if err != nil {
		return nil, fmt.Errorf("native engine: %w", err)
	}
	e := &Engine{m: m, tok: tok, cfg: cfg, inf: inf, eos: tok.StopIDs(),
		params: map[string]*model.Param{},
		queue:  make(chan *job, cfg.MaxQueue), swaps: make(chan *swap), scores: make(chan *scoreOp),
		closing: make(chan struct{}), done: make(chan struct{})}
	for _, p := range m.Params() {
		e.params[p.Name] = p
	}
	e.version.Store(cfg.WeightVersion)
	go e.run()
	return e, nil
}

// Load reads a checkpoint directory (config.json, safetensors weights,
// tokenizer.json) onto cfg.Device's backend and starts an engine over it,
// which closes that backend with itself. A directory that also holds a
// PEFT adapter (an rlnode LoRA checkpoint: the frozen base in
// model.safetensors, the adapter beside it) is served as base plus
// adapter, merged.
func Load(dir string, cfg Config) (*Engine, error) {
	return LoadContext(context.Background(), dir, cfg)
}

// LoadContext is Load that gives up once ctx is done (checked while the
// checkpoint is read and between its tensors), with an error wrapping
// ctx's and the backend closed.
func LoadContext(ctx context.Context, dir string, cfg Config) (*Engine, error) {
	return startOn(cfg, func(b backend.Backend) (*model.Model, *tokenizer.Tokenizer, error) {
		var m *model.Model
		var err error
		if model.HasAdapter(dir) {
			if m, err = model.LoadServedContext(ctx, dir, b); err != nil {
				return nil, nil, fmt.Errorf("native engine: %w", err)
			}
		} else if m, err = model.LoadContext(ctx, dir, b); err != nil {
			return nil, nil, err
		}
		tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			return nil, nil, fmt.Errorf("native engine: model %s: %w", dir, err)
		}
		return m, tok, nil
	})
}

// NewOn starts an engine over a fresh model of mc (weights unset until
// SetWeights) on cfg.Device's backend, which the engine closes with
// itself.
func NewOn(mc model.Config, tok *tokenizer.Tokenizer, cfg Config) (*Engine, error) {
	return startOn(cfg, func(b backend.Backend) (*model.Model, *tokenizer.Tokenizer, error) {
		m, err := model.New(mc, b)
		if err != nil {
			return nil, nil, fmt.Errorf("native engine: %w", err)
		}
		return m, tok, nil
	})
}

// startOn opens cfg.Device's backend, builds the model and tokenizer on
// it and starts an engine that owns the backend; on any failure the
// backend is closed again.
func startOn(cfg Config, build func(backend.Backend) (*model.Model, *tokenizer.Tokenizer, error)) (e *Engine, err error) {
	b, err := OpenBackend(cfg.Device)
	if err != nil {
		return nil, err
	}
	closer, _ := b.(io.Closer)
	defer func() {
		if err != nil && closer != nil {
			closer.Close()
		}
	}()
	m, tok, err := build(b)
	if err != nil {
		return nil, err
	}
	if e, err = New(m, tok, cfg); err != nil {
		return nil, err
	}
	e.backend = closer
	return e, nil
}

// OpenBackend is the learner backend an engine on device runs on
// (Config.Device): the cpu backend for "" and "cpu", else a GPU's, or an
// error naming the device and why the CUDA backend cannot run here.
func OpenBackend(device string) (backend.Backend, error) {
	b, err := cuda.OpenBackend(device)
	if err != nil {
		return nil, fmt.Errorf("native engine: %w", err)
	}
	return b, nil
}

// Model is the served model's configuration.
func (e *Engine) Model() model.Config { return e.m.Config }

// ParamNames are the served model's parameter names, in its order.
func (e *Engine) ParamNames() []string {
	ps := e.m.Params()
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return names
}

// Tokenizer is the served model's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// WeightVersion is the policy version the engine serves now.
func (e *Engine) WeightVersion() int64 { return e.version.Load() }

// Close stops the engine: running and queued requests fail with ErrClosed.
// It waits for the step in progress to end.
func (e *Engine) Close() error {
	var err error
	e.closeErr.Do(func() {
		close(e.closing)
		<-e.done
		if e.backend != nil {
			err = e.backend.Close()
		}
	})
	<-e.done
	return err
}

// Generate runs the requests through the running batch and returns one
// Result per request, in order. A bad request fails the call before any
// work starts, with an error wrapping engine.ErrBadRequest.
func (e *Engine) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	jobs := make([]*job, len(reqs))
	for i := range reqs {
		j, err := e.newJob(reqs[i], i, 0, false)
		if err != nil {
			return nil, err
		}
		jobs[i] = j
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, j := range jobs {
		j.ctx = ctx
		if err := e.submit(ctx, j); err != nil {
			return nil, j.fail(err)
		}
	}
	out := make([]engine.Result, len(reqs))
	for i, j := range jobs {
		select {
		case <-j.finished:
		case <-e.done:
			return nil, j.fail(ErrClosed)
		}
		if j.err != nil {
			return nil, j.fail(j.err)
		}
		out[i] = j.result
	}
	return out, nil
}

// StreamOptions are per-request options beyond engine.Request.
type StreamOptions struct {
	// TopLogProbs asks for that many most likely alternatives at every
	// generated token (0: none).
	TopLogProbs int
}

// Event is one generated token of one sample.
type Event struct {
	Sample  int
	TokenID int
	LogProb float32
	// TopLogProbs are the most likely tokens at this step, when asked.
	TopLogProbs []TokenLogProb
	// Text is the text that became final with this token: stop strings and
	// characters cut between tokens are held back until decided.
	Text string
	// FinishReason is "stop" or "length" on the sample's last token.
	FinishReason string
}

// Stream is one request's generation, token by token.
type Stream struct {
	e *Engine
	j *job
}

// Stream starts one request and returns its token stream. The request
// runs until it finishes, ctx is cancelled or the engine closes.
func (e *Engine) Stream(ctx context.Context, req engine.Request, opts StreamOptions) (*Stream, error) {
	j, err := e.newJob(req, 0, opts.TopLogProbs, true)
	if err != nil {
		return nil, err
	}
	j.ctx = ctx
	if err := e.submit(ctx, j); err != nil {
		return nil, j.fail(err)
	}
	return &Stream{e: e, j: j}, nil
}

// PromptTokenIDs is the prompt as the engine tokenized it.
func (s *Stream) PromptTokenIDs() []int { return s.j.result.PromptTokenIDs }

// Next returns the next event, io.EOF after the last one, or the error
// that ended the request.
func (s *Stream) Next(ctx context.Context) (Event, error) {
	for {
		ev, ok, end := s.j.events.pop()
		if ok {
			return ev, nil
		}
		if end {
			if s.j.err != nil {
				return Event{}, s.j.fail(s.j.err)
			}
			return Event{}, io.EOF
		}
		select {
		case <-s.j.events.wake:
		case <-ctx.Done():
			return Event{}, s.j.fail(ctx.Err())
		case <-s.e.done:
			select {
			case <-s.j.finished: // its events are all queued; drain them
			default:
				return Event{}, s.j.fail(ErrClosed)
			}
		}
	}
}

// Result is the whole generation once Next has returned io.EOF.
func (s *Stream) Result() engine.Result { return s.j.result }

// job is one request in the engine.
type job struct {
	ctx      context.Context
	index    int
	req      engine.Request
	n        int
	top      int
	events   *eventQueue // nil unless streamed
	result   engine.Result
	finished chan struct{} // closed when result or err is set
	err      error

	// Scheduler state.
	cache   *model.KVCache // prompt prefill, before the samples fork
	fed     int
	left    int // samples not finished
	started bool
	// admitted is when the scheduler took the request into its batch
	// (its samples' Started).
	admitted time.Time
}

func (j *job) fail(err error) error {
	return fmt.Errorf("native engine: request %d (id %q): %w", j.index, j.req.ID, err)
}

// newJob validates req and tokenizes its chat messages.
func (e *Engine) newJob(req engine.Request, index, top int, stream bool) (*job, error) {
	j := &job{index: index, req: req, top: top, finished: make(chan struct{})}
	bad := func(format string, args ...any) error {
		return j.fail(fmt.Errorf("%w: "+format, append([]any{engine.ErrBadRequest}, args...)...))
	}
	c := &e.m.Config
	p := &j.req.Params
	switch {
	case len(req.Prompt) > 0 && len(req.Messages) > 0:
		return nil, bad("both a prompt and chat messages")
	case len(req.Messages) > 0:
		j.req.Prompt = e.tok.EncodeChat(req.Messages, true)
	case len(req.Prompt) == 0:
		return nil, bad("empty prompt")
	default:
		j.req.Prompt = slices.Clone(req.Prompt)
	}
	for i, t := range j.req.Prompt {
		if t < 0 || t >= c.VocabSize {
			return nil, bad("prompt token %d: id %d out of range [0, %d)", i, t, c.VocabSize)
		}
	}
	j.n = max(p.N, 1)
	switch {
	case p.N < 0:
		return nil, bad("n = %d must be positive", p.N)
	case j.n > e.cfg.MaxBatch:
		return nil, bad("n = %d exceeds the engine's batch of %d sequences", j.n, e.cfg.MaxBatch)
	case p.MaxTokens <= 0:
		return nil, bad("max_tokens = %d must be positive", p.MaxTokens)
	case len(j.req.Prompt)+p.MaxTokens > c.MaxPositions:
		return nil, j.fail(fmt.Errorf("%w: prompt of %d tokens plus max_tokens %d exceeds the model's context of %d tokens", engine.ErrContextFull, len(j.req.Prompt), p.MaxTokens, c.MaxPositions))
	case !(p.Temperature >= 0) || math.IsInf(p.Temperature, 0):
		return nil, bad("temperature = %v must be a finite number ≥ 0", p.Temperature)
	case !(p.TopP >= 0 && p.TopP <= 1):
		return nil, bad("top_p = %v must be in [0, 1]", p.TopP)
	case p.TopK < 0:
		return nil, bad("top_k = %d must be ≥ 0 (0 is off)", p.TopK)
	case top < 0:
		return nil, bad("top logprobs = %d must be ≥ 0", top)
	}
	if err := engine.CheckStop(p.Stop); err != nil {
		return nil, bad("%v", err)
	}
	if len(p.StopTokenIDs) > engine.MaxStopTokenIDs {
		return nil, bad("%d stop token ids, more than the %d allowed", len(p.StopTokenIDs), engine.MaxStopTokenIDs)
	}
	for i, t := range p.StopTokenIDs {
		if t < 0 || t >= c.VocabSize {
			return nil, bad("stop token id %d: %d out of range [0, %d)", i, t, c.VocabSize)
		}
	}
	j.result = engine.Result{RequestID: req.ID, PromptTokenIDs: slices.Clone(j.req.Prompt), Samples: make([]engine.Sample, j.n)}
	if stream {
		j.events = newEventQueue()
	}
	return j, nil
}

// submit queues j, waiting for room while the queue is full.
func (e *Engine) submit(ctx context.Context, j *job) error {
	select {
	case <-e.closing:
		return ErrClosed
	default:
	}
	select {
	case e.queue <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.closing:
		return ErrClosed
	}
}

// finish ends j with err (nil on success) exactly once.
func (j *job) finish(err error) {
	select {
	case <-j.finished:
		return
	default:
	}
	j.err = err
	if j.events != nil {
		j.events.close()
	}
	close(j.finished)
}

// eventQueue passes events from the scheduler, which must never block, to
// the stream's reader: an unbounded list (at most n × max_tokens events).
type eventQueue struct {
	mu     sync.Mutex
	evs    []Event
	head   int
	closed bool
	wake   chan struct{}
}

func newEventQueue() *eventQueue { return &eventQueue{wake: make(chan struct{}, 1)} }

func (q *eventQueue) push(ev Event) {
	q.mu.Lock()
	q.evs = append(q.evs, ev)
	q.mu.Unlock()
	q.signal()
}

func (q *eventQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *eventQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop returns the next event, or end when the queue is closed and empty.
func (q *eventQueue) pop() (ev Event, ok, end bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head < len(q.evs) {
		ev = q.evs[q.head]
		q.evs[q.head] = Event{}
		q.head++
		return ev, true, false
	}
	return Event{}, false, q.closed
}
