// Package vllm is the client of one or many vLLM OpenAI-compatible servers;
// its Client implements engine.Engine.
//
// It owns the HTTP conversation with vLLM and nothing else: requests go to
// /v1/completions (prompt token ids) or /v1/chat/completions (messages) with
// logprobs and vLLM's return_token_ids, so the token ids and logprobs in a
// Result are exactly the server's — the client never tokenizes. Requests are
// spread over the servers by least outstanding requests, at most
// Config.MaxInFlight at a time per server, each attempt bounded by
// Config.RequestTimeout, and retried with jittered exponential backoff on
// connection errors, timeouts, 5xx/429 answers, malformed JSON, aborted
// generations and answers no sound server gives (an error body with HTTP
// 200, more tokens than max_tokens, token ids outside Config.VocabSize, a
// completion's prompt ids other than those sent, logprobs that are null,
// not finite or above 0, a body longer than the request can produce); an
// error names the server and the request.
//
// A vLLM that restarts serves the weights it started with. A server whose
// connection breaks under a request (or that no longer serves the adapter
// requests use) is therefore lost: it gets no requests until a weight
// update reaches it again (ErrServerLost). When every server is lost the
// client gives them the last weights again (the last reload, then the
// adapter) before sending more. Servers rlnode launched (launch.go) may
// move: with Config.Locate each update first finds every server, follows
// one to its new URL or process (lost until the update reaches it), and
// leaves one not found out of the update and of requests; with
// Config.Stage a server whose node does not see the run folder reads each
// folder from a copy on its node.
//
// It also drives weight updates into the servers (LoRA adapters, vLLM's
// weight-transfer endpoints, reloads from a checkpoint directory by
// whichever route each server offers: the disk weight-transfer backend or
// collective_rpc reload_weights) and tracks the
// weight version each server serves, so every Result carries the version
// that produced it. Dispatch is paused around every update: no sample spans
// two weight versions. It does not decide when to update or move tensors:
// the weight-sync actor does that and calls these methods.
//
// Logprob semantics: engine.Sample.LogProbs are log-probabilities under
// softmax(logits/T). vLLM returns, by default (--logprobs-mode
// raw_logprobs), log-probabilities of the raw logits, which is the same thing
// at temperature 1 — the usual RL rollout setting. At other temperatures run
// the server with --logprobs-mode processed_logprobs.
package vllm
