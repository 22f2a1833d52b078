// Package vllmtest is a stand-in vLLM OpenAI-compatible server for tests
// of code that drives vLLM (rollout/vllm's client and everything above
// it), where a real vLLM cannot run: a real HTTP server on 127.0.0.1.
//
// It answers the HTTP surface the client uses with vLLM's documented
// shapes and conflicts: GET /health, GET /v1/models, POST /v1/completions
// and /v1/chat/completions (logprobs, return_token_ids), the runtime LoRA
// endpoints and the dev-mode ones (/pause, /resume,
// /init_weight_transfer_engine, /start_weight_update, /update_weights,
// /finish_weight_update with the disk backend, or a Stock vLLM's refusal;
// /collective_rpc reload_weights, /reset_prefix_cache). Request bodies
// are decoded strictly against vLLM's field names. Generation is deterministic and cannot learn: token
// ids and logprobs are a hash of the prompt, the sampling parameters, the
// sample index and the weights served (Sample), so tests check
// plumbing and can compute what a client must hand back. Tests inject
// faults, hold requests, refuse or hang updates, and with
// Options.ReadFiles the server reads what it is told to load the way vLLM
// would.
package vllmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/ctxio"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// Options shape a Server. Zero fields take the defaults named.
type Options struct {
	// Model is the served base model's name; default "fake/model".
	Model string
	// Vocab bounds the token ids generated: [0, Vocab); default
	// DefaultVocab. When
	// set, prompt ids outside it are refused, as vLLM does; set it to the
	// caller's tokenizer size so the ids decode and train.
	Vocab int
	// APIKey, when set, guards the /v1 routes as vLLM's --api-key does.
	APIKey string
	// ReadFiles makes the server read what it is told to load, as vLLM
	// would: the safetensors checkpoint an update_weights path names, and
	// the PEFT adapter directory (adapter_config.json with r, lora_alpha,
	// target_modules and peft_type LORA; adapter_model.safetensors) a LoRA
	// load names. A directory it cannot read is refused with HTTP 400.
	// Loaded reports what it read last.
	ReadFiles bool
	// NoRuntimeLoRA is a server started without
	// VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, NoWeightTransfer one without
	// VLLM_SERVER_DEV_MODE=1: those routes (for NoWeightTransfer every
	// dev-mode route: /pause, /resume, the weight-transfer ones,
	// /collective_rpc, /reset_prefix_cache) do not exist (HTTP 404,
	// FastAPI's {"detail": "Not Found"}).
	NoRuntimeLoRA, NoWeightTransfer bool
	// Stock is vLLM's main branch started with VLLM_SERVER_DEV_MODE=1 but
	// without --weight-transfer-config (it has no "disk" backend, pull
	// request #52152, to be started with): the weight-transfer routes
	// answer 500, "Weight transfer not configured", and a checkpoint is
	// reloaded through POST /collective_rpc reload_weights. Without Stock
	// the server runs the disk backend and offers both.
	Stock bool
	// Addr is the address to listen on (HOST:PORT); default a free port
	// on 127.0.0.1. New panics when it cannot listen there; NewAt
	// returns the error.
	Addr string
	// NoReloadPath is a vLLM from before layerwise reloading, whose
	// workers' reload_weights() takes no arguments: collective_rpc
	// reload_weights with weights_path fails with HTTP 500.
	NoReloadPath bool
	// Events, when set, is told of every weight update the server
	// finished and every generation request it answers, in order (called
	// with the server's lock held: it must not call the server).
	Events func(Event)
}

// Event is a weight update a server finished or a generation request it
// answers (Options.Events).
type Event struct {
	// Op is "reload" (a checkpoint: update_weights or collective_rpc),
	// "lora" (an adapter) or "generate".
	Op string
	// Path is the folder a reload or LoRA load read; Version the version
	// finish_weight_update gave ("" for collective_rpc and LoRA loads).
	Path, Version string
	// Weights is the weights label a generation sampled from (see
	// Sample).
	Weights string
}

// Reload is one weight update a server finished: the directory
// update_weights named ("" for update infos without a path) and the
// version finish_weight_update gave; for a reload through
// collective_rpc reload_weights, the weights_path it read and no version
// (that route carries none).
type Reload struct {
	Path    string
	Version string
}

// LoRALoad is one LoRA adapter a server loaded.
type LoRALoad struct {
	Name, Path string
}

// Loaded is what a server with Options.ReadFiles read last.
type Loaded struct {
	Weights       map[string][]float32       // the last checkpoint's tensors
	Adapter       *safetensors.File          // the last adapter's tensors
	AdapterConfig map[string]json.RawMessage // its adapter_config.json
}

// Fault is how a server answers one generation request instead of
// generating (AddFaults).
type Fault int

