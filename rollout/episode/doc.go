// Package episode runs rollout episodes over engine.Engine and
// verify.Verifier and returns their turns in the trajectory schema
// (rollout/data): single-turn, MLMT three-turn (solver, feedback policy,
// refining solver), SCoRe two-turn self-correction, and multi-turn tool use
// (a safe calculator; Python through a sandboxed executor) with tool output
// masked out of the loss. N samples of one example form a GRPO group.
//
// Prompt formats are data (Templates, Go text/template) with the reference
// formats as defaults. Bad model output (empty, garbled, huge) scores 0 with
// a note and never fails a run. The package generates and scores; it opens
// no sockets and knows nothing of actors.
package episode
