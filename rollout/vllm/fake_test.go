package vllm

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeVLLM stands in for a vLLM OpenAI-compatible server, which cannot run
// here: a real HTTP server on 127.0.0.1 answering /health, /v1/models,
// /v1/completions, /v1/chat/completions, the LoRA and weight-transfer
// endpoints with vLLM's documented shapes. Generation is deterministic:
// token ids and logprobs are a hash of the prompt ids, the sampling
// parameters, the sample index and the weights being served (fakeSample),
// so tests can compute what the client must hand back. Request bodies are
// decoded strictly (unknown fields are refused) against vLLM's field names.
type fakeVLLM struct {
	t      *testing.T
	srv    *httptest.Server
	url    string
	apiKey string
	base   string // the base model's id

	mu       sync.Mutex
	faults   []fault       // consumed one per generation request, in order
	hold     chan struct{} // while non-nil, generation waits for it to close
	abort    chan struct{} // closed by POST /pause?mode=abort
	arrived  chan struct{} // receives one value per generation request that arrives (if non-nil)
	inFlight int
	maxSeen  int
	answered int      // generation requests answered 200
	tries    int      // generation requests received
	reqIDs   []string // X-Request-Id of each generation request
	models   []string // model field of each generation request
	messages [][]chatMessage
	calls    []string // control calls, "POST /pause?mode=wait", in order
	bodies   map[string]json.RawMessage
	paused   bool
	resumed  chan struct{}
	updating bool
	weights  string            // label of the base weights, changed by finish_weight_update
	loras    map[string]string // LoRA adapter name → path
	badModel bool              // GET /v1/models answers malformed JSON
	noIDs    bool              // answers omit token_ids (as a server ignoring return_token_ids)
}

type fault int

const (
	faultNone     fault = iota
	fault503            // HTTP 503 with vLLM's error body
	faultDrop           // the connection is closed without an answer
	faultBadJSON        // HTTP 200 with a body that is not JSON
	faultHang           // no answer until the client gives up
	fault400            // HTTP 400 (the request is invalid)
	faultTruncate       // HTTP 200 with the JSON cut in half
)

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// The request bodies as vLLM declares them (the subset the client may send).
type fakeCompletionRequest struct {
	Model          string   `json:"model"`
	Prompt         []int    `json:"prompt"`
	MaxTokens      int      `json:"max_tokens"`
	N              int      `json:"n"`
	Temperature    float64  `json:"temperature"`
	TopP           float64  `json:"top_p"`
	TopK           int      `json:"top_k"`
	MinP           *float64 `json:"min_p"`
	RepPenalty     *float64 `json:"repetition_penalty"`
	PresPenalty    *float64 `json:"presence_penalty"`
	FreqPenalty    *float64 `json:"frequency_penalty"`
	Seed           *int64   `json:"seed"`
	Stop           []string `json:"stop"`
	StopTokenIDs   []int    `json:"stop_token_ids"`
	Logprobs       *int     `json:"logprobs"`
	ReturnTokenIDs bool     `json:"return_token_ids"`
}

type fakeChatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	MaxCompletionTokens int           `json:"max_completion_tokens"`
	N                   int           `json:"n"`
	Temperature         float64       `json:"temperature"`
	TopP                float64       `json:"top_p"`
	TopK                int           `json:"top_k"`
	MinP                *float64      `json:"min_p"`
	RepPenalty          *float64      `json:"repetition_penalty"`
	PresPenalty         *float64      `json:"presence_penalty"`
	FreqPenalty         *float64      `json:"frequency_penalty"`
	Seed                *int64        `json:"seed"`
	Stop                []string      `json:"stop"`
	StopTokenIDs        []int         `json:"stop_token_ids"`
	Logprobs            bool          `json:"logprobs"`
	TopLogprobs         *int          `json:"top_logprobs"`
	ReturnTokenIDs      bool          `json:"return_token_ids"`
	AddGenerationPrompt bool          `json:"add_generation_prompt"`
}

