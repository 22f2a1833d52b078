// Package episode runs rollout episodes over engine.Engine and
// verify.Verifier and returns their turns in the trajectory schema
// (rollout/data): single-turn, MLMT three-turn (solver, feedback policy,
// refining solver), SCoRe two-turn self-correction, and multi-turn tool use
// (a safe calculator; Python through a sandboxed executor) with tool output
// masked out of the loss, and the agent episode, a policy acting in an
// environment (rollout/env) step by step. N samples of one example form a GRPO group. The
// training loop (train) and the rollout actors (rollout) both play their
// episodes here.
//
// Prompts come from a Prompter: Templates (Go text/template, chat
// messages, the reference formats as defaults) or the caller's own.
// Batch.Seeds seeds each request; a turn's Reward is what it trains on
// (SCoRe's and MLMT's shaping included). Bad model output (empty, garbled,
// huge) scores 0 with a note and never fails a run. The package generates
// and scores; it opens no sockets and knows nothing of actors.
package episode
