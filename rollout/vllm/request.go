package vllm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/rlnode/rlnode/rollout/engine"
)

// maxResponseBytes bounds any answer read into memory; a generation
// answer is bounded tighter by what its request can produce
// (answerLimit).
const maxResponseBytes = 256 << 20

// answerLimit is the most bytes a well-formed answer to r can take: a
// fixed allowance, the prompt's token ids (repeated in every completion
// choice) and, per sample and generated token, its id, logprob, token
// string, offset and text, escaped. vLLM's answers stay far below it; a
// server sending more is broken, and the client must not hold
// maxResponseBytes for each of its requests in flight.
func answerLimit(r *engine.Request) int64 {
	const fixed, perPromptToken, perToken = 64 << 10, 16, 2 << 10
	n := int64(max(r.Params.N, 1))
	prompt := int64(len(r.Prompt))
	for _, m := range r.Messages {
		prompt += int64(len(m.Content)) + 64 // at most a token per byte, plus the template's
	}
	limit := fixed + n*prompt*perPromptToken + n*int64(r.Params.MaxTokens)*perToken
	return min(limit, maxResponseBytes)
}

// try sends r once to sl's server and turns the answer into a Result.
func (c *Client) try(ctx context.Context, sl slot, r *engine.Request, id string, attempt int) (engine.Result, error) {
	fail := func(status int, retry bool, err error) (engine.Result, error) {
		return engine.Result{}, &RequestError{Server: sl.url, RequestID: id, Attempt: attempt,
			Status: status, retry: retry, Err: err}
	}
	path, body, err := encodeRequest(r, sl.model)
	if err != nil {
		return fail(0, false, err)
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, sl.url+path, bytes.NewReader(body))
	if err != nil {
		return fail(0, false, err)
	}
	req.Header.Set("Content-Type", "application/json")
	// vLLM takes X-Request-Id as its request id; each try gets its own so a
	// retry never collides with an abandoned try still running there.
	rid := id
	if attempt > 1 {
		rid = id + ".try" + strconv.Itoa(attempt)
	}
	req.Header.Set("X-Request-Id", rid)
	c.auth(req)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fail(0, false, fmt.Errorf("POST %s: %w", path, ctx.Err()))
		}
		if errors.Is(actx.Err(), context.DeadlineExceeded) {
			return fail(0, true, fmt.Errorf("POST %s: no answer within %v", path, c.cfg.RequestTimeout))
		}
		// The connection broke (or was refused): the server may have
		// restarted, holding the weights it started with.
		c.markLost(sl.srv, fmt.Sprintf("request %q: %v", id, err))
		return fail(0, true, fmt.Errorf("POST %s: %w", path, err))
	}
	defer resp.Body.Close()
	data, err := readBody(resp.Body, answerLimit(r))
	if err != nil {
		if ctx.Err() != nil {
			return fail(resp.StatusCode, false, fmt.Errorf("POST %s: reading the answer: %w", path, ctx.Err()))
		}
		switch {
		case errors.Is(actx.Err(), context.DeadlineExceeded):
			err = fmt.Errorf("answer not complete within %v: %w", c.cfg.RequestTimeout, err)
		case !errors.Is(err, errAnswerTooLong):
			c.markLost(sl.srv, fmt.Sprintf("request %q: reading the answer: %v", id, err))
		}
		return fail(resp.StatusCode, true, fmt.Errorf("POST %s: reading the answer: %w", path, err))
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("POST %s: HTTP %d: %s", path, resp.StatusCode, errorMessage(data))
		switch {
		case resp.StatusCode == http.StatusBadRequest && strings.Contains(string(data), "maximum context length"):
			// vLLM's words for a prompt plus max_tokens over max_model_len.
			err = fmt.Errorf("%w: %w", engine.ErrContextFull, err)
		case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnprocessableEntity:
			err = fmt.Errorf("%w: %w", engine.ErrBadRequest, err)
		case resp.StatusCode == http.StatusNotFound && sl.model != c.cfg.Model:
			// The adapter every server loaded is gone from this one: it
			// restarted. Another server, or the healed one, takes it.
			c.markLost(sl.srv, fmt.Sprintf("request %q: adapter %q not served", id, sl.model))
			return fail(resp.StatusCode, true, err)
		}
		return fail(resp.StatusCode, retryableStatus(resp.StatusCode), err)
	}
	res, retry, err := decodeResult(path, data, r, c.cfg.VocabSize)
	if err != nil {
		return fail(resp.StatusCode, retry, fmt.Errorf("POST %s: %w", path, err))
	}
	res.RequestID = id
	res.WeightVersion = sl.version
	return res, nil
}

func (c *Client) auth(req *http.Request) {
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
}

var errAnswerTooLong = errors.New("answer longer than the request can produce")

// readBody reads an answer, refusing one longer than limit bytes.
func readBody(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", errAnswerTooLong, limit)
	}
	return data, nil
}