// fakeParams are the sampling parameters fakeSample depends on.
type fakeParams struct {
	maxTokens   int
	temperature float64
	seed        int64
	stopIDs     []int
}

const fakeVocab = 5000

// fakeSample is sample j of the fake's generation for prompt under weights:
// the token ids, their logprobs (multiples of 1/16, exact in float32) and
// the finish reason. At temperature 0 every sample is the greedy one.
func fakeSample(prompt []int, p fakeParams, j int, weights string) (ids []int, lps []float64, finish string) {
	if p.temperature == 0 {
		j = 0
	}
	h := fnv.New64a()
	fmt.Fprint(h, prompt, p.temperature, p.seed, j, weights)
	state := h.Sum64()
	finish = "length"
	for range p.maxTokens {
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
		tok := int(state % fakeVocab)
		ids = append(ids, tok)
		lps = append(lps, -float64(tok%89+1)/16)
		if slices.Contains(p.stopIDs, tok) {
			finish = "stop"
			break
		}
	}
	return ids, lps, finish
}

// fakeChatPrompt is the fake's chat template: per message a role token
// (4000 + role length) and the content's bytes.
func fakeChatPrompt(msgs []chatMessage) []int {
	var ids []int
	for _, m := range msgs {
		ids = append(ids, 4000+len(m.Role))
		for _, b := range []byte(m.Content) {
			ids = append(ids, int(b))
		}
	}
	return append(ids, 4009) // the generation prompt
}

func newFake(t *testing.T) *fakeVLLM {
	t.Helper()
	f := &fakeVLLM{t: t, base: "fake/qwen2-tiny", weights: "base", loras: map[string]string{},
		bodies: map[string]json.RawMessage{}, abort: make(chan struct{}), resumed: make(chan struct{})}
	close(f.resumed)
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve)) // listens on 127.0.0.1
	f.url = f.srv.URL
	t.Cleanup(f.close)
	return f
}

// close releases held requests and stops the server.
func (f *fakeVLLM) close() {
	f.release()
	f.srv.CloseClientConnections()
	f.srv.Close()
}

func (f *fakeVLLM) addFaults(fs ...fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, fs...)
}

// holdRequests makes generation requests wait until release.
func (f *fakeVLLM) holdRequests() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = make(chan struct{})
}

func (f *fakeVLLM) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold != nil {
		close(f.hold)
		f.hold = nil
	}
}

func (f *fakeVLLM) stats() (answered, tries, maxSeen int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answered, f.tries, f.maxSeen
}

