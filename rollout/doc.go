// Package rollout holds the engine interface, the vLLM client, the native
// engine and its OpenAI-compatible server, verifiers, episodes (single,
// MLMT three-turn, SCoRe, tools), datasets, Arrow trajectories and the
// rollout actor.
package rollout
