package native

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/rlnode/rlnode/internal/bodyslot"
)

// Limits bound what clients can make the server hold. A zero field takes
// its default (see withDefaults).
type Limits struct {
	// MaxBodyBytes bounds a request body (default 4 MiB). A larger one is
	// answered 413, unread when its Content-Length says so.
	MaxBodyBytes int64
	// MaxRequests bounds the generation requests in progress (default
	// 4 × the engine's batch); more are answered 429.
	MaxRequests int
	// MaxQueuedTokens bounds the tokens of the generation requests in
	// progress, each counting its prompts' tokens plus n × max_tokens per
	// prompt (default 2 × batch × context). A request that would pass it
	// is answered 429; one that alone exceeds it, 413.
	MaxQueuedTokens int
	// ReadTimeout bounds reading a request's headers, and its body once the
	// server is ready to read it; IdleTimeout, how long a keep-alive
	// connection waits for its next request; WriteTimeout, each write of an
	// answer or streamed event to a client that does not read (30 s each).
	ReadTimeout, IdleTimeout, WriteTimeout time.Duration
	// Bodies are read a few at a time, at most half of them still arriving
	// from one address; once its place is taken a body must arrive at
	// MinBodyRate bytes a second on average after BodyGrace (defaults:
	// bodyslot.DefaultMinRate, DefaultGrace) and whole within ReadTimeout,
	// or it is answered 408.
	BodyGrace   time.Duration
	MinBodyRate int64
}

// DefaultMaxBodyBytes is Limits.MaxBodyBytes's default.
const DefaultMaxBodyBytes = 4 << 20

// maxPrompts bounds the prompts of one completions request.
const maxPrompts = 1024

// maxMessages bounds the messages of a chat request, and the text parts
// of one message: more than any model's context holds (each message
// takes a few tokens of the chat template), checked before they are
// decoded. Longer lists of tools or tool calls are refused before they
// are decoded too; shorter ones are checked against their own limits
// once decoded.
const maxMessages = 1 << 16

func (l Limits) withDefaults(e *Engine) Limits {
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxRequests <= 0 {
		l.MaxRequests = 4 * e.cfg.MaxBatch
	}
	if l.MaxQueuedTokens <= 0 {
		l.MaxQueuedTokens = 2 * e.cfg.MaxBatch * e.Model().MaxPositions
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = 30 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 30 * time.Second
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = 30 * time.Second
	}
	return l
}

// admission holds the counts that Limits bound. Bodies are read and
// prompts tokenized a few at a time (parsing), so that the requests
// admitted hold little memory until they are known to fit; slow senders
// cannot keep those places (bodyslot).
type admission struct {
	lim      Limits
	requests chan struct{}
	parsing  *bodyslot.Gate

	mu     sync.Mutex
	tokens int // queued: reserved by requests in progress
}

func newAdmission(lim Limits) *admission {
	return &admission{lim: lim, requests: make(chan struct{}, lim.MaxRequests),
		parsing: &bodyslot.Gate{Grace: lim.BodyGrace, MinRate: lim.MinBodyRate, MaxTime: lim.ReadTimeout}}
}

// enter admits a request or answers why not; leave must follow an
// admission.
func (a *admission) enter() *apiError {
	select {
	case a.requests <- struct{}{}:
		return nil
	default:
		return &apiError{status: http.StatusTooManyRequests, typ: "requests", code: "rate_limit_exceeded",
			message: fmt.Sprintf("the server has %d requests in progress, its limit; retry later", a.lim.MaxRequests)}
	}
}

func (a *admission) leave() { <-a.requests }

// readBody reads r's body within MaxBodyBytes, taking a parsing place
// that the caller releases with done once the body is parsed. It returns
// a nil body when the client left while waiting.
func (a *admission) readBody(w http.ResponseWriter, r *http.Request) (data []byte, done func(), aerr *apiError) {
	if r.ContentLength > a.lim.MaxBodyBytes {
		w.Header().Set("Connection", "close") // rather than read the body to keep the connection
		return nil, nil, a.tooLarge()
	}
	place, ok := a.parsing.Take(r)
	if !ok {
		return nil, nil, nil
	}
	done = place.Release
	// The read deadlines run from now, not from the request's arrival.
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 0)+bytes.MinRead))
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, place.Body(w, r), a.lim.MaxBodyBytes)); err != nil {
		done()
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, nil, a.tooLarge()
		}
		if errors.Is(err, bodyslot.ErrTooSlow) {
			w.Header().Set("Connection", "close")
			return nil, nil, &apiError{status: http.StatusRequestTimeout, typ: "invalid_request_error", code: "request_timeout",
				message: "reading the request body: " + err.Error()}
		}
		return nil, nil, &apiError{status: 400, typ: "invalid_request_error", message: "reading the request body: " + err.Error()}
	}
	return buf.Bytes(), done, nil
}

func (a *admission) tooLarge() *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "request_too_large",
		message: fmt.Sprintf("the request body is larger than the server's limit of %d bytes", a.lim.MaxBodyBytes)}
}

// reserve counts n tokens as queued, or answers why not; release(n) must
// follow a reservation.
func (a *admission) reserve(n int) *apiError {
	if n > a.lim.MaxQueuedTokens {
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "request_too_large",
			message: fmt.Sprintf("the request needs %d tokens (prompts plus n × max_tokens), more than the server's limit of %d", n, a.lim.MaxQueuedTokens)}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tokens+n > a.lim.MaxQueuedTokens {
		return &apiError{status: http.StatusTooManyRequests, typ: "tokens", code: "rate_limit_exceeded",
			message: fmt.Sprintf("the request needs %d tokens and %d of the server's %d are in use; retry later", n, a.tokens, a.lim.MaxQueuedTokens)}
	}
	a.tokens += n
	return nil
}

func (a *admission) release(n int) {
	a.mu.Lock()
	a.tokens -= n
	a.mu.Unlock()
}