// encodeRequest is the endpoint and JSON body for r, naming model.
func encodeRequest(r *engine.Request, model string) (string, []byte, error) {
	p := r.Params
	n := max(p.N, 1)
	topP := p.TopP
	if topP == 0 {
		topP = 1 // engine: 0 is off; vLLM wants (0, 1]
	}
	topK := p.TopK
	if topK == 0 {
		topK = -1 // off; every vLLM version takes -1 (older ones refuse 0)
	}
	var v any
	path := "/v1/completions"
	if len(r.Messages) > 0 {
		path = "/v1/chat/completions"
		v = chatRequest{
			Model: model, Messages: r.Messages, MaxCompletionTokens: p.MaxTokens, N: n,
			Temperature: p.Temperature, TopP: topP, TopK: topK, RepetitionPenalty: 1, Seed: p.Seed,
			Stop: p.Stop, StopTokenIDs: p.StopTokenIDs,
			Logprobs: true, TopLogprobs: 0, ReturnTokenIDs: true, AddGenerationPrompt: true,
		}
	} else {
		v = completionRequest{
			Model: model, Prompt: r.Prompt, MaxTokens: p.MaxTokens, N: n,
			Temperature: p.Temperature, TopP: topP, TopK: topK, RepetitionPenalty: 1, Seed: p.Seed,
			Stop: p.Stop, StopTokenIDs: p.StopTokenIDs,
			Logprobs: 0, ReturnTokenIDs: true,
		}
	}
	body, err := json.Marshal(v)
	return path, body, err
}

// decodeResult turns an answer into a Result, checking it against r: one
// choice per sample, the prompt r sent (completions), no more tokens than
// r allows, token ids in [0, vocab) (vocab 0: unchecked) and one finite
// log-probability ≤ 0 per token. retry says whether another try may
// succeed: yes for malformed JSON, error bodies, aborted generations and
// answers no server should give (another server may be sound); no for
// answers that are well-formed but lack what the client asked for (every
// server would answer the same).
func decodeResult(path string, data []byte, r *engine.Request, vocab int) (res engine.Result, retry bool, err error) {
	n := max(r.Params.N, 1)
	if msg, ok := errorBody(data); ok {
		return res, true, fmt.Errorf("HTTP 200 with an error body: %s", msg)
	}
	chk := answerCheck{maxTokens: r.Params.MaxTokens, vocab: vocab}
	if path == "/v1/chat/completions" {
		var cr chatResponse
		if err := json.Unmarshal(data, &cr); err != nil {
			return res, true, fmt.Errorf("malformed JSON answer: %w", err)
		}
		if cr.PromptTokenIDs == nil {
			return res, false, errNoTokenIDs("prompt_token_ids")
		}
		if err := chk.ids("prompt_token_ids", cr.PromptTokenIDs); err != nil {
			return res, true, err
		}
		res.PromptTokenIDs = cr.PromptTokenIDs
		samples, retry, err := chatSamples(cr.Choices, n, chk)
		res.Samples = samples
		return res, retry, err
	}
	var cr completionResponse
	if err := json.Unmarshal(data, &cr); err != nil {
		return res, true, fmt.Errorf("malformed JSON answer: %w", err)
	}
	if len(cr.Choices) != n {
		return res, false, fmt.Errorf("%d choices for n = %d", len(cr.Choices), n)
	}
	res.Samples = make([]engine.Sample, n)
	seen := make([]bool, n)
	for _, ch := range cr.Choices {
		if ch.Index < 0 || ch.Index >= n || seen[ch.Index] {
			return res, false, fmt.Errorf("choice index %d out of range or repeated (n = %d)", ch.Index, n)
		}
		seen[ch.Index] = true
		if ch.PromptTokenIDs == nil {
			return res, false, errNoTokenIDs("prompt_token_ids")
		}
		// The learner trains on the prompt the server reports: it must be
		// the one sent (vLLM adds nothing to a token-id prompt).
		if !slices.Equal(ch.PromptTokenIDs, r.Prompt) {
			return res, true, fmt.Errorf("choice %d: prompt_token_ids (%d ids) are not the %d prompt ids sent", ch.Index, len(ch.PromptTokenIDs), len(r.Prompt))
		}
		if res.PromptTokenIDs == nil {
			res.PromptTokenIDs = ch.PromptTokenIDs
		}
		if ch.TokenIDs == nil {
			return res, false, errNoTokenIDs("token_ids")
		}
		var lps []*float64
		if ch.Logprobs != nil {
			lps = ch.Logprobs.TokenLogprobs
		}
		s, retry, err := chk.sample(ch.Index, ch.Text, ch.FinishReason, ch.TokenIDs, len(lps), func(i int) (float64, bool) {
			return derefOK(lps[i])
		})
		if err != nil {
			return res, retry, err
		}
		res.Samples[ch.Index] = s
	}
	return res, false, nil
}