func (f *fakeVLLM) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// vllmError writes vLLM's error body.
func vllmError(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

func (f *fakeVLLM) serve(w http.ResponseWriter, r *http.Request) {
	// vLLM's --api-key guards the /v1 routes, not /health.
	if f.apiKey != "" && strings.HasPrefix(r.URL.Path, "/v1") && r.Header.Get("Authorization") != "Bearer "+f.apiKey {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
		return
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /health":
		w.WriteHeader(http.StatusOK)
	case "GET /v1/models":
		f.serveModels(w)
	case "POST /v1/completions":
		f.serveGenerate(w, r, false)
	case "POST /v1/chat/completions":
		f.serveGenerate(w, r, true)
	case "POST /v1/load_lora_adapter", "POST /v1/unload_lora_adapter", "POST /pause", "POST /resume",
		"POST /init_weight_transfer_engine", "POST /start_weight_update", "POST /update_weights",
		"POST /finish_weight_update":
		f.serveControl(w, r)
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	}
}

func (f *fakeVLLM) serveModels(w http.ResponseWriter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.badModel {
		w.Write([]byte(`{"object": "list", "data": [`))
		return
	}
	data := []map[string]any{{"id": f.base, "object": "model", "created": 1, "owned_by": "vllm",
		"root": f.base, "parent": nil, "max_model_len": 4096, "permission": []any{}}}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range f.loras {
			if !yield(k) {
				return
			}
		}
	}) {
		data = append(data, map[string]any{"id": name, "object": "model", "created": 1, "owned_by": "vllm",
			"root": f.loras[name], "parent": f.base, "permission": []any{}})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// weightsOf is the weights label a model name samples from, or "" when the
// model is not served. Called with f.mu held.
func (f *fakeVLLM) weightsOf(model string) string {
	if model == f.base {
		return f.weights
	}
	if path, ok := f.loras[model]; ok {
		return "lora:" + path
	}
	return ""
}

func (f *fakeVLLM) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	f.mu.Lock()
	f.tries++
	f.reqIDs = append(f.reqIDs, r.Header.Get("X-Request-Id"))
	var ft fault
	if len(f.faults) > 0 {
		ft, f.faults = f.faults[0], f.faults[1:]
	}
	f.inFlight++
	f.maxSeen = max(f.maxSeen, f.inFlight)
	hold, abort, arrived := f.hold, f.abort, f.arrived
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	if arrived != nil {
		arrived <- struct{}{}
	}

	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var prompt []int
	var p fakeParams
	var model string
	var n int
	if chat {
		var req fakeChatRequest
		if err := dec.Decode(&req); err != nil {
			vllmError(w, http.StatusBadRequest, "BadRequestError", "invalid body: "+err.Error())
			return
		}
		if !req.Logprobs || req.TopLogprobs == nil || !req.ReturnTokenIDs || !req.AddGenerationPrompt || len(req.Messages) == 0 {
			vllmError(w, http.StatusBadRequest, "BadRequestError", "fake wants logprobs, top_logprobs, return_token_ids, add_generation_prompt and messages")
			return
		}
		if msg := neutral(req.TopP, req.TopK, req.MinP, req.RepPenalty, req.PresPenalty, req.FreqPenalty); msg != "" {
			vllmError(w, http.StatusBadRequest, "BadRequestError", msg)
			return
		}
		prompt = fakeChatPrompt(req.Messages)
		p = fakeParams{req.MaxCompletionTokens, req.Temperature, seedOf(req.Seed), req.StopTokenIDs}
		model, n = req.Model, req.N
		f.mu.Lock()
		f.messages = append(f.messages, req.Messages)
		f.mu.Unlock()
	} else {
		var req fakeCompletionRequest
		if err := dec.Decode(&req); err != nil {
			vllmError(w, http.StatusBadRequest, "BadRequestError", "invalid body: "+err.Error())
			return
		}
		if req.Logprobs == nil || !req.ReturnTokenIDs || len(req.Prompt) == 0 {
			vllmError(w, http.StatusBadRequest, "BadRequestError", "fake wants logprobs, return_token_ids and a prompt")
			return
		}
		if msg := neutral(req.TopP, req.TopK, req.MinP, req.RepPenalty, req.PresPenalty, req.FreqPenalty); msg != "" {
			vllmError(w, http.StatusBadRequest, "BadRequestError", msg)
			return
		}
		prompt = req.Prompt
		p = fakeParams{req.MaxTokens, req.Temperature, seedOf(req.Seed), req.StopTokenIDs}
		model, n = req.Model, req.N
	}
	if p.maxTokens <= 0 || n <= 0 || p.temperature < 0 {
		vllmError(w, http.StatusBadRequest, "BadRequestError", "max_tokens, n and temperature out of range")
		return
	}

	switch ft {
	case fault503:
		vllmError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "engine overloaded")
		return
	case fault400:
		vllmError(w, http.StatusBadRequest, "BadRequestError", "This model's maximum context length is 4096 tokens.")
		return
	case faultDrop:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case faultBadJSON:
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("<html>502 Bad Gateway</html>"))
		return
	case faultHang:
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second): // bound: the client gives up long before
		}
		return
	}

	aborted := false
	if hold != nil {
		select {
		case <-hold:
		case <-abort:
			aborted = true
		case <-r.Context().Done():
			return
		}
	}
	// A paused vLLM keeps new requests waiting until it resumes; aborted
	// ones come back at once.
	f.mu.Lock()
	resumed := f.resumed
	f.mu.Unlock()
	if !aborted {
		select {
		case <-resumed:
		case <-r.Context().Done():
			return
		}
	}

	f.mu.Lock()
	weights := f.weightsOf(model)
	f.models = append(f.models, model)
	noIDs := f.noIDs
	f.mu.Unlock()
	if weights == "" {
		vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", model))
		return
	}

	id := r.Header.Get("X-Request-Id")
	if chat {
		choices := make([]map[string]any, n)
		for j := range n {
			ids, lps, finish := fakeSample(prompt, p, j, weights)
			if aborted {
				ids, lps, finish = ids[:1], lps[:1], "abort"
			}
			content := make([]map[string]any, len(ids))
			for i := range ids {
				content[i] = map[string]any{"token": fmt.Sprintf("t%d", ids[i]), "logprob": lps[i], "bytes": []int{116}, "top_logprobs": []any{}}
			}
			ch := map[string]any{"index": j, "message": map[string]any{"role": "assistant", "content": fakeText(ids)},
				"logprobs": map[string]any{"content": content}, "finish_reason": finish, "stop_reason": nil, "token_ids": ids}
			if noIDs {
				delete(ch, "token_ids")
			}
			choices[j] = ch
		}
		resp := map[string]any{"id": "chatcmpl-" + id, "object": "chat.completion", "created": 1, "model": model,
			"choices": choices, "usage": map[string]int{"prompt_tokens": len(prompt)}, "prompt_token_ids": prompt}
		f.answer(w, ft, resp)
		return
	}
	choices := make([]map[string]any, n)
	for j := range n {
		ids, lps, finish := fakeSample(prompt, p, j, weights)
		if aborted {
			ids, lps, finish = ids[:1], lps[:1], "abort"
		}
		toks := make([]string, len(ids))
		for i := range ids {
			toks[i] = fmt.Sprintf("t%d", ids[i])
		}
		ch := map[string]any{"index": j, "text": fakeText(ids),
			"logprobs": map[string]any{"text_offset": make([]int, len(ids)), "token_logprobs": lps, "tokens": toks,
				"top_logprobs": make([]map[string]float64, len(ids))},
			"finish_reason": finish, "stop_reason": nil, "token_ids": ids, "prompt_logprobs": nil, "prompt_token_ids": prompt}
		if noIDs {
			delete(ch, "token_ids")
		}
		choices[j] = ch
	}
	// vLLM lists choices in any order; the index says which is which.
	slices.Reverse(choices)
	resp := map[string]any{"id": "cmpl-" + id, "object": "text_completion", "created": 1, "model": model,
		"choices": choices, "usage": map[string]int{"prompt_tokens": len(prompt)}}
	f.answer(w, ft, resp)
}