const (
	FaultNone     Fault = iota
	Fault503            // HTTP 503 with vLLM's error body
	FaultDrop           // the connection is closed without an answer
	FaultBadJSON        // HTTP 200 with a body that is not JSON
	FaultHang           // no answer until the client gives up
	Fault400            // HTTP 400 (the request is invalid)
	FaultTruncate       // HTTP 200 with the JSON cut in half

	// Answers no sound server gives: HTTP 200, well-formed JSON.
	FaultErrorBody   // vLLM's error body ({"error": {...}}) with HTTP 200
	FaultExtraToken  // the first choice has one token more than max_tokens
	FaultOutOfVocab  // the first choice's first token id is the vocabulary size
	FaultNullLogprob // the first choice's first logprob is null
	FaultHugeLogprob // the first choice's first logprob is -1e300 (-Inf in float32)
	FaultPositive    // the first choice's first logprob is 0.5
	FaultWrongPrompt // prompt_token_ids lack the prompt's first id
	FaultHugeBody    // the answer padded with 4 MiB of text
	FaultTrickle     // headers, then a byte every 10 ms, never ending
	FaultFinishError // the first choice's finish_reason is "error" (vLLM answers 500 for it)
)

// ChatMessage is one message of a chat completion request.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Params are the sampling parameters Sample depends on.
type Params struct {
	MaxTokens    int
	Temperature  float64
	Seed         int64 // -1: none given
	StopTokenIDs []int
}

// Server is one fake vLLM server on 127.0.0.1.
type Server struct {
	srv   *httptest.Server // replaced by Restart (guarded by mu then)
	url   string
	opts  Options
	check bool // refuse prompt ids outside the vocabulary

	mu       sync.Mutex
	closed   bool
	faults   []Fault       // consumed one per generation request, in order
	hold     chan struct{} // while non-nil, generation waits for it to close
	abort    chan struct{} // closed by POST /pause?mode=abort
	arrived  chan struct{} // receives one value per generation request that arrives (if non-nil)
	inFlight int
	maxSeen  int
	answered int      // generation requests answered 200
	tries    int      // generation requests received
	reqIDs   []string // X-Request-Id of each generation request
	models   []string // model field of each generation request
	messages [][]ChatMessage
	calls    []string // control calls, "POST /pause?mode=wait", in order
	bodies   map[string]json.RawMessage
	paused   bool
	resumed  chan struct{}
	updating bool
	path     string // of the update in progress
	weights  string // label of the base weights, changed by finish_weight_update and reload_weights
	// reloadPath is where reload_weights reads without a weights_path: the
	// last one given ("" for the launch model).
	reloadPath string
	loras      map[string]string // LoRA adapter name → path
	reloads    []Reload
	loads      []LoRALoad
	loaded     Loaded
	fail       string        // control path answered HTTP 500 (out of memory)
	refuse     bool          // update_weights answers 500
	hang       chan struct{} // non-nil: finish_weight_update waits for it (or the caller's giving up)
	badModel   bool          // GET /v1/models answers malformed JSON
	noIDs      bool          // answers omit token_ids (as a server ignoring return_token_ids)
}

// New starts a server; Close stops it.
func New(opts Options) *Server {
	s, err := NewAt(opts)
	if err != nil {
		panic(err)
	}
	return s
}

// NewAt starts a server, listening on opts.Addr when set.
func NewAt(opts Options) (*Server, error) {
	check := opts.Vocab > 0
	if opts.Model == "" {
		opts.Model = "fake/model"
	}
	if opts.Vocab <= 0 {
		opts.Vocab = DefaultVocab
	}
	s := &Server{opts: opts, check: check, weights: "base", loras: map[string]string{},
		bodies: map[string]json.RawMessage{}, abort: make(chan struct{}), resumed: make(chan struct{})}
	close(s.resumed)
	if opts.Addr == "" {
		s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	} else {
		l, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			return nil, fmt.Errorf("vllmtest: listen on %s: %w", opts.Addr, err)
		}
		s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
		s.srv.Listener.Close()
		s.srv.Listener = l
		s.srv.Start()
	}
	s.url = s.srv.URL
	return s, nil
}

// URL is the server's base URL (no /v1).
func (s *Server) URL() string { return s.url }

// Model is the served base model's name.
func (s *Server) Model() string { return s.opts.Model }

// Close releases held requests and hung updates and stops the server:
// later connections are refused. Safe to call twice.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if s.hang != nil {
		close(s.hang)
		s.hang = nil
	}
	srv := s.srv
	s.mu.Unlock()
	s.Release()
	srv.CloseClientConnections()
	srv.Close()
}

