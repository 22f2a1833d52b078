// Package engine defines the inference-engine interface every rollout uses:
// the native Go engine (package rollout/native) and the vLLM client
// (package rollout/vllm) implement it, so episodes and the rollout actor do
// not care which one runs underneath.
package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlnode/rlnode/learner/tokenizer"
)

// SamplingParams are the sampling options of one request, with vLLM's and
// OpenAI's meanings.
type SamplingParams struct {
	N            int      // samples per request; 0 means 1
	MaxTokens    int      // new tokens at most; must be > 0
	Temperature  float64  // 0 samples greedily
	TopP         float64  // nucleus mass; 0 or 1 is off
	TopK         int      // 0 is off
	Stop         []string // stop strings (not included in the output)
	StopTokenIDs []int    // stop token ids (included in TokenIDs, as vLLM does)
	Seed         *int64   // fixes the sampling randomness of this request when set
}

// Bounds on SamplingParams.Stop. The text of every generated token is
// searched for each stop string, so their number and length are CPU spent
// per token (a thousand strings of 4 KB cost seconds per request). OpenAI
// takes 4 stop strings and vLLM any list; these leave room for generous
// lists and engines refuse more with ErrBadRequest (CheckStop).
const (
	MaxStopStrings    = 64   // stop strings of one request
	MaxStopBytes      = 1024 // bytes of one stop string
	MaxStopTotalBytes = 8192 // bytes of a request's stop strings together
	// MaxStopTokenIDs bounds SamplingParams.StopTokenIDs, each looked
	// for at every token.
	MaxStopTokenIDs = 1024
)

// CheckStop says how stop breaks the bounds on stop strings (their count,
// each one's bytes, their bytes together) or that one is empty; nil when
// it is fine.
func CheckStop(stop []string) error {
	if len(stop) > MaxStopStrings {
		return fmt.Errorf("%d stop strings, more than the %d allowed", len(stop), MaxStopStrings)
	}
	total := 0
	for i, s := range stop {
		switch {
		case s == "":
			return fmt.Errorf("stop string %d is empty", i)
		case len(s) > MaxStopBytes:
			return fmt.Errorf("stop string %d is %d bytes, more than the %d allowed", i, len(s), MaxStopBytes)
		}
		total += len(s)
	}
	if total > MaxStopTotalBytes {
		return fmt.Errorf("stop strings of %d bytes in all, more than the %d allowed", total, MaxStopTotalBytes)
	}
	return nil
}

// Request is one prompt: token ids, or chat messages that the engine renders
// with its model's chat template (adding the generation prompt).
type Request struct {
	ID       string
	Prompt   []int
	Messages []tokenizer.Message
	Params   SamplingParams
}

// Sample is one generated continuation.
type Sample struct {
	TokenIDs []int
	// LogProbs[i] is log p(TokenIDs[i] | prefix) under the sampling
	// distribution softmax(logits/T) — before top-k/top-p truncation, and
	// at T = 1 when sampling greedily — exactly what the learner's
	// importance-sampling correction compares with its own logprobs.
	LogProbs     []float32
	Text         string
	FinishReason string // "stop" (stop string, stop id or EOS) or "length"
	// Started is when the engine began the sample's request: admitted it
	// to its running batch (the native engine), sent its HTTP request (an
	// HTTP server's client). The requests of one batch that wait for
	// room start at their own times. Zero when the engine cannot say.
	Started time.Time
	// Finished is when the sample was done: its last token decoded (the
	// native engine), its answer received (an HTTP server's client). The
	// samples of one batch finish at their own times. Zero when the
	// engine cannot say.
	Finished time.Time
}

// Result answers one Request.
type Result struct {
	RequestID      string
	PromptTokenIDs []int // the prompt as the engine tokenized it
	Samples        []Sample
	// WeightVersion is the policy version whose weights produced every
	// sample of this result.
	WeightVersion int64
}

// Engine generates continuations. Implementations must be safe for
// concurrent use; Generate returns one Result per Request, in order, or an
// error naming the engine (server) and the request that failed.
type Engine interface {
	Generate(ctx context.Context, reqs []Request) ([]Result, error)
	// WeightVersion is the policy version the engine serves now.
	WeightVersion() int64
	// Close releases the engine's resources.
	Close() error
}

// ScoreRequest is a given continuation to score: Response's tokens after
// Prompt's.
type ScoreRequest struct {
	Prompt, Response []int
}

// Scorer is an engine that also scores given continuations: the log
// probability of every Response token given the prompt and the response
// before it, at temperature 1, under the weights served when the call
// runs. One []float32 per request, in order, or an error naming the
// request. The native engine implements it.
type Scorer interface {
	Score(ctx context.Context, reqs []ScoreRequest) ([][]float32, error)
}

// ErrBadRequest marks requests an engine refuses as invalid (empty prompt,
// MaxTokens ≤ 0, prompt longer than the context, ...).
var ErrBadRequest = errors.New("bad generation request")

// ErrContextFull marks the bad request whose prompt plus MaxTokens does
// not fit the model's context: a multi-turn episode that meets it has run
// out of room (it wraps ErrBadRequest).
var ErrContextFull = fmt.Errorf("%w: context full", ErrBadRequest)
