package vllm

import (
	"fmt"
	"math/rand/v2"
)

// RequestError is a generation request that failed: which server, which
// request, which try, and why. Err wraps engine.ErrBadRequest when the
// server refused the request as invalid, and the context's error when the
// caller gave up.
type RequestError struct {
	Server    string // base URL; empty when no server was reached
	RequestID string
	Attempt   int  // the try that failed (1 is the first)
	Status    int  // HTTP status; 0 when none came back
	Exhausted bool // every try allowed by Config.MaxAttempts failed
	Err       error

	retry bool // another try may succeed
}

func (e *RequestError) Error() string {
	where := "vllm"
	if e.Server != "" {
		where = "vllm server " + e.Server
	}
	how := fmt.Sprintf("attempt %d", e.Attempt)
	if e.Exhausted {
		how = fmt.Sprintf("gave up after %d attempts", e.Attempt)
	}
	return fmt.Sprintf("%s: request %q: %s: %v", where, e.RequestID, how, e.Err)
}

func (e *RequestError) Unwrap() error { return e.Err }

// withCause is the error for a request abandoned (cause: usually the
// context's error) after attempts failed tries, the last being e.
func (e *RequestError) withCause(attempts int, cause error) *RequestError {
	return &RequestError{Server: e.Server, RequestID: e.RequestID, Attempt: attempts, Status: e.Status,
		Err: fmt.Errorf("%w (after: %v)", cause, e.Err)}
}

// ServerError is a control call (health, models, LoRA, weight transfer)
// that failed at one server.
type ServerError struct {
	Server string
	Op     string // "POST /v1/load_lora_adapter"
	Status int    // HTTP status; 0 when none came back
	Err    error
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("vllm server %s: %s: %v", e.Server, e.Op, e.Err)
}

func (e *ServerError) Unwrap() error { return e.Err }

// retryableStatus reports HTTP answers worth another try: server errors,
// overload and request timeouts.
func retryableStatus(code int) bool {
	return code >= 500 || code == 429 || code == 408
}

func randInt64N(n int64) int64 { return rand.Int64N(n) }