// Restart is a vLLM server that exits and starts again on the same
// address: requests in flight end without an answer (their connections
// close), and it comes back with what a fresh vLLM holds — the weights it
// started with, no LoRA adapter, not paused. What it recorded (Reloads,
// Stats, ...) stays.
func (s *Server) Restart() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("vllmtest: restart of a closed server")
	}
	old := s.srv
	if s.hang != nil {
		close(s.hang)
		s.hang = nil
	}
	s.mu.Unlock()
	addr := old.Listener.Addr().String()
	old.CloseClientConnections()
	old.Close()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("vllmtest: restart on %s: %w", addr, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	srv.Listener.Close()
	srv.Listener = l
	s.mu.Lock()
	s.hold = nil
	s.weights, s.loras = "base", map[string]string{}
	s.updating, s.path, s.reloadPath = false, "", ""
	if s.paused {
		s.paused = false
		close(s.resumed)
	}
	s.srv = srv
	s.mu.Unlock()
	srv.Start()
	return nil
}

// AddFaults queues faults: each answers the next generation request.
func (s *Server) AddFaults(fs ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, fs...)
}

// HoldRequests makes generation requests wait until Release (or a pause
// with mode abort, which ends them).
func (s *Server) HoldRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = make(chan struct{})
}

// Release lets held generation requests go on.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
}

// Generated is how many generation requests it answered with HTTP 200.
func (s *Server) Generated() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered
}

// Stats are the generation requests answered with HTTP 200, those
// received, and the most ever in flight at once.
func (s *Server) Stats() (answered, tries, maxSeen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered, s.tries, s.maxSeen
}

// Calls are the control calls received ("POST /pause?mode=wait"), in order.
func (s *Server) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Body is field of the last body POSTed to control endpoint path (nil if
// none).
func (s *Server) Body(path, field string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[path+"."+field]
}

// RequestIDs are the X-Request-Id headers of the generation requests
// received, in order.
func (s *Server) RequestIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqIDs)
}

// Models are the model names the generation requests asked for, in order.
func (s *Server) Models() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.models)
}

// Messages are the chat completion requests' messages, in order.
func (s *Server) Messages() [][]ChatMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.messages)
}

// Reloads are the weight updates it finished, in order.
func (s *Server) Reloads() []Reload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reloads)
}

// LoRALoads are the LoRA adapters it loaded, in order.
func (s *Server) LoRALoads() []LoRALoad {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.loads)
}

// Loaded is what it read last (Options.ReadFiles).
func (s *Server) Loaded() Loaded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded
}

// RefuseReloads makes update_weights answer 500 (a server that cannot load
// the checkpoint) while on is true.
func (s *Server) RefuseReloads(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = on
}

// Fail makes control endpoint path (say "/v1/load_lora_adapter") answer
// HTTP 500 with vLLM's error for a CUDA out-of-memory; "" ends that.
func (s *Server) Fail(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = path
}

// HangReloads makes finish_weight_update never confirm: it answers only
// when the caller gives up (or the server closes).
func (s *Server) HangReloads() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hang == nil {
		s.hang = make(chan struct{})
	}
}

// BreakModels makes GET /v1/models answer malformed JSON.
func (s *Server) BreakModels() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.badModel = true
}

// OmitTokenIDs makes answers leave out token_ids, as a server that ignores
// return_token_ids.
func (s *Server) OmitTokenIDs() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noIDs = true
}

// WatchArrivals makes the servers report each generation request that
// arrives on the channel returned.
func WatchArrivals(servers ...*Server) chan struct{} {
	ch := make(chan struct{}, 1024)
	for _, s := range servers {
		s.mu.Lock()
		s.arrived = ch
		s.mu.Unlock()
	}
	return ch
}

// WaitArrivals waits (bounded by ctx) for n generation requests reported on
// ch (WatchArrivals).
func WaitArrivals(ctx context.Context, t testing.TB, ch chan struct{}, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("only %d of %d requests arrived: %v", i, n, ctx.Err())
		}
	}
}

// DefaultVocab is the vocabulary a server generates from unless
// Options.Vocab says otherwise.
const DefaultVocab = 5000

// Sample is sample j of a server's generation over vocab for prompt under
// the weights labelled weights ("base"; "v<version>" after an update;
// "lora:<path>" for a LoRA adapter): the token ids, their logprobs
// (multiples of 1/16, exact in float32) and the finish reason. At
// temperature 0 every sample is the greedy one.
func Sample(prompt []int, p Params, j int, weights string, vocab int) (ids []int, lps []float64, finish string) {
	if p.Temperature == 0 {
		j = 0
	}
	h := fnv.New64a()
	fmt.Fprint(h, prompt, p.Temperature, p.Seed, j, weights)
	state := h.Sum64() | 1
	for range p.MaxTokens {
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
		tok := int(state % uint64(vocab))
		ids = append(ids, tok)
		lps = append(lps, -float64(tok%89+1)/16)
		if slices.Contains(p.StopTokenIDs, tok) {
			return ids, lps, "stop"
		}
	}
	return ids, lps, "length"
}

