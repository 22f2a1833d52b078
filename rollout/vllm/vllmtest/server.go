// Package vllmtest is a stand-in vLLM OpenAI-compatible server for tests
// of code that drives vLLM through rollout/vllm (the recipe driver's vLLM
// engine), where a real vLLM cannot run.
//
// It owns only the HTTP surface the client uses, answered with vLLM's
// documented shapes: GET /health, GET /v1/models, POST /v1/completions
// (prompt token ids, logprobs, return_token_ids), POST /pause, /resume and
// the weight-transfer endpoints /start_weight_update, /update_weights
// ({"update_info": {"path": DIR}} — the "disk" backend the client's
// ReloadWeights uses) and /finish_weight_update. Generation is
// deterministic — token ids are a hash of the prompt, the sample index and
// the weights label (the last finished update's version) — and cannot
// learn: tests check plumbing, not learning. /v1/chat/completions and the
// LoRA endpoints are not served (404); rollout/vllm's own tests keep their
// fuller fake for those.
package vllmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options shape a Server. Zero fields take the defaults named.
type Options struct {
	// Model is the served model name (GET /v1/models); default "fake/model".
	Model string
	// Vocab bounds the token ids generated: [0, Vocab); default 5000. Set it
	// to the caller's tokenizer size so the ids decode and train.
	Vocab int
}

// Reload is one weight update a server finished: the directory
// update_weights named and the version finish_weight_update gave.
type Reload struct {
	Path    string
	Version string
}

// Server is one fake vLLM server on 127.0.0.1.
type Server struct {
	srv   *httptest.Server
	model string
	vocab int

	mu         sync.Mutex
	closed     bool
	generated  int // completion requests answered 200
	resumed    chan struct{}
	paused     bool
	updating   bool
	path       string // of the update in progress
	weights    string
	reloads    []Reload
	refuse     bool          // update_weights answers 500
	hangFinish chan struct{} // non-nil: finish_weight_update waits for it (or the caller's giving up)
}

// New starts a server; Close stops it.
func New(opts Options) *Server {
	if opts.Model == "" {
		opts.Model = "fake/model"
	}
	if opts.Vocab <= 0 {
		opts.Vocab = 5000
	}
	s := &Server{model: opts.Model, vocab: opts.Vocab, weights: "base", resumed: make(chan struct{})}
	close(s.resumed)
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the server's base URL (no /v1).
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server: later connections are refused. Safe to call twice.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if s.hangFinish != nil {
		close(s.hangFinish)
		s.hangFinish = nil
	}
	s.mu.Unlock()
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Generated is how many completion requests it answered.
func (s *Server) Generated() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generated
}

// Reloads are the weight updates it finished, in order.
func (s *Server) Reloads() []Reload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reloads)
}

// RefuseReloads makes update_weights answer 500 (a server that cannot load
// the checkpoint) while on is true.
func (s *Server) RefuseReloads(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = on
}

// HangReloads makes finish_weight_update never confirm: it answers only
// when the caller gives up (or the server closes).
func (s *Server) HangReloads() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hangFinish == nil {
		s.hangFinish = make(chan struct{})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func vllmError(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	switch r.Method + " " + r.URL.Path {
	case "GET /health":
		w.WriteHeader(http.StatusOK)
	case "GET /v1/models":
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
			"id": s.model, "object": "model", "created": 1, "owned_by": "vllm", "root": s.model,
			"parent": nil, "max_model_len": 4096, "permission": []any{}}}})
	case "POST /v1/completions":
		s.serveCompletion(w, r)
	case "POST /pause", "POST /resume", "POST /start_weight_update", "POST /update_weights", "POST /finish_weight_update":
		s.serveControl(w, r)
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	}
}

