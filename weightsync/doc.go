// Package weightsync moves each new policy version from the learner to the
// engines that generate with it.
//
// PolicyServer is what the training loop holds per policy: generate, and
// publish a version read from a Source (the learner). Three servers
// implement it: EngineServer (a native engine in the loop's process),
// RolloutServer (rollout actors, rollout.Pool, fed by a Syncer) and
// VLLMServer (vLLM servers: a full version is reloaded from a checkpoint
// directory they share, a LoRA adapter loaded in place).
//
// Syncer is the weight-sync actor's Go API (Start spawns its actor): it
// owns a version counter and the registered engine hosts
// (rollout/weights), pushes each version to all of them at once over the
// bulk path (one encoded payload, one reader per engine), catches late
// engines up from the last full and LoRA payloads it keeps (Keep holds
// the first version before any engine registers), removes engines whose
// push fails or whose node dies, and gates generation: with MaxStaleness
// k, generation for learner step s waits until every engine serves s-k.
// RegisterVLLM adds vLLM servers as a Syncer target.
//
// Imports point one way: weightsync uses rollout (engines, pool, the
// weight payload); rollout never imports weightsync. This package opens
// no sockets of its own and holds no training state.
//
// Not done yet:
//   - Fan-out is N concurrent pulls of one offer. On one host that is one
//     shared copy every engine maps (actor.Bulk.FetchView); across hosts
//     the publishing node serves N copies, and a chunk-pipelined relay
//     needs a streaming offer in actor.Bulk.
//   - A restarted engine host is removed, not caught up: its owner
//     registers it again (rollout.Pool starts a replacement instead).
//     vLLM targets registered late are not caught up.
//   - vLLM's NCCL weight-transfer backend (GPU to GPU) is not driven; full
//     updates are reloaded from a checkpoint directory (the "disk" backend,
//     or collective_rpc reload_weights on a stock vLLM).
package weightsync