// ChatPrompt is the server's chat template: per message a role token
// (4000 + role length) and the content's bytes, then 4009 (the generation
// prompt).
func ChatPrompt(msgs []ChatMessage) []int {
	var ids []int
	for _, m := range msgs {
		ids = append(ids, 4000+len(m.Role))
		for _, b := range []byte(m.Content) {
			ids = append(ids, int(b))
		}
	}
	return append(ids, 4009)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// vllmError writes vLLM's error body.
func vllmError(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// vLLM's --api-key guards the /v1 routes, not /health.
	if k := s.opts.APIKey; k != "" && strings.HasPrefix(r.URL.Path, "/v1") && r.Header.Get("Authorization") != "Bearer "+k {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
		return
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /health":
		w.WriteHeader(http.StatusOK)
	case "GET /v1/models":
		s.serveModels(w)
	case "POST /v1/completions":
		s.serveGenerate(w, r, false)
	case "POST /v1/chat/completions":
		s.serveGenerate(w, r, true)
	case "POST /v1/load_lora_adapter", "POST /v1/unload_lora_adapter":
		if s.opts.NoRuntimeLoRA {
			writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
			return
		}
		s.serveControl(w, r)
	case "POST /pause", "POST /resume",
		"POST /init_weight_transfer_engine", "POST /start_weight_update", "POST /update_weights",
		"POST /finish_weight_update", "POST /collective_rpc", "POST /reset_prefix_cache":
		if s.opts.NoWeightTransfer {
			writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
			return
		}
		s.serveControl(w, r)
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	}
}

func (s *Server) serveModels(w http.ResponseWriter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.badModel {
		_, _ = w.Write([]byte(`{"object": "list", "data": [`))
		return
	}
	base := s.opts.Model
	data := []map[string]any{{"id": base, "object": "model", "created": 1, "owned_by": "vllm",
		"root": base, "parent": nil, "max_model_len": 4096, "permission": []any{}}}
	names := make([]string, 0, len(s.loras))
	for k := range s.loras {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, name := range names {
		data = append(data, map[string]any{"id": name, "object": "model", "created": 1, "owned_by": "vllm",
			"root": s.loras[name], "parent": base, "permission": []any{}})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// weightsOf is the weights label a model name samples from, or "" when the
// model is not served. Called with s.mu held.
func (s *Server) weightsOf(model string) string {
	if model == s.opts.Model {
		return s.weights
	}
	if path, ok := s.loras[model]; ok {
		return "lora:" + path
	}
	return ""
}

// The request bodies as vLLM declares them (the subset the client may send).

// sampling are the sampling fields both request bodies carry.
type sampling struct {
	N            int      `json:"n"`
	Temperature  float64  `json:"temperature"`
	TopP         float64  `json:"top_p"`
	TopK         int      `json:"top_k"`
	MinP         *float64 `json:"min_p"`
	RepPenalty   *float64 `json:"repetition_penalty"`
	PresPenalty  *float64 `json:"presence_penalty"`
	FreqPenalty  *float64 `json:"frequency_penalty"`
	Seed         *int64   `json:"seed"`
	Stop         []string `json:"stop"`
	StopTokenIDs []int    `json:"stop_token_ids"`
}

type completionRequest struct {
	Model     string `json:"model"`
	Prompt    []int  `json:"prompt"`
	MaxTokens int    `json:"max_tokens"`
	sampling
	Logprobs       *int `json:"logprobs"`
	ReturnTokenIDs bool `json:"return_token_ids"`
}

type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []ChatMessage `json:"messages"`
	MaxCompletionTokens int           `json:"max_completion_tokens"`
	sampling
	Logprobs            bool `json:"logprobs"`
	TopLogprobs         *int `json:"top_logprobs"`
	ReturnTokenIDs      bool `json:"return_token_ids"`
	AddGenerationPrompt bool `json:"add_generation_prompt"`
}

// decodeGenerate reads a completion or chat request: the prompt ids, the
// sampling parameters, the model and n, or what to refuse.
func (s *Server) decodeGenerate(r *http.Request, chat bool) (prompt []int, p Params, model string, n int, refusal string) {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if chat {
		var req chatRequest
		if err := dec.Decode(&req); err != nil {
			return nil, p, "", 0, "invalid body: " + err.Error()
		}
		if !req.Logprobs || req.TopLogprobs == nil || !req.ReturnTokenIDs || !req.AddGenerationPrompt || len(req.Messages) == 0 {
			return nil, p, "", 0, "fake wants logprobs, top_logprobs, return_token_ids, add_generation_prompt and messages"
		}
		if msg := neutral(req.TopP, req.TopK, req.MinP, req.RepPenalty, req.PresPenalty, req.FreqPenalty); msg != "" {
			return nil, p, "", 0, msg
		}
		s.mu.Lock()
		s.messages = append(s.messages, req.Messages)
		s.mu.Unlock()
		return ChatPrompt(req.Messages), Params{req.MaxCompletionTokens, req.Temperature, seedOf(req.Seed), req.StopTokenIDs}, req.Model, req.N, ""
	}
	var req completionRequest
	if err := dec.Decode(&req); err != nil {
		return nil, p, "", 0, "invalid body: " + err.Error()
	}
	if req.Logprobs == nil || !req.ReturnTokenIDs || len(req.Prompt) == 0 {
		return nil, p, "", 0, "fake wants logprobs, return_token_ids and a prompt"
	}
	if msg := neutral(req.TopP, req.TopK, req.MinP, req.RepPenalty, req.PresPenalty, req.FreqPenalty); msg != "" {
		return nil, p, "", 0, msg
	}
	if s.check {
		for _, id := range req.Prompt {
			if id < 0 || id >= s.opts.Vocab {
				return nil, p, "", 0, fmt.Sprintf("prompt token id %d out of vocabulary [0, %d)", id, s.opts.Vocab)
			}
		}
	}
	return req.Prompt, Params{req.MaxTokens, req.Temperature, seedOf(req.Seed), req.StopTokenIDs}, req.Model, req.N, ""
}

func (s *Server) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	s.mu.Lock()
	s.tries++
	s.reqIDs = append(s.reqIDs, r.Header.Get("X-Request-Id"))
	var ft Fault
	if len(s.faults) > 0 {
		ft, s.faults = s.faults[0], s.faults[1:]
	}
	s.inFlight++
	s.maxSeen = max(s.maxSeen, s.inFlight)
	hold, abort, arrived := s.hold, s.abort, s.arrived
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	if arrived != nil {
		arrived <- struct{}{}
	}

	prompt, p, model, n, refusal := s.decodeGenerate(r, chat)
	if refusal == "" && (p.MaxTokens <= 0 || n <= 0 || p.Temperature < 0) {
		refusal = "max_tokens, n and temperature out of range"
	}
	if refusal != "" {
		vllmError(w, http.StatusBadRequest, "BadRequestError", refusal)
		return
	}

	switch ft {
	case Fault503:
		vllmError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", "engine overloaded")
		return
	case Fault400:
		vllmError(w, http.StatusBadRequest, "BadRequestError", "This model's maximum context length is 4096 tokens.")
		return
	case FaultDrop:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case FaultBadJSON:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("<html>502 Bad Gateway</html>"))
		return
	case FaultHang:
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
		case <-r.Context().Done():
			return
		}
		// A pause with mode abort ends the request even when Release came
		// too before it got here (select would pick either at random).
		select {
		case <-abort:
			aborted = true
		default:
		}
	}
	// A paused vLLM keeps new requests waiting until it resumes; aborted
	// ones come back at once.
	s.mu.Lock()
	resumed := s.resumed
	s.mu.Unlock()
	if !aborted {
		select {
		case <-resumed:
		case <-r.Context().Done():
			return
		}
	}

	s.mu.Lock()
	weights := s.weightsOf(model)
	s.models = append(s.models, model)
	noIDs := s.noIDs
	if weights != "" {
		s.event(Event{Op: "generate", Weights: weights})
	}
	s.mu.Unlock()
	if weights == "" {
		vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", model))
		return
	}

	id := r.Header.Get("X-Request-Id")
	choices := make([]map[string]any, n)
	for j := range n {
		ids, lps, finish := Sample(prompt, p, j, weights, s.opts.Vocab)
		if aborted {
			ids, lps, finish = ids[:1], lps[:1], "abort"
		}
		var ch map[string]any
		if chat {
			content := make([]map[string]any, len(ids))
			for i := range ids {
				content[i] = map[string]any{"token": fmt.Sprintf("t%d", ids[i]), "logprob": lps[i], "bytes": []int{116}, "top_logprobs": []any{}}
			}
			ch = map[string]any{"index": j, "message": map[string]any{"role": "assistant", "content": Text(ids)},
				"logprobs": map[string]any{"content": content}, "finish_reason": finish, "stop_reason": nil, "token_ids": ids}
		} else {
			toks := make([]string, len(ids))
			for i := range ids {
				toks[i] = fmt.Sprintf("t%d", ids[i])
			}
			ch = map[string]any{"index": j, "text": Text(ids),
				"logprobs": map[string]any{"text_offset": make([]int, len(ids)), "token_logprobs": lps, "tokens": toks,
					"top_logprobs": make([]map[string]float64, len(ids))},
				"finish_reason": finish, "stop_reason": nil, "token_ids": ids, "prompt_logprobs": nil, "prompt_token_ids": prompt}
		}
		if noIDs {
			delete(ch, "token_ids")
		}
		choices[j] = ch
	}
	corrupt(ft, choices[0], chat, s.opts.Vocab)
	if ft == FaultWrongPrompt {
		prompt = prompt[1:]
		if !chat {
			for _, ch := range choices {
				ch["prompt_token_ids"] = prompt
			}
		}
	}
	if chat {
		s.answer(w, ft, map[string]any{"id": "chatcmpl-" + id, "object": "chat.completion", "created": 1, "model": model,
			"choices": choices, "usage": map[string]int{"prompt_tokens": len(prompt)}, "prompt_token_ids": prompt})
		return
	}
	// vLLM lists choices in any order; the index says which is which.
	slices.Reverse(choices)
	s.answer(w, ft, map[string]any{"id": "cmpl-" + id, "object": "text_completion", "created": 1, "model": model,
		"choices": choices, "usage": map[string]int{"prompt_tokens": len(prompt)}})
}

