package native

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/internal/ratelog"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
)

// maxTopLogProbs is the most alternatives a request may ask for per token,
// as OpenAI allows.
const maxTopLogProbs = 20

// Server is an OpenAI-compatible HTTP handler over an Engine:
// POST /v1/completions and /v1/chat/completions (with SSE streaming,
// logprobs and vLLM's return_token_ids), GET /v1/models, /v1/models/{id}
// and /health. Log probabilities are those of engine.Sample: under the
// sampling distribution softmax(logits/T), before top-k/top-p. What
// clients can make it hold is bounded by its Limits.
type Server struct {
	e    *Engine
	name string
	lim  Limits
	adm  *admission
	mux  *http.ServeMux
	log  *slog.Logger
	warn ratelog.Limiter // refusals for the server's bounds
}

// NewServer serves e under the model name name within lim.
func NewServer(e *Engine, name string, lim Limits, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lim = lim.withDefaults(e)
	s := &Server{e: e, name: name, lim: lim, adm: newAdmission(lim), mux: http.NewServeMux(), log: log}
	route := func(method, path string, h http.HandlerFunc) {
		s.mux.HandleFunc(method+" "+path, h)
		// Any other method on the path (GET also answers HEAD).
		allow := method
		if method == "GET" {
			allow += ", HEAD"
		}
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, &apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
				message: fmt.Sprintf("%s %s: method not allowed (use %s)", r.Method, r.URL.Path, method)})
		})
	}
	route("POST", "/v1/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, false) })
	route("POST", "/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, true) })
	route("GET", "/v1/models", s.models)
	route("GET", "/v1/models/{id}", s.model)
	route("GET", "/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: 404, typ: "invalid_request_error", message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// HTTPServer is an http.Server for s with the timeouts of its Limits.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{Handler: s, ReadHeaderTimeout: s.lim.ReadTimeout, ReadTimeout: s.lim.ReadTimeout,
		IdleTimeout: s.lim.IdleTimeout}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func errorBody(e *apiError) map[string]any {
	var param, code any
	if e.param != "" {
		param = e.param
	}
	if e.code != "" {
		code = e.code
	}
	return map[string]any{"error": map[string]any{"message": e.message, "type": e.typ, "param": param, "code": code}}
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.status, errorBody(e))
}

func (s *Server) modelCard() map[string]any {
	return map[string]any{"id": s.name, "object": "model", "created": 0, "owned_by": "rlnode",
		"max_model_len": s.e.Model().MaxPositions}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"object": "list", "data": []any{s.modelCard()}})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	if id := r.PathValue("id"); id != s.name {
		writeError(w, s.unknownModel(id))
		return
	}
	writeJSON(w, 200, s.modelCard())
}

func (s *Server) unknownModel(name string) *apiError {
	return &apiError{status: 404, typ: "invalid_request_error", param: "model", code: "model_not_found",
		message: fmt.Sprintf("the model %q does not exist; this server serves %q", name, s.name)}
}

// call is one parsed generation request: one engine request per prompt.
type call struct {
	chat          bool
	reqs          []engine.Request
	n             int
	logprobs      bool
	top           int
	stream        bool
	includeUsage  bool
	returnTokenID bool
	id            string
	created       int64
	tokens        int        // prompts plus n × max_tokens per prompt
	tools         *chatTools // chat: the tools the model may call; nil: none
}

