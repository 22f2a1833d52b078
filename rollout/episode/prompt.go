package episode

import (
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
)

// Prompt is the prompt of one request: Messages, to which the engine
// applies its chat template, or (Messages nil) Text, which the policy's
// Tokenizer encodes as it is: the text carries the model's format.
type Prompt struct {
	Text     string
	Messages []tokenizer.Message
}

// Prompter writes the prompts of episode turns from an example and what
// earlier turns produced; attempts and feedback arrive quoted (Limits).
// Templates.Prompter is the chat-message one; a caller with formats of
// its own implements it. Implementations must be safe for concurrent use.
type Prompter interface {
	// Solver is the solver's first prompt.
	Solver(ex data.Example) (Prompt, error)
	// Feedback is MLMT's feedback policy's prompt on an attempt; the only
	// prompt that may show ex.Hint.
	Feedback(ex data.Example, attempt string) (Prompt, error)
	// StaticFeedback is MLMT's feedback text without a feedback policy.
	StaticFeedback(ex data.Example, attempt string) (string, error)
	// Refine is MLMT's final prompt: the attempt and its feedback.
	Refine(ex data.Example, attempt, feedback string) (Prompt, error)
	// Review is SCoRe's second prompt, after the solver's first answer.
	Review(ex data.Example, attempt string) (Prompt, error)
	// ToolSolver is the tool episode's first prompt.
	ToolSolver(ex data.Example) (Prompt, error)
	// ToolResponse is the text spliced into the sequence after a tool
	// call, in the model's format.
	ToolResponse(output string) (string, error)
}
