// Package rollout holds the engine interface, the vLLM client, the native
// engine and its OpenAI-compatible server, verifiers, episodes (single,
// MLMT three-turn, SCoRe, tools), datasets, Arrow trajectories and the
// rollout actor.
//
// This package itself is the rollout actor (ActorKind): it hosts an engine
// on a node, runs generation and episode jobs submitted over the runtime,
// and returns episodes as Arrow IPC bytes (rollout/data's TrajectorySchema),
// inline or through the bulk path when large. Engines and verifiers reach
// it by name (RegisterEngine, RegisterVerifier; "native", PushedNative,
// "math", "gsm8k" and "code" are built in). An actor may start from its
// model's config and tokenizer alone (ActorConfig.ModelFiles) and get its
// weights from a weight syncer when it registers, so it reads no shared
// file system. Pool spreads generation over many actors and replaces lost
// ones. The subpackages do the work: engine and verify (interfaces), native
// and vllm (engines), weights (the weight payload and engine host), episode
// (episode runners), data (datasets and trajectories), task (synthetic
// problems). Nothing here imports weightsync: it drives these through the
// WeightSync interface.
package rollout