func (f *fakeVLLM) answer(w http.ResponseWriter, ft fault, resp any) {
	if ft == faultTruncate {
		b, _ := json.Marshal(resp)
		w.Header().Set("Content-Type", "application/json")
		w.Write(b[:len(b)/2])
		return
	}
	f.mu.Lock()
	f.answered++
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

func fakeText(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "t%d ", id)
	}
	return b.String()
}

// neutral checks what the fake insists on: every sampling parameter set
// (none left to generation_config), top_p in (0, 1], top_k -1 or ≥ 1, and
// min_p and the penalties off.
func neutral(topP float64, topK int, minP, rep, pres, freq *float64) string {
	switch {
	case minP == nil || rep == nil || pres == nil || freq == nil:
		return "fake wants min_p and the penalties set explicitly"
	case topP <= 0 || topP > 1:
		return fmt.Sprintf("top_p must be in (0, 1], got %v.", topP)
	case topK == 0 || topK < -1:
		return fmt.Sprintf("fake wants top_k -1 (off) or ≥ 1, got %d.", topK)
	case *minP != 0 || *rep != 1 || *pres != 0 || *freq != 0:
		return "fake wants min_p 0, repetition_penalty 1, presence and frequency penalties 0"
	}
	return ""
}

func seedOf(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// serveControl answers the LoRA and weight-transfer endpoints as vLLM's
// routers do, including their conflicts (start while updating, finish
// without start) and missing fields.
func (f *fakeVLLM) serveControl(w http.ResponseWriter, r *http.Request) {
	op := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		op += "?" + r.URL.RawQuery
	}
	var body map[string]json.RawMessage
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Invalid JSON format"})
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, op)
	for k, v := range body {
		f.bodies[r.URL.Path+"."+k] = v
	}
	str := func(k string) string {
		var s string
		json.Unmarshal(body[k], &s)
		return s
	}
	switch r.URL.Path {
	case "/v1/load_lora_adapter":
		name, path := str("lora_name"), str("lora_path")
		var inplace bool
		json.Unmarshal(body["load_inplace"], &inplace)
		if name == "" || path == "" {
			vllmError(w, http.StatusBadRequest, "InvalidUserInput", "Both 'lora_name' and 'lora_path' must be provided.")
			return
		}
		if _, ok := f.loras[name]; ok && !inplace {
			vllmError(w, http.StatusBadRequest, "InvalidUserInput", fmt.Sprintf("The lora adapter '%s' has already been loaded.", name))
			return
		}
		if strings.HasPrefix(path, "/missing") {
			vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("No adapter found for %s", path))
			return
		}
		f.loras[name] = path
		w.Write([]byte(fmt.Sprintf("Success: LoRA adapter '%s' added successfully.", name)))
	case "/v1/unload_lora_adapter":
		name := str("lora_name")
		if _, ok := f.loras[name]; !ok {
			vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The lora adapter '%s' cannot be found.", name))
			return
		}
		delete(f.loras, name)
		w.Write([]byte(fmt.Sprintf("Success: LoRA adapter '%s' removed successfully.", name)))
	case "/pause":
		mode := r.URL.Query().Get("mode")
		if mode != "wait" && mode != "abort" && mode != "keep" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad mode " + mode})
			return
		}
		if mode == "abort" {
			close(f.abort)
			f.abort = make(chan struct{})
		}
		if !f.paused {
			f.paused = true
			f.resumed = make(chan struct{})
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "paused"})
	case "/resume":
		if f.paused {
			f.paused = false
			close(f.resumed)
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "resumed"})
	case "/init_weight_transfer_engine":
		if body["init_info"] == nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Missing 'init_info' in request body"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"message": "Weight transfer initialized"})
	case "/start_weight_update":
		if f.updating {
			writeJSON(w, http.StatusConflict, map[string]string{"detail": "start_weight_update called while a weight update is already in progress."})
			return
		}
		f.updating = true
		writeJSON(w, http.StatusOK, map[string]string{"message": "Weight update started"})
	case "/update_weights":
		if body["update_info"] == nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Missing 'update_info' in request body"})
			return
		}
		if !f.updating {
			writeJSON(w, http.StatusConflict, map[string]string{"detail": "update_weights called without start_weight_update"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"message": "Weights updated"})
	case "/finish_weight_update":
		if !f.updating {
			writeJSON(w, http.StatusConflict, map[string]string{"detail": "finish_weight_update called without a preceding start_weight_update."})
			return
		}
		f.updating = false
		f.weights = "v" + str("weight_version")
		writeJSON(w, http.StatusOK, map[string]any{"message": "Weight update finished", "weight_gen": 1, "weight_label": ""})
	}
}

// waitArrivals waits (bounded by ctx) for n generation requests to arrive
// at the fakes, which must have been created with arrived channels via
// watchArrivals.
func waitArrivals(ctx context.Context, t *testing.T, ch chan struct{}, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("only %d of %d requests arrived: %v", i, n, ctx.Err())
		}
	}
}

// watchArrivals makes the fakes report each generation request on one
// channel.
func watchArrivals(fs ...*fakeVLLM) chan struct{} {
	ch := make(chan struct{}, 1024)
	for _, f := range fs {
		f.mu.Lock()
		f.arrived = ch
		f.mu.Unlock()
	}
	return ch
}