func (s *Server) answer(w http.ResponseWriter, ft Fault, resp any) {
	switch ft {
	case FaultTruncate:
		b, _ := json.Marshal(resp)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b[:len(b)/2])
		return
	case FaultErrorBody:
		vllmError(w, http.StatusOK, "InternalServerError", "engine step failed")
		return
	case FaultHugeBody:
		resp.(map[string]any)["padding"] = strings.Repeat("x", 4<<20)
	case FaultTrickle:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		// Until the client hangs up (a write fails); bounded all the same.
		for range 6000 {
			if _, err := w.Write([]byte(" ")); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		return
	}
	s.mu.Lock()
	s.answered++
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

// corrupt makes choice ch (of a chat answer when chat) what fault ft says.
func corrupt(ft Fault, ch map[string]any, chat bool, vocab int) {
	ids, ok := ch["token_ids"].([]int)
	if !ok || len(ids) == 0 {
		return
	}
	setLogprob := func(v any) {
		if chat {
			ch["logprobs"].(map[string]any)["content"].([]map[string]any)[0]["logprob"] = v
			return
		}
		lps := slices.Clone(ch["logprobs"].(map[string]any)["token_logprobs"].([]float64))
		out := make([]any, len(lps))
		for i, lp := range lps {
			out[i] = lp
		}
		out[0] = v
		ch["logprobs"].(map[string]any)["token_logprobs"] = out
	}
	switch ft {
	case FaultExtraToken:
		ids = append(slices.Clone(ids), ids[0])
		ch["token_ids"] = ids
		if chat {
			lc := ch["logprobs"].(map[string]any)
			lc["content"] = append(lc["content"].([]map[string]any), lc["content"].([]map[string]any)[0])
		} else {
			lc := ch["logprobs"].(map[string]any)
			lps := lc["token_logprobs"].([]float64)
			lc["token_logprobs"] = append(slices.Clone(lps), lps[0])
		}
	case FaultOutOfVocab:
		ids = slices.Clone(ids)
		ids[0] = vocab
		ch["token_ids"] = ids
	case FaultNullLogprob:
		setLogprob(nil)
	case FaultHugeLogprob:
		setLogprob(-1e300)
	case FaultPositive:
		setLogprob(0.5)
	case FaultFinishError:
		ch["finish_reason"] = "error"
	}
}

// Text is the text a server answers for ids.
func Text(ids []int) string {
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
// routers do, including their conflicts (start while updating, update or
// finish without start) and missing fields.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	op := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		op += "?" + r.URL.RawQuery
	}
	var body map[string]json.RawMessage
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			if r.URL.Path == "/collective_rpc" {
				httpError(w, http.StatusBadRequest, "JSON decode error: "+err.Error())
				return
			}
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Invalid JSON format"})
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, op)
	for k, v := range body {
		s.bodies[r.URL.Path+"."+k] = v
	}
	if s.fail == r.URL.Path {
		vllmError(w, http.StatusInternalServerError, "InternalServerError", "CUDA error: out of memory")
		return
	}
	str := func(k string) string {
		var v string
		_ = json.Unmarshal(body[k], &v)
		return v
	}
	switch r.URL.Path {
	case "/v1/load_lora_adapter":
		name, path := str("lora_name"), str("lora_path")
		var inplace bool
		_ = json.Unmarshal(body["load_inplace"], &inplace)
		if name == "" || path == "" {
			vllmError(w, http.StatusBadRequest, "InvalidUserInput", "Both 'lora_name' and 'lora_path' must be provided.")
			return
		}
		if _, ok := s.loras[name]; ok && !inplace {
			vllmError(w, http.StatusBadRequest, "InvalidUserInput", fmt.Sprintf("The lora adapter '%s' has already been loaded.", name))
			return
		}
		if strings.HasPrefix(path, "/missing") {
			vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("No adapter found for %s", path))
			return
		}
		if s.opts.ReadFiles {
			a, cfg, err := readAdapter(path)
			if err != nil {
				vllmError(w, http.StatusBadRequest, "BadRequestError", err.Error())
				return
			}
			s.loaded.Adapter, s.loaded.AdapterConfig = a, cfg
		}
		s.loras[name] = path
		s.loads = append(s.loads, LoRALoad{Name: name, Path: path})
		s.event(Event{Op: "lora", Path: path})
		_, _ = fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", name)
	case "/v1/unload_lora_adapter":
		name := str("lora_name")
		if _, ok := s.loras[name]; !ok {
			vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The lora adapter '%s' cannot be found.", name))
			return
		}
		delete(s.loras, name)
		_, _ = fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", name)
	case "/pause":
		mode := r.URL.Query().Get("mode")
		if mode != "wait" && mode != "abort" && mode != "keep" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad mode " + mode})
			return
		}
		if mode == "abort" {
			close(s.abort)
			s.abort = make(chan struct{})
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
	case "/init_weight_transfer_engine":
		if body["init_info"] == nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Missing 'init_info' in request body"})
			return
		}
		if s.notConfigured(w, "init_weight_transfer_engine") {
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"message": "Weight transfer initialized"})
	case "/start_weight_update":
		if s.notConfigured(w, "start_weight_update") {
			return
		}
		if s.updating {
			writeJSON(w, http.StatusConflict, map[string]string{"detail": "start_weight_update called while a weight update is already in progress."})
			return
		}
		s.updating, s.path = true, ""
		writeJSON(w, http.StatusOK, map[string]string{"message": "Weight update started"})
	case "/update_weights":
		if body["update_info"] == nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Missing 'update_info' in request body"})
			return
		}
		if s.notConfigured(w, "update_weights") {
			return
		}
		if !s.updating {
			writeJSON(w, http.StatusConflict, map[string]string{"detail": "update_weights called without start_weight_update"})
			return
		}
		var info struct {
			Path string `json:"path"`
		}
		_ = json.Unmarshal(body["update_info"], &info)
		if s.refuse {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"detail": "failed to load weights from " + info.Path})
			return
		}
		if s.opts.ReadFiles {
			ws, err := readCheckpoint(info.Path)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"detail": err.Error()})
				return
			}
			s.loaded.Weights = ws
		}
		s.path = info.Path
		writeJSON(w, http.StatusOK, map[string]string{"message": "Weights updated"})
	case "/finish_weight_update":
		if s.notConfigured(w, "finish_weight_update") {
			return
		}
		if !s.updating {
			writeJSON(w, http.StatusConflict, map[string]string{"detail": "finish_weight_update called without a preceding start_weight_update."})
			return
		}
		if hang := s.hang; hang != nil {
			s.mu.Unlock()
			err := waitOrDone(r.Context(), hang)
			s.mu.Lock()
			if err != nil {
				return
			}
		}
		version := str("weight_version")
		s.updating = false
		s.weights = "v" + version
		s.reloads = append(s.reloads, Reload{Path: s.path, Version: version})
		s.event(Event{Op: "reload", Path: s.path, Version: version})
		writeJSON(w, http.StatusOK, map[string]string{"message": "Weight update finished"})
	case "/collective_rpc":
		s.collectiveRPC(w, r, body)
	case "/reset_prefix_cache":
		w.WriteHeader(http.StatusOK) // vLLM answers an empty 200
	}
}

