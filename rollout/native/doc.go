// Package native is the embedded inference engine: it generates in process
// with the learner's own model (learner/model, on learner/cpu or any other
// learner/backend: the KV caches live in backend memory), so a rollout
// needs no inference server, and its log probabilities are computed by the
// same network the learner trains.
//
// It owns prefill and decode with per-sequence KV caches, continuous
// batching (a scheduler goroutine admits new sequences into the running
// batch between decode steps and retires finished ones), sampling
// (temperature, top-p, top-k, per-request seeds, stop strings and ids, EOS,
// max tokens), swapping in new policy weights between steps, and an
// OpenAI-compatible HTTP handler (Server) over it, which `rlnode serve`
// runs, bounded in what clients can make it hold (Limits). It implements
// engine.Engine.
//
// It does not train, hold optimizer state or talk to other nodes; weights
// arrive through SetWeights from whoever owns them.
//
// Not done yet: running it on a GPU needs the CUDA backend (issue 7) to
// implement learner/backend's KV-cache ops; each sequence's cache is its
// own contiguous tensors (no paging, and a prompt's samples copy its
// prefill rather than share it).
package native
