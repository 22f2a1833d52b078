package episode

import (
	"errors"
	"fmt"
	"strings"
	"text/template"

	"github.com/rlnode/rlnode/internal/tmpl"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
)

// Templates are the prompt formats of the episode kinds, as Go
// text/template strings. They are data: recipe files override them; empty
// fields take the defaults (DefaultTemplates). The fields a template may use
// are those of TemplateData.
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

// TemplateData is what templates see.
type TemplateData struct {
	Problem  string
	Attempt  string
	Feedback string
	Output   string
	// Hint is a problem's hidden information that only the feedback
	// policy may see (data.Example.Hint).
	Hint string
}

const boxedInstruction = "Please reason step by step, and put your final answer within \\boxed{}."

// DefaultTemplates are the reference formats: Qwen2.5-Math's \boxed{}
// instruction, a teacher-style feedback prompt, a refine prompt carrying
// problem, attempt and feedback, SCoRe's self-correction instruction, and
// Qwen2.5's <tool_call>/<tool_response> tool format.
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

// ErrBadTemplate marks a template that does not parse, uses an unknown
// field, or leaves out a field it needs.
var ErrBadTemplate = errors.New("bad prompt template")

// compiled holds parsed templates.
type compiled struct {
	t map[string]*template.Template
}

// templateSpec lists each template's name and the fields it must use.
var templateSpec = []struct {
	name  string
	get   func(*Templates) *string
	needs []string
}{
	{"solver", func(t *Templates) *string { return &t.Solver }, []string{"Problem"}},
	{"feedback", func(t *Templates) *string { return &t.Feedback }, []string{"Problem", "Attempt"}},
	{"static_feedback", func(t *Templates) *string { return &t.StaticFeedback }, nil},
	{"refine", func(t *Templates) *string { return &t.Refine }, []string{"Problem", "Attempt", "Feedback"}},
	{"review", func(t *Templates) *string { return &t.Review }, nil},
	{"tool_solver", func(t *Templates) *string { return &t.ToolSolver }, []string{"Problem"}},
	{"tool_response", func(t *Templates) *string { return &t.ToolResponse }, []string{"Output"}},
}

// WithDefaults returns t with empty fields set to DefaultTemplates.
func (t Templates) WithDefaults() Templates {
	d := DefaultTemplates()
	for _, s := range templateSpec {
		if p := s.get(&t); strings.TrimSpace(*p) == "" {
			*p = *s.get(&d)
		}
	}
	return t
}

// Validate parses every template (after defaults) and renders it with
// marker values: an error names the template that does not parse, uses a
// field TemplateData lacks, or leaves out a field it needs.
func (t Templates) Validate() error {
	_, err := t.compile(false)
	return err
}

// ValidateContextFirst is Validate for a feedback policy that writes a
// context before the answer it serves (the textual actor-critic): the
// feedback and refine templates need not use .Attempt.
func (t Templates) ValidateContextFirst() error {
	_, err := t.compile(true)
	return err
}

// Prompter compiles t (after defaults) into prompts of one user message
// each, to which the engine applies its chat template; SCoRe's second
// prompt is the conversation so far (question, the solver's answer as the
// assistant's, the review instruction).
func (t Templates) Prompter() (Prompter, error) {
	return t.compile(false)
}

func (t Templates) compile(contextFirst bool) (*compiled, error) {
	t = t.WithDefaults()
	c := &compiled{t: map[string]*template.Template{}}
	probe := TemplateData{Problem: "\x00problem\x00", Attempt: "\x00attempt\x00", Feedback: "\x00feedback\x00", Output: "\x00output\x00"}
	marks := map[string]string{"Problem": probe.Problem, "Attempt": probe.Attempt, "Feedback": probe.Feedback, "Output": probe.Output}
	var errs []error
	for _, s := range templateSpec {
		tp, err := tmpl.Parse(s.name, *s.get(&t), "Problem", "Attempt", "Feedback", "Output", "Hint")
		if err != nil {
			errs = append(errs, fmt.Errorf("template %q: %w: %w", s.name, err, ErrBadTemplate))
			continue
		}
		out, err := tmpl.Execute(tp, probe, tmpl.MaxOutput)
		if err != nil {
			errs = append(errs, fmt.Errorf("template %q: %w: %w", s.name, err, ErrBadTemplate))
			continue
		}
		for _, f := range s.needs {
			if contextFirst && f == "Attempt" && (s.name == "feedback" || s.name == "refine") {
				continue
			}
			if !strings.Contains(out, marks[f]) {
				errs = append(errs, fmt.Errorf("template %q: does not use .%s: %w", s.name, f, ErrBadTemplate))
			}
		}
		c.t[s.name] = tp
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// render renders a compiled template; output past tmpl.MaxOutput is an
// error.
func (c *compiled) render(name string, d TemplateData) (string, error) {
	out, err := tmpl.Execute(c.t[name], d, tmpl.MaxOutput)
	if err != nil {
		return "", fmt.Errorf("template %q: %w", name, err)
	}
	return out, nil
}

func (c *compiled) user(name string, d TemplateData) (Prompt, error) {
	text, err := c.render(name, d)
	if err != nil {
		return Prompt{}, err
	}
	return Prompt{Messages: []tokenizer.Message{{Role: "user", Content: text}}}, nil
}

func (c *compiled) Solver(ex data.Example) (Prompt, error) {
	return c.user("solver", TemplateData{Problem: ex.Prompt})
}

func (c *compiled) Feedback(ex data.Example, attempt string) (Prompt, error) {
	return c.user("feedback", TemplateData{Problem: ex.Prompt, Attempt: attempt, Hint: ex.Hint})
}

func (c *compiled) StaticFeedback(ex data.Example, attempt string) (string, error) {
	return c.render("static_feedback", TemplateData{Problem: ex.Prompt, Attempt: attempt})
}

func (c *compiled) Refine(ex data.Example, attempt, feedback string) (Prompt, error) {
	return c.user("refine", TemplateData{Problem: ex.Prompt, Attempt: attempt, Feedback: feedback})
}

func (c *compiled) Review(ex data.Example, attempt string) (Prompt, error) {
	q, err := c.render("solver", TemplateData{Problem: ex.Prompt})
	if err != nil {
		return Prompt{}, err
	}
	review, err := c.render("review", TemplateData{Problem: ex.Prompt, Attempt: attempt})
	if err != nil {
		return Prompt{}, err
	}
	return Prompt{Messages: []tokenizer.Message{
		{Role: "user", Content: q}, {Role: "assistant", Content: attempt}, {Role: "user", Content: review},
	}}, nil
}

func (c *compiled) ToolSolver(ex data.Example) (Prompt, error) {
	return c.user("tool_solver", TemplateData{Problem: ex.Prompt})
}

func (c *compiled) ToolResponse(output string) (string, error) {
	return c.render("tool_response", TemplateData{Output: output})
}
