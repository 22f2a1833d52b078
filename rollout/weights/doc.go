// Package weights is how a policy version's weights reach an engine: the
// Update (full tensors or a LoRA adapter), its one wire payload (Encode,
// Decode), the LoRA merge and PEFT directory, and the engine host actor
// (EngineKind, Serve) that pulls a pushed payload over the bulk path and
// swaps it into its engine.
//
// It knows nothing of versions' order or of who publishes them: that is
// package weightsync, which imports this one (never the reverse).
package weights
