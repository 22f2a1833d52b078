// Package episodetest holds test doubles for episode and rollout-actor
// tests: ScriptedEngine, an engine.Engine that replays scripted answers as
// token ids with fixed logprobs, and ExactVerifier, a verify.Verifier that
// compares the last \boxed{} of an answer with the reference as strings.
// They stand in for a model and a real verifier only in tests.
package episodetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/verify"
)

// Reply scripts the answer text for sample k of a request. Returning
// Refuse makes the engine refuse that request with engine.ErrBadRequest.
type Reply func(req engine.Request, k int) string

// Refuse is the Reply that makes ScriptedEngine refuse the request.
const Refuse = "\x00refuse"

// ScriptedEngine is a test double of engine.Engine. It tokenizes prompts
// (chat messages through the chat template) and scripted answers with Tok,
// ends every answer with <|im_end|> (included in TokenIDs, not in Text, as
// vLLM reports stop ids), and gives token i the logprob −(i+1)/100.
type ScriptedEngine struct {
	Tok     *tokenizer.Tokenizer
	Reply   Reply
	Version atomic.Int64

	mu       sync.Mutex
	requests []engine.Request
	calls    int
	Fail     error // when set, Generate fails as a whole with it
	// MaxPositions, when set, is the model's context: a request whose
	// prompt plus MaxTokens exceeds it is refused with
	// engine.ErrContextFull, as the native engine refuses it.
	MaxPositions int
}

// NewScriptedEngine returns a scripted engine over the builtin tokenizer.
func NewScriptedEngine(reply Reply) *ScriptedEngine {
	return &ScriptedEngine{Tok: tokenizer.Builtin(), Reply: reply}
}

// Requests returns every request seen so far.
func (e *ScriptedEngine) Requests() []engine.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.Request(nil), e.requests...)
}

// Calls is the number of Generate calls.
func (e *ScriptedEngine) Calls() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls
}

// Generate implements engine.Engine.
func (e *ScriptedEngine) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	e.mu.Lock()
	e.calls++
	e.requests = append(e.requests, reqs...)
	fail := e.Fail
	e.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	end, _ := e.Tok.TokenID(tokenizer.IMEnd)
	out := make([]engine.Result, len(reqs))
	for i, r := range reqs {
		prompt := r.Prompt
		if len(prompt) == 0 {
			prompt = e.Tok.EncodeChat(r.Messages, true)
		}
		if len(prompt) == 0 || r.Params.MaxTokens <= 0 {
			return nil, fmt.Errorf("scripted engine: request %s: %w", r.ID, engine.ErrBadRequest)
		}
		if e.MaxPositions > 0 && len(prompt)+r.Params.MaxTokens > e.MaxPositions {
			return nil, fmt.Errorf("scripted engine: request %s: %w: prompt of %d tokens plus max_tokens %d exceeds %d",
				r.ID, engine.ErrContextFull, len(prompt), r.Params.MaxTokens, e.MaxPositions)
		}
		res := engine.Result{RequestID: r.ID, PromptTokenIDs: append([]int(nil), prompt...), WeightVersion: e.Version.Load()}
		for k := range max(r.Params.N, 1) {
			text := e.Reply(r, k)
			if text == Refuse {
				return nil, fmt.Errorf("scripted engine: request %s refused: %w", r.ID, engine.ErrBadRequest)
			}
			ids := append(e.Tok.Encode(text), end)
			finish := "stop"
			if len(ids) > r.Params.MaxTokens {
				ids, finish = ids[:r.Params.MaxTokens], "length"
				text = e.Tok.Decode(ids)
			}
			lp := make([]float32, len(ids))
			for j := range lp {
				lp[j] = -float32(j+1) / 100
			}
			res.Samples = append(res.Samples, engine.Sample{TokenIDs: ids, LogProbs: lp, Text: text, FinishReason: finish})
		}
		out[i] = res
	}
	return out, nil
}

// WeightVersion implements engine.Engine.
func (e *ScriptedEngine) WeightVersion() int64 { return e.Version.Load() }

// Close implements engine.Engine.
func (e *ScriptedEngine) Close() error { return nil }

// LastUser is the content of the last user message of a chat request, or
// the decoded prompt of a token request.
func (e *ScriptedEngine) LastUser(r engine.Request) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return e.Tok.Decode(r.Prompt)
}

// ExactVerifier is a test double of verify.Verifier: reward 1 when the
// content of the answer's last \boxed{...} (no nested braces) equals
// ref.Answer after trimming spaces, else 0; a note when there is no box.
type ExactVerifier struct{}

// Verify implements verify.Verifier.
func (ExactVerifier) Verify(_ context.Context, response string, ref verify.Reference) verify.Result {
	i := strings.LastIndex(response, `\boxed{`)
	if i < 0 {
		return verify.Result{Error: "no \\boxed{} answer"}
	}
	rest := response[i+len(`\boxed{`):]
	j := strings.IndexByte(rest, '}')
	if j < 0 {
		return verify.Result{Error: "unclosed \\boxed{"}
	}
	if strings.TrimSpace(rest[:j]) == strings.TrimSpace(ref.Answer) {
		return verify.Result{Reward: 1}
	}
	return verify.Result{}
}
