// Package weightsync holds the weight-sync actor: it owns the policy version
// counter and pushes each new policy version to the registered engines.
//
// The driver uses a Syncer (Start spawns its actor, named "weightsync", on
// the driver's node):
//
//	s, _ := weightsync.Start(ctx, node, 0, weightsync.Config{MaxStaleness: k})
//	s.Keep(ctx, 0, weightsync.FullUpdate(m))           // starting weights, pushed at registration
//	s.Register(ctx, engineRef)                         // an EngineKind actor, or ServeEngine's
//	s.RegisterVLLM("vllm", weightsync.VLLM{Client: c, Dir: "/shared/weights"})
//	v, _ := s.VersionFor(ctx, step)                    // gate generation for learner step `step`
//	s.Publish(ctx, step+1, weightsync.FullUpdate(m))   // or LoRAUpdate(m)
//	s.WaitVersion(ctx, min); s.Versions()
//
// Native engines: Publish encodes the update once as a safetensors payload,
// offers it on the node's bulk path with one reader per engine, and sends
// each engine host a Push; the hosts pull the one offer concurrently,
// decode it and swap it in with native.Engine.SetWeights (LoRA adapters are
// merged onto the host's base weights: W + (alpha/r)·B·A). vLLM targets
// get a checkpoint (ReloadWeights) or a PEFT adapter (LoadLoRA) written to
// a directory the servers share. Every engine reports the version it
// serves. LoadNative starts an engine on a LoRA checkpoint (base plus
// PEFT adapter) serving them merged; MergeLoRA and WriteAdapter do the
// merge and the PEFT directory for engines the caller feeds itself. An
// engine whose push fails, times out (Config.PushTimeout) or
// whose node dies is removed and named (engine and node) in the publish
// error; the others still get the version. Every wait is bounded by a
// context or a timeout.
//
// Rollout actors (package rollout) started with ActorConfig.WeightSync
// host their engine with ServeEngine beside them; rollout.Pool registers
// those hosts and removes them when their actor is lost. Register catches
// a late engine up from the last full payload and the LoRA one after it
// (the Syncer keeps both), over the bulk path: that is how rollout actors
// started from their model's config and tokenizer alone get their
// starting weights (Keep holds the first version before any
// engine registers) and how a lost actor's replacement joins at the
// version published by then, with nothing read from a shared file system.
//
// Modes: MaxStaleness 0 is synchronous (VersionFor(step) waits until every
// engine serves version step); k > 0 lets generation for step s run on
// version s-k or newer, waiting only when that bound would be broken.
// Results carry the version their engine served (engine.Result), which the
// learner's importance-sampling correction uses.
//
// This package must not open sockets of its own (the bulk path and the
// vLLM client do the talking) nor hold training state.
//
// Not done yet:
//   - Fan-out is N concurrent pulls of one offer: the publishing node
//     serves N copies. A chunk-pipelined relay (engine i forwarding to
//     engine i+1 while it receives) needs a streaming offer in actor.Bulk.
//   - A restarted EngineKind host is removed, not caught up: its owner
//     registers it again (rollout.Pool starts a replacement instead).
//     vLLM targets registered late are not caught up.
//   - vLLM's NCCL weight-transfer backend (GPU to GPU) is not driven; full
//     updates go through the "disk" backend.
package weightsync