func chatSamples(choices []chatChoice, n int, chk answerCheck) ([]engine.Sample, bool, error) {
	if len(choices) != n {
		return nil, false, fmt.Errorf("%d choices for n = %d", len(choices), n)
	}
	out := make([]engine.Sample, n)
	seen := make([]bool, n)
	for _, ch := range choices {
		if ch.Index < 0 || ch.Index >= n || seen[ch.Index] {
			return nil, false, fmt.Errorf("choice index %d out of range or repeated (n = %d)", ch.Index, n)
		}
		seen[ch.Index] = true
		if ch.TokenIDs == nil {
			return nil, false, errNoTokenIDs("token_ids")
		}
		text := ""
		if ch.Message.Content != nil {
			text = *ch.Message.Content
		}
		nlp := 0
		if ch.Logprobs != nil {
			nlp = len(ch.Logprobs.Content)
		}
		s, retry, err := chk.sample(ch.Index, text, ch.FinishReason, ch.TokenIDs, nlp, func(i int) (float64, bool) {
			return derefOK(ch.Logprobs.Content[i].Logprob)
		})
		if err != nil {
			return nil, retry, err
		}
		out[ch.Index] = s
	}
	return out, false, nil
}

// answerCheck holds what a sound answer to one request keeps to.
type answerCheck struct {
	maxTokens int
	vocab     int // 0: token ids unchecked above
}

// maxLogprob is the largest log-probability taken: log-softmax is ≤ 0,
// and the slack covers rounding in any server's arithmetic.
const maxLogprob = 1e-3

// ids checks token ids against the vocabulary.
func (a answerCheck) ids(field string, ids []int) error {
	for i, t := range ids {
		if t < 0 || (a.vocab > 0 && t >= a.vocab) {
			return fmt.Errorf("%s[%d] = %d is outside the vocabulary [0, %d)", field, i, t, a.vocab)
		}
	}
	return nil
}

// sample checks one choice and builds its Sample; logprob(i) is the i-th of
// nlp logprobs (ok false for a JSON null).
func (a answerCheck) sample(index int, text string, finish *string, ids []int, nlp int, logprob func(int) (float64, bool)) (engine.Sample, bool, error) {
	reason := ""
	if finish != nil {
		reason = *finish
	}
	switch reason {
	case "stop", "length":
	case "abort":
		// vLLM aborts requests in flight when paused with mode=abort.
		return engine.Sample{}, true, fmt.Errorf("choice %d: generation aborted by the server", index)
	case "error":
		// vLLM answers HTTP 500 for it; another server may be sound.
		return engine.Sample{}, true, fmt.Errorf("choice %d: generation failed at the server (finish_reason \"error\")", index)
	default:
		return engine.Sample{}, false, fmt.Errorf("choice %d: finish_reason %q, want \"stop\" or \"length\"", index, reason)
	}
	if len(ids) > a.maxTokens {
		return engine.Sample{}, true, fmt.Errorf("choice %d: %d token ids, more than the max_tokens %d asked for", index, len(ids), a.maxTokens)
	}
	if err := a.ids(fmt.Sprintf("choice %d: token_ids", index), ids); err != nil {
		return engine.Sample{}, true, err
	}
	if nlp != len(ids) {
		return engine.Sample{}, false, fmt.Errorf("choice %d: %d logprobs for %d token ids (did the request lose logprobs?)", index, nlp, len(ids))
	}
	lps := make([]float32, nlp)
	for i := range lps {
		v, ok := logprob(i)
		if !ok {
			return engine.Sample{}, true, fmt.Errorf("choice %d: logprob %d is null", index, i)
		}
		f := float32(v)
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) || f > maxLogprob {
			return engine.Sample{}, true, fmt.Errorf("choice %d: logprob %d of token %d is %v, not a log-probability", index, i, ids[i], v)
		}
		lps[i] = f
	}
	return engine.Sample{TokenIDs: ids, LogProbs: lps, Text: text, FinishReason: reason}, false, nil
}

// errorBody reports an answer that carries vLLM's error shape instead of
// a result ({"error": ...} or {"object": "error", ...}), and its message.
func errorBody(data []byte) (string, bool) {
	var e struct {
		Error  json.RawMessage `json:"error"`
		Object string          `json:"object"`
	}
	if json.Unmarshal(data, &e) != nil {
		return "", false
	}
	if (len(e.Error) > 0 && string(e.Error) != "null") || e.Object == "error" {
		return errorMessage(data), true
	}
	return "", false
}

func derefOK(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

func errNoTokenIDs(field string) error {
	return fmt.Errorf("answer has no %s: the server ignored return_token_ids (a vLLM too old for it?)", field)
}

// decodeModels reads the model ids of a GET /v1/models answer.
func decodeModels(data []byte) ([]string, error) {
	var ml modelList
	if err := json.Unmarshal(data, &ml); err != nil {
		return nil, fmt.Errorf("malformed JSON answer: %w", err)
	}
	ids := make([]string, len(ml.Data))
	for i, m := range ml.Data {
		ids[i] = m.ID
	}
	return ids, nil
}
