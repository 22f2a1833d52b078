// Package verify scores model answers: math (\boxed{}, "The final answer is",
// equivalence after normalisation), GSM8K, and code run against assert
// tests in a sandboxed process. Verifiers are pure with respect to the
// runtime (no actors); the code verifier owns its sandbox processes.
// ScoreJSONL scores a file of responses (`rlnode verify`).
package verify

import "context"

// Reference is what an answer is checked against.
type Reference struct {
	Answer string   `json:"answer,omitempty"` // math and GSM8K
	Tests  []string `json:"tests,omitempty"`  // code: Python assert statements
	Setup  string   `json:"setup,omitempty"`  // code: run before the tests
}

// Result is a verifier's verdict: a reward in [0, 1], and a note when the
// answer could not be scored normally (no answer found, timeout, ...).
type Result struct {
	Reward float64 `json:"reward"`
	Error  string  `json:"error,omitempty"`
}

// Verifier scores one response. It never panics and never returns a
// reward outside [0, 1]; an empty, garbled or huge response scores 0 with
// an Error note. Implementations must be safe for concurrent use.
type Verifier interface {
	Verify(ctx context.Context, response string, ref Reference) Result
}