// event tells Options.Events of e. Called with s.mu held.
func (s *Server) event(e Event) {
	if s.opts.Events != nil {
		s.opts.Events(e)
	}
}

// notConfigured answers a weight-transfer call at a Stock server as vLLM
// does when started without --weight-transfer-config: the worker's
// RuntimeError comes back through the engine's utility call as a plain
// Exception, which vLLM's catch-all handler answers 500. Called with s.mu
// held.
func (s *Server) notConfigured(w http.ResponseWriter, method string) bool {
	if !s.opts.Stock {
		return false
	}
	vllmError(w, http.StatusInternalServerError, "InternalServerError", "Call to "+method+
		" method failed: Weight transfer not configured. Please set weight_transfer_config to enable weight transfer.")
	return true
}

// collectiveRPC answers POST /collective_rpc as
// vllm/entrypoints/serve/dev/rpc/api_router.py does: 400 (FastAPI's
// HTTPException, in vLLM's error body) without a method; the method run
// on every worker (one here), its failure a 500 from vLLM's catch-all
// handler, its results {"results": [one per worker]}. Only the workers'
// reload_weights is known. Called with s.mu held.
func (s *Server) collectiveRPC(w http.ResponseWriter, r *http.Request, body map[string]json.RawMessage) {
	if body == nil {
		httpError(w, http.StatusBadRequest, "request body must be a JSON object")
		return
	}
	var method string
	if json.Unmarshal(body["method"], &method) != nil || method == "" {
		httpError(w, http.StatusBadRequest, "Missing 'method' in request body")
		return
	}
	failed := func(msg string) {
		vllmError(w, http.StatusInternalServerError, "InternalServerError", "Call to collective_rpc method failed: "+msg)
	}
	if method != "reload_weights" {
		failed(fmt.Sprintf("'Worker' object has no attribute '%s'", method))
		return
	}
	var kwargs map[string]json.RawMessage
	if raw := body["kwargs"]; raw != nil && json.Unmarshal(raw, &kwargs) != nil {
		failed("kwargs is not a dict")
		return
	}
	path := ""
	for _, k := range keysInOrder(body["kwargs"]) {
		v := kwargs[k]
		switch {
		case s.opts.NoReloadPath:
			failed(fmt.Sprintf("Worker.reload_weights() got an unexpected keyword argument '%s'", k))
			return
		case k == "weights_path":
			if json.Unmarshal(v, &path) != nil {
				failed("weights_path must be a str")
				return
			}
		case k == "is_checkpoint_format":
			var b bool
			if json.Unmarshal(v, &b) != nil || !b {
				failed("fake reloads checkpoint-format weights only")
				return
			}
		default:
			failed(fmt.Sprintf("GPUModelRunner.reload_weights() got an unexpected keyword argument '%s'", k))
			return
		}
	}
	if path == "" {
		path = s.reloadPath // the model's path, or the last weights_path
	}
	if hang := s.hang; hang != nil {
		s.mu.Unlock()
		err := waitOrDone(r.Context(), hang)
		s.mu.Lock()
		if err != nil {
			return
		}
	}
	if s.refuse {
		failed("failed to load weights from " + path)
		return
	}
	if s.opts.ReadFiles {
		ws, err := readCheckpoint(path)
		if err != nil {
			failed(err.Error())
			return
		}
		s.loaded.Weights = ws
	}
	s.reloadPath = path
	s.weights = ReloadLabel(path)
	s.reloads = append(s.reloads, Reload{Path: path})
	s.event(Event{Op: "reload", Path: path})
	writeJSON(w, http.StatusOK, map[string]any{"results": []any{nil}})
}

