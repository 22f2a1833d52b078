// Package env holds environments that a policy acts in: Env (reset to a
// task, then step with one of the offered actions, for an observation and
// a reward), the action text format policies write (ParseAction), Checked
// (the contract enforced around any Env) and the built-in environments
// (Equations). It knows nothing of engines, prompts or training; the
// agent episode in rollout/episode plays policies against it.
package env