// completionRequest is the subset of vLLM's completion request the client
// sends; unknown fields are refused.
type completionRequest struct {
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

func (s *Server) serveCompletion(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var req completionRequest
	if err := dec.Decode(&req); err != nil {
		vllmError(w, http.StatusBadRequest, "BadRequestError", "invalid body: "+err.Error())
		return
	}
	switch {
	case req.Logprobs == nil || !req.ReturnTokenIDs || len(req.Prompt) == 0:
		vllmError(w, http.StatusBadRequest, "BadRequestError", "fake wants logprobs, return_token_ids and a prompt")
		return
	case req.MaxTokens <= 0 || req.N <= 0 || req.Temperature < 0:
		vllmError(w, http.StatusBadRequest, "BadRequestError", "max_tokens, n and temperature out of range")
		return
	case req.Model != s.model:
		vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	for _, id := range req.Prompt {
		if id < 0 || id >= s.vocab {
			vllmError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("prompt token id %d out of vocabulary [0, %d)", id, s.vocab))
			return
		}
	}
	// A paused vLLM holds new requests until it resumes.
	s.mu.Lock()
	resumed := s.resumed
	s.mu.Unlock()
	select {
	case <-resumed:
	case <-r.Context().Done():
		return
	}
	s.mu.Lock()
	weights := s.weights
	s.mu.Unlock()
	choices := make([]map[string]any, req.N)
	for j := range req.N {
		ids, lps, finish := s.sample(req, j, weights)
		toks := make([]string, len(ids))
		for i := range ids {
			toks[i] = fmt.Sprintf("t%d", ids[i])
		}
		choices[j] = map[string]any{"index": j, "text": strings.Join(toks, " "),
			"logprobs": map[string]any{"text_offset": make([]int, len(ids)), "token_logprobs": lps, "tokens": toks,
				"top_logprobs": make([]map[string]float64, len(ids))},
			"finish_reason": finish, "stop_reason": nil, "token_ids": ids, "prompt_logprobs": nil,
			"prompt_token_ids": req.Prompt}
	}
	s.mu.Lock()
	s.generated++
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"id": "cmpl-" + r.Header.Get("X-Request-Id"), "object": "text_completion",
		"created": 1, "model": req.Model, "choices": choices, "usage": map[string]int{"prompt_tokens": len(req.Prompt)}})
}

// sample is sample j for req under weights: ids, logprobs (multiples of
// 1/16, exact in float32) and the finish reason. Greedy (temperature 0)
// samples are all sample 0.
func (s *Server) sample(req completionRequest, j int, weights string) ([]int, []float64, string) {
	if req.Temperature == 0 {
		j = 0
	}
	seed := int64(-1)
	if req.Seed != nil {
		seed = *req.Seed
	}
	h := fnv.New64a()
	fmt.Fprint(h, req.Prompt, req.Temperature, seed, j, weights)
	state := h.Sum64() | 1
	var ids []int
	var lps []float64
	for range req.MaxTokens {
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
		tok := int(state % uint64(s.vocab))
		ids = append(ids, tok)
		lps = append(lps, -float64(tok%89+1)/16)
		if slices.Contains(req.StopTokenIDs, tok) {
			return ids, lps, "stop"
		}
	}
	return ids, lps, "length"
}

// serveControl answers pause/resume and the weight-transfer endpoints as
// vLLM's routers do, with their conflicts (start while updating, update or
// finish without start).
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Invalid JSON format"})
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/pause":
		if mode := r.URL.Query().Get("mode"); mode != "wait" && mode != "abort" && mode != "keep" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad mode " + mode})
			return
		}
		if !s.paused {
			s.paused = true
			s.resumed = make(chan struct{})
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "paused"})
	case "/resume":
		if s.paused {
			s.paused = false
			close(s.resumed)
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "resumed"})
	case "/start_weight_update":
		if s.updating {
			writeJSON(w, http.StatusConflict, map[string]string{"detail": "start_weight_update called while a weight update is already in progress."})
			return
		}
		s.updating, s.path = true, ""
		writeJSON(w, http.StatusOK, map[string]string{"message": "Weight update started"})
	case "/update_weights":
		var info struct {
			Path string `json:"path"`
		}
		if body["update_info"] == nil || json.Unmarshal(body["update_info"], &info) != nil || info.Path == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Missing 'update_info' with a 'path' in request body"})
			return
		}
		if !s.updating {
			writeJSON(w, http.StatusConflict, map[string]string{"detail": "update_weights called without start_weight_update"})
			return
		}
		if s.refuse {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"detail": "failed to load weights from " + info.Path})
			return
		}
		s.path = info.Path
		writeJSON(w, http.StatusOK, map[string]string{"message": "Weights updated"})
	case "/finish_weight_update":
		if !s.updating {
			writeJSON(w, http.StatusConflict, map[string]string{"detail": "finish_weight_update called without a preceding start_weight_update."})
			return
		}
		if hang := s.hangFinish; hang != nil {
			s.mu.Unlock()
			err := waitOrDone(r.Context(), hang)
			s.mu.Lock()
			if err != nil {
				return
			}
		}
		var version string
		_ = json.Unmarshal(body["weight_version"], &version)
		s.updating = false
		s.weights = "v" + version
		s.reloads = append(s.reloads, Reload{Path: s.path, Version: version})
		writeJSON(w, http.StatusOK, map[string]any{"message": "Weight update finished", "weight_gen": 1, "weight_label": ""})
	}
}

// waitOrDone waits for ch to close or ctx to end (bounded by a minute so a
// forgotten hang cannot wedge a test run).
func waitOrDone(ctx context.Context, ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return errors.New("vllmtest: hang bound reached")
	}
}