// keysInOrder are the keys of JSON object raw in the order written (as
// Python's keyword arguments keep them, so errors name the same first
// unexpected one).
func keysInOrder(raw json.RawMessage) []string {
	if raw == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return keys
		}
		keys = append(keys, t.(string))
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return keys
		}
	}
	return keys
}

// ReloadLabel is the weights label (see Sample) of a server that
// reloaded path through collective_rpc reload_weights.
func ReloadLabel(path string) string { return "reload:" + path }

// httpError writes what vLLM's handler for FastAPI's HTTPException
// answers: vLLM's error body, the status phrase as its type.
func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "type": http.StatusText(code), "param": nil, "code": code}})
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

// readCheckpoint reads the safetensors checkpoint in dir as vLLM's disk
// backend would.
func readCheckpoint(dir string) (map[string][]float32, error) {
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, fmt.Errorf("load weights from %s: %w", dir, err)
	}
	out := map[string][]float32{}
	for _, n := range ck.Names() {
		t, _, ok := ck.Tensor(n)
		if !ok {
			return nil, fmt.Errorf("load weights from %s: tensor %s not found", dir, n)
		}
		if out[n], err = t.Float32(); err != nil {
			return nil, fmt.Errorf("load weights from %s: tensor %s: %w", dir, n, err)
		}
	}
	return out, nil
}

