// Package env holds environments that a policy acts in: Env (reset to a
// task, then step with one of the offered actions, for an observation and
// a reward), the action text format policies write (ParseAction), Checked
// (the contract enforced around any Env), the built-in environments
// (Equations; Multiply with and without its calculator; Guess, the
// higher/lower game; New makes them by name, each a Teacher),
// environments served over HTTP in OpenEnv's protocol (HTTP) and Open,
// which makes any of them from a Spec. It knows nothing of engines,
// prompts or training; the agent episode in rollout/episode plays
// policies against it.
package env