func (s *Server) parse(data []byte, chat bool) (*call, *apiError) {
	b, aerr := parseBody(data)
	if aerr != nil {
		return nil, aerr
	}
	name, aerr := b.str("model", s.name)
	if aerr != nil {
		return nil, aerr
	}
	if name != s.name {
		return nil, s.unknownModel(name)
	}
	c := &call{chat: chat, created: time.Now().Unix()}
	cfg := s.e.Model()
	var p engine.SamplingParams
	var errs []*apiError
	check := func(e *apiError) {
		if e != nil {
			errs = append(errs, e)
		}
	}
	var e *apiError
	p.N, e = b.integer("n", 1, 1, 1<<20)
	check(e)
	p.Temperature, e = b.number("temperature", 1, 0, 100)
	check(e)
	p.TopP, e = b.number("top_p", 1, 0, 1)
	check(e)
	if b.has("top_p") && p.TopP == 0 {
		check(badField("top_p", "must be in (0, 1]"))
	}
	p.TopK, e = b.integer("top_k", 0, -1, 1<<30)
	check(e)
	if p.TopK == -1 {
		p.TopK = 0
	}
	p.Stop, e = b.stops()
	check(e)
	if b.has("stop_token_ids") {
		check(b.decode("stop_token_ids", "a list of token ids", &p.StopTokenIDs))
		if len(p.StopTokenIDs) > engine.MaxStopTokenIDs {
			check(badField("stop_token_ids", "%d stop token ids, more than the %d allowed", len(p.StopTokenIDs), engine.MaxStopTokenIDs))
		}
	}
	if b.has("seed") {
		var seed int64
		check(b.decode("seed", "an integer", &seed))
		p.Seed = &seed
	}
	c.stream, e = b.boolean("stream", false)
	check(e)
	if b.has("stream_options") {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		check(b.decode("stream_options", "an object {include_usage}", &so))
		c.includeUsage = so.IncludeUsage
	}
	c.returnTokenID, e = b.boolean("return_token_ids", false)
	check(e)
	for _, f := range []string{"presence_penalty", "frequency_penalty"} {
		if v, e := b.number(f, 0, -2, 2); e != nil || v != 0 {
			check(badField(f, "not supported by the native engine (only 0)"))
		}
	}
	if v, e := b.number("repetition_penalty", 1, 0, 100); e != nil || v != 1 {
		check(badField("repetition_penalty", "not supported by the native engine (only 1)"))
	}
	if bo, e := b.integer("best_of", p.N, 1, 1<<20); e != nil || bo != p.N {
		check(badField("best_of", "not supported by the native engine (only equal to n)"))
	}
	if !chat && (b.has("tools") || b.has("tool_choice")) {
		check(badField("tools", "only for /v1/chat/completions"))
	}
	defaultMax := 16
	var prompts [][]int
	if chat {
		c.id = "chatcmpl-" + randomID()
		msgs, e := b.messages()
		check(e)
		if e == nil {
			c.tools, e = b.tools()
			check(e)
		}
		if e == nil && c.tools != nil {
			msgs = withTools(msgs, c.tools)
		}
		if e == nil {
			ids, ok := encodeChat(s.e.Tokenizer(), msgs, cfg.MaxPositions-1)
			if !ok {
				check(tooLong("messages", cfg.MaxPositions))
			} else {
				prompts = [][]int{ids}
				defaultMax = max(1, cfg.MaxPositions-len(ids))
			}
		}
		c.logprobs, e = b.boolean("logprobs", false)
		check(e)
		c.top, e = b.integer("top_logprobs", 0, 0, maxTopLogProbs)
		check(e)
		if c.top > 0 && !c.logprobs {
			check(badField("top_logprobs", "needs logprobs: true"))
		}
		if b.has("max_completion_tokens") {
			p.MaxTokens, e = b.integer("max_completion_tokens", 0, 1, cfg.MaxPositions)
			check(e)
		} else {
			p.MaxTokens, e = b.integer("max_tokens", defaultMax, 1, cfg.MaxPositions)
			check(e)
		}
	} else {
		c.id = "cmpl-" + randomID()
		prompts, e = b.prompts(s.e.Tokenizer(), cfg.VocabSize, cfg.MaxPositions, s.lim.MaxQueuedTokens)
		check(e)
		if b.has("logprobs") {
			c.logprobs = true
			c.top, e = b.integer("logprobs", 0, 0, maxTopLogProbs)
			check(e)
		}
		if echo, e := b.boolean("echo", false); e != nil || echo {
			check(badField("echo", "not supported by the native engine"))
		}
		if b.has("suffix") {
			check(badField("suffix", "not supported by the native engine"))
		}
		p.MaxTokens, e = b.integer("max_tokens", defaultMax, 1, cfg.MaxPositions)
		check(e)
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	c.n = p.N
	for i, pr := range prompts {
		c.reqs = append(c.reqs, engine.Request{ID: fmt.Sprintf("%s-%d", c.id, i), Prompt: pr, Params: p})
		c.tokens += len(pr) + p.N*p.MaxTokens
	}
	return c, nil
}

// encodeChat is EncodeLimit of the chat template of msgs, refusing from the
// messages' length alone, before building the template, where it can.
func encodeChat(tok *tokenizer.Tokenizer, msgs []tokenizer.Message, limit int) ([]int, bool) {
	n, k := 0, tok.MaxBytesPerToken()
	for _, m := range msgs {
		n += len(m.Content)
	}
	if (n+k-1)/k > limit {
		return nil, false
	}
	return tok.EncodeLimit(tokenizer.ChatTemplate(msgs, true), limit)
}

func randomID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// engineError maps an engine error to an HTTP answer.
func engineError(err error) *apiError {
	switch {
	case errors.Is(err, engine.ErrBadRequest):
		msg := err.Error()
		if i := strings.Index(msg, engine.ErrBadRequest.Error()+": "); i >= 0 {
			msg = msg[i+len(engine.ErrBadRequest.Error())+2:]
		}
		return &apiError{status: 400, typ: "invalid_request_error", message: msg}
	case errors.Is(err, ErrClosed):
		return &apiError{status: 503, typ: "server_error", message: err.Error()}
	default:
		return &apiError{status: 500, typ: "server_error", message: err.Error()}
	}
}

// choice gathers one choice's tokens as they stream in.
type choice struct {
	index    int
	ids      []int
	logps    []float32
	tops     [][]TokenLogProb
	text     strings.Builder
	finish   string
	prompt   []int
	startRow bool         // chat: the role delta is sent
	split    toolSplitter // chat with tools, streamed
}

// refuse answers a request refused for one of the server's bounds, and
// logs whom (rate-limited: the refused may be a flood).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, aerr *apiError) {
	s.warn.Warn(s.log, "refusing a request", "peer", r.RemoteAddr, "path", r.URL.Path, "status", aerr.status, "why", aerr.message)
	writeError(w, aerr)
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	if aerr := s.adm.enter(); aerr != nil {
		s.refuse(w, r, aerr)
		return
	}
	defer s.adm.leave()
	data, done, aerr := s.adm.readBody(w, r)
	switch {
	case aerr != nil && (aerr.status == http.StatusRequestEntityTooLarge || aerr.status == http.StatusRequestTimeout):
		s.refuse(w, r, aerr)
		return
	case aerr != nil:
		writeError(w, aerr)
		return
	case data == nil:
		return
	}
	c, aerr := s.parse(data, chat)
	done()
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if aerr := s.adm.reserve(c.tokens); aerr != nil {
		s.refuse(w, r, aerr)
		return
	}
	defer s.adm.release(c.tokens)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	streams := make([]*Stream, len(c.reqs))
	for i, req := range c.reqs {
		st, err := s.e.Stream(ctx, req, StreamOptions{TopLogProbs: c.top})
		if err != nil {
			writeError(w, engineError(err))
			return
		}
		streams[i] = st
	}
	// One reader per prompt feeds a single writer.
	type item struct {
		prompt int
		ev     Event
		err    error // io.EOF at the end of a prompt
	}
	items := make(chan item, 64)
	var wg sync.WaitGroup
	for i, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ev, err := st.Next(ctx)
				select {
				case items <- item{i, ev, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	defer wg.Wait()
	defer cancel()

	choices := make([]*choice, len(streams)*c.n)
	for i := range choices {
		choices[i] = &choice{index: i, prompt: streams[i/c.n].PromptTokenIDs()}
	}
	var sse *sseWriter
	if c.stream {
		sse = newSSE(w, s.lim.WriteTimeout)
	}
	for open := len(streams); open > 0; {
		it := <-items
		if it.err == io.EOF {
			open--
			continue
		}
		if it.err != nil {
			if ctx.Err() != nil && r.Context().Err() != nil {
				return // the client left
			}
			s.log.Warn("generation failed", "id", c.id, "err", it.err)
			if sse != nil {
				sse.send(errorBody(engineError(it.err)))
				return
			}
			writeError(w, engineError(it.err))
			return
		}
		ch := choices[it.prompt*c.n+it.ev.Sample]
		ch.ids = append(ch.ids, it.ev.TokenID)
		ch.logps = append(ch.logps, it.ev.LogProb)
		ch.tops = append(ch.tops, it.ev.TopLogProbs)
		ch.text.WriteString(it.ev.Text)
		ch.finish = it.ev.FinishReason
		if sse != nil {
			if !sse.send(s.chunk(c, ch, it.ev)) {
				return
			}
			if tail := s.toolTail(c, ch, it.ev); tail != nil && !sse.send(tail) {
				return
			}
		}
	}
	usage := s.usage(streams, choices)
	if sse != nil {
		if c.includeUsage {
			sse.send(map[string]any{"id": c.id, "object": s.object(c, true), "created": c.created, "model": s.name,
				"choices": []any{}, "usage": usage})
		}
		sse.done()
		return
	}
	out := make([]any, len(choices))
	for i, ch := range choices {
		out[i] = s.finalChoice(c, ch)
	}
	resp := map[string]any{"id": c.id, "object": s.object(c, false), "created": c.created, "model": s.name,
		"choices": out, "usage": usage}
	if c.chat && c.returnTokenID {
		resp["prompt_token_ids"] = choices[0].prompt
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.lim.WriteTimeout))
	writeJSON(w, 200, resp)
}

func (s *Server) object(c *call, chunk bool) string {
	switch {
	case c.chat && chunk:
		return "chat.completion.chunk"
	case c.chat:
		return "chat.completion"
	default:
		return "text_completion"
	}
}

func (s *Server) usage(streams []*Stream, choices []*choice) map[string]int {
	p, g := 0, 0
	for _, st := range streams {
		p += len(st.PromptTokenIDs())
	}
	for _, ch := range choices {
		g += len(ch.ids)
	}
	return map[string]int{"prompt_tokens": p, "completion_tokens": g, "total_tokens": p + g}
}

func (s *Server) tokenText(id int) string {
	return string(s.e.Tokenizer().DecodeBytes([]int{id}))
}

func tokenBytes(t string) []int {
	out := make([]int, len(t))
	for i := 0; i < len(t); i++ {
		out[i] = int(t[i])
	}
	return out
}

// chatLogprobs is the chat "logprobs" object for tokens [from, to).
func (s *Server) chatLogprobs(ch *choice, from, to int) map[string]any {
	content := make([]any, 0, to-from)
	for k := from; k < to; k++ {
		t := s.tokenText(ch.ids[k])
		tops := make([]any, 0, len(ch.tops[k]))
		for _, a := range ch.tops[k] {
			at := s.tokenText(a.TokenID)
			tops = append(tops, map[string]any{"token": at, "logprob": a.LogProb, "bytes": tokenBytes(at)})
		}
		content = append(content, map[string]any{"token": t, "logprob": ch.logps[k], "bytes": tokenBytes(t), "top_logprobs": tops})
	}
	return map[string]any{"content": content}
}

// completionLogprobs is the legacy completions "logprobs" object for
// tokens [from, to); offset is the text length before token from.
func (s *Server) completionLogprobs(ch *choice, from, to, offset int) map[string]any {
	tokens, lps, offs, tops := []string{}, []float32{}, []int{}, []any{}
	for k := from; k < to; k++ {
		t := s.tokenText(ch.ids[k])
		tokens = append(tokens, t)
		lps = append(lps, ch.logps[k])
		offs = append(offs, offset)
		offset += len(t)
		m := map[string]float32{}
		for _, a := range ch.tops[k] {
			m[s.tokenText(a.TokenID)] = a.LogProb
		}
		tops = append(tops, m)
	}
	return map[string]any{"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offs}
}

func (s *Server) finalChoice(c *call, ch *choice) map[string]any {
	out := map[string]any{"index": ch.index, "finish_reason": ch.finish, "logprobs": nil}
	if c.chat {
		msg := map[string]any{"role": "assistant", "content": ch.text.String()}
		if c.tools != nil {
			content, calls := parseToolCalls(ch.text.String(), c.tools.names)
			if len(calls) > 0 {
				msg["content"] = nil
				if strings.TrimSpace(content) != "" {
					msg["content"] = content
				}
				msg["tool_calls"] = openAIToolCalls(calls, false)
				if ch.finish == "stop" {
					out["finish_reason"] = "tool_calls"
				}
			}
		}
		out["message"] = msg
		if c.logprobs {
			out["logprobs"] = s.chatLogprobs(ch, 0, len(ch.ids))
		}
	} else {
		out["text"] = ch.text.String()
		if c.logprobs {
			out["logprobs"] = s.completionLogprobs(ch, 0, len(ch.ids), 0)
		}
		if c.returnTokenID {
			out["prompt_token_ids"] = ch.prompt
		}
	}
	if c.returnTokenID {
		out["token_ids"] = ch.ids
	}
	return out
}

// chunk is the streamed chunk for the event just added to ch.
func (s *Server) chunk(c *call, ch *choice, ev Event) map[string]any {
	k := len(ch.ids) - 1
	var finish any
	if ev.FinishReason != "" {
		finish = ev.FinishReason
	}
	cc := map[string]any{"index": ch.index, "finish_reason": finish, "logprobs": nil}
	if c.chat {
		delta := map[string]any{"content": ev.Text}
		if c.tools != nil {
			delta["content"] = ch.split.add(ev.Text)
			finish = nil // toolTail ends the choice
		}
		if !ch.startRow {
			delta["role"] = "assistant"
			ch.startRow = true
		}
		cc["delta"] = delta
		if c.logprobs {
			cc["logprobs"] = s.chatLogprobs(ch, k, k+1)
		}
	} else {
		cc["text"] = ev.Text
		if c.logprobs {
			cc["logprobs"] = s.completionLogprobs(ch, k, k+1, ch.text.Len()-len(ev.Text))
		}
		if c.returnTokenID && k == 0 {
			cc["prompt_token_ids"] = ch.prompt
		}
	}
	if c.returnTokenID {
		cc["token_ids"] = []int{ev.TokenID}
	}
	out := map[string]any{"id": c.id, "object": s.object(c, true), "created": c.created, "model": s.name,
		"choices": []any{cc}}
	if c.chat && c.returnTokenID && k == 0 {
		out["prompt_token_ids"] = ch.prompt
	}
	return out
}

// toolTail is, for a streamed chat with tools whose choice ch has just
// finished, the chunk that ends it: the tool calls (finish_reason
// tool_calls) or the content held back.
func (s *Server) toolTail(c *call, ch *choice, ev Event) map[string]any {
	if !c.chat || c.tools == nil || ev.FinishReason == "" {
		return nil
	}
	rest, calls := ch.split.finish(c.tools.names)
	delta := map[string]any{}
	finish := ev.FinishReason
	if len(calls) > 0 {
		delta["tool_calls"] = openAIToolCalls(calls, true)
		if finish == "stop" {
			finish = "tool_calls"
		}
	} else {
		delta["content"] = rest
	}
	return map[string]any{"id": c.id, "object": s.object(c, true), "created": c.created, "model": s.name,
		"choices": []any{map[string]any{"index": ch.index, "delta": delta, "finish_reason": finish, "logprobs": nil}}}
}

// sseWriter writes server-sent events, each within a write timeout.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	err     error
}

func newSSE(w http.ResponseWriter, timeout time.Duration) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	s := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
	s.rc.SetWriteDeadline(time.Now().Add(timeout))
	w.WriteHeader(200)
	return s
}

// send writes one "data: {json}" event and reports whether the client is
// still there.
func (s *sseWriter) send(v any) bool {
	if s.err != nil {
		return false
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.err = err
		return false
	}
	s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", b); err != nil {
		s.err = err
		return false
	}
	s.err = s.rc.Flush()
	return s.err == nil
}

func (s *sseWriter) done() {
	if s.err == nil {
		s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
		fmt.Fprint(s.w, "data: [DONE]\n\n")
		s.rc.Flush()
	}
}