// readAdapter reads a PEFT adapter directory the way vLLM's LoRA loader
// needs it.
func readAdapter(dir string) (*safetensors.File, map[string]json.RawMessage, error) {
	js, err := os.ReadFile(filepath.Join(dir, model.AdapterConfig))
	if err != nil {
		return nil, nil, fmt.Errorf("No adapter found for %s", dir)
	}
	var cfg map[string]json.RawMessage
	var ac struct {
		R       int      `json:"r"`
		Alpha   float64  `json:"lora_alpha"`
		Targets []string `json:"target_modules"`
		Peft    string   `json:"peft_type"`
	}
	if json.Unmarshal(js, &cfg) != nil || json.Unmarshal(js, &ac) != nil || ac.R <= 0 || ac.Alpha <= 0 || len(ac.Targets) == 0 || ac.Peft != "LORA" {
		return nil, nil, fmt.Errorf("%s: bad %s", dir, model.AdapterConfig)
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, model.AdapterWeights))
	if err != nil || len(f.Names()) == 0 {
		return nil, nil, fmt.Errorf("%s: bad %s (%v)", dir, model.AdapterWeights, err)
	}
	return f, cfg, nil
}

// FolderHashes is the SHA-256 (hex) of each regular file in dir, by
// name: what a test compares the folders a server loaded with.
func FolderHashes(dir string) (map[string]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		h, err := ctxio.FileSHA256(context.Background(), filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out[e.Name()] = h
	}
	return out, nil
}
