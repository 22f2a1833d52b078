package recipes

import "strings"

// Templates are the prompt formats of the episode kinds, as Go
// text/template strings: rollout/episode's Templates, field for field
// (train converts one into the other and checks each template against the
// fields its episode renders). Empty fields take DefaultTemplates.
type Templates struct {
	// Solver asks the solver for a first answer. Uses .Problem.
	Solver string `json:"solver,omitempty" yaml:"solver,omitempty"`
	// Feedback asks the feedback policy (MLMT turn 2) to critique an
	// attempt. Uses .Problem and .Attempt; may use .Hint.
	Feedback string `json:"feedback,omitempty" yaml:"feedback,omitempty"`
	// StaticFeedback is the feedback text used instead of a feedback policy.
	// May use .Problem and .Attempt.
	StaticFeedback string `json:"static_feedback,omitempty" yaml:"static_feedback,omitempty"`
	// Refine asks the solver (MLMT turn 3) to solve again given its attempt
	// and the feedback. Uses .Problem, .Attempt and .Feedback.
	Refine string `json:"refine,omitempty" yaml:"refine,omitempty"`
	// Review is SCoRe's fixed self-correction instruction (turn 2).
	Review string `json:"review,omitempty" yaml:"review,omitempty"`
	// ToolSolver asks for an answer with tools at hand. Uses .Problem.
	ToolSolver string `json:"tool_solver,omitempty" yaml:"tool_solver,omitempty"`
	// ToolResponse is the text spliced into the sequence after a tool call,
	// in the model's chat format. Uses .Output.
	ToolResponse string `json:"tool_response,omitempty" yaml:"tool_response,omitempty"`
}

const boxedInstruction = "Please reason step by step, and put your final answer within \\boxed{}."

// DefaultTemplates are rollout/episode's DefaultTemplates (train's tests
// check that they agree).
func DefaultTemplates() Templates {
	return Templates{
		Solver: "{{.Problem}}\n" + boxedInstruction,
		Feedback: "You are a teacher reviewing a student's solution.\n\nProblem:\n{{.Problem}}\n\n" +
			"Student's attempt:\n{{.Attempt}}\n\n" +
			"Point out the mistakes in the attempt, if any, and give a hint for fixing them. Do not state the final answer.",
		StaticFeedback: "Check every step of your solution for mistakes and correct them.",
		Refine: "{{.Problem}}\n\nYour previous attempt:\n{{.Attempt}}\n\nFeedback on it:\n{{.Feedback}}\n\n" +
			"Taking the feedback into account, solve the problem again. " + boxedInstruction,
		Review: "There might be an error in the solution above because of lack of understanding of the question. " +
			"Please correct the error, if any, and rewrite the solution. Put your final answer within \\boxed{}.",
		ToolSolver: "{{.Problem}}\n\nYou may call tools. To call one, write exactly\n" +
			`<tool_call>{"name": "calculator", "arguments": {"expression": "2*(3+4)"}}</tool_call>` + "\nor\n" +
			`<tool_call>{"name": "python", "arguments": {"code": "print(2**10)"}}</tool_call>` + "\n" +
			"and end your turn; the result comes back inside <tool_response> tags. " + boxedInstruction,
		ToolResponse: "\n<|im_start|>user\n<tool_response>\n{{.Output}}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
	}
}

// WithDefaults returns t with empty (or blank) fields set to
// DefaultTemplates.
func (t Templates) WithDefaults() Templates {
	d := DefaultTemplates()
	for _, f := range []struct{ p, d *string }{
		{&t.Solver, &d.Solver}, {&t.Feedback, &d.Feedback}, {&t.StaticFeedback, &d.StaticFeedback},
		{&t.Refine, &d.Refine}, {&t.Review, &d.Review}, {&t.ToolSolver, &d.ToolSolver}, {&t.ToolResponse, &d.ToolResponse},
	} {
		if strings.TrimSpace(*f.p) == "" {
			*f.p = *f.d
		}
	}
	return t
}
