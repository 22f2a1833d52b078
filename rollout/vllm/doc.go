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
// connection errors, timeouts, 5xx/429 answers, malformed JSON and aborted
// generations; an error names the server and the request.
//
// It also drives weight updates into the servers (LoRA adapters, vLLM's
// weight-transfer endpoints, reloads from a checkpoint path) and tracks the
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
