package env

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
)

// Actions of Multiply.
const (
	Calculate = "calculate"
	Answer    = "answer"
)

// Info keys the built-in environments set besides "outcome": "tool" names
// the tool an action called, "tool_error" says why the call failed.
const (
	InfoOutcome   = "outcome"
	InfoTool      = "tool"
	InfoToolError = "tool_error"
)

// MultiplyRewards are Multiply's rewards per step.
type MultiplyRewards struct {
	Correct, Wrong float64 // answer: right (ends solved) or wrong (ends)
	Call           float64 // a calculate call that evaluated
	ToolError      float64 // a calculate call that did not
	Invalid        float64 // an action not offered, or a malformed parameter
}

// DefaultMultiplyRewards: 1 for the right product, 0 for a wrong one, 0
// for a calculator call, −0.2 for a failed one, −0.5 for an invalid
// action.
var DefaultMultiplyRewards = MultiplyRewards{Correct: 1, Wrong: 0, Call: 0, ToolError: -0.2, Invalid: -0.5}

// Multiply asks for the product a·b of a three-digit and a two-digit
// number, which a small model cannot work out in its head. The task is
// TaskTrain or TaskHeldOut (drawn from the seed; the splits share no
// pair) or a product written like "347 * 28". answer(value) ends the
// episode, right or wrong. With Tools, calculate(expression) evaluates an
// integer expression (+, -, *, parentheses) and shows the result; without,
// calculate is not offered (an invalid action). The step that reaches
// MaxSteps ends the episode (outcome step_limit).
type Multiply struct {
	Tools    bool
	Rewards  MultiplyRewards
	MaxSteps int

	a, b   int
	shown  string // the last calculator line; empty before a call
	called bool   // the teacher has called the calculator
	counted
}

// NewMultiply is Multiply with DefaultMultiplyRewards and a limit of 4
// steps.
func NewMultiply(tools bool) *Multiply {
	return &Multiply{Tools: tools, Rewards: DefaultMultiplyRewards, MaxSteps: 4}
}

var productRE = regexp.MustCompile(`^\s*(\d{1,6})\s*[*x×]\s*(\d{1,6})\s*$`)

// Reset implements Env.
func (m *Multiply) Reset(ctx context.Context, seed int64, task string) (Observation, error) {
	if err := ctx.Err(); err != nil {
		return Observation{}, err
	}
	if m.MaxSteps <= 0 {
		return Observation{}, fmt.Errorf("multiply: MaxSteps %d must be > 0", m.MaxSteps)
	}
	switch task {
	case TaskTrain, TaskHeldOut:
		rng := rand.New(rand.NewPCG(uint64(seed), 0x6d756c74))
		for {
			m.a, m.b = 100+rng.IntN(900), 10+rng.IntN(90)
			if inHeldOut(m.a, m.b) == (task == TaskHeldOut) {
				break
			}
		}
	default:
		p := productRE.FindStringSubmatch(task)
		if p == nil {
			return Observation{}, fmt.Errorf("multiply: task %q: not %s, %s or a product like 347 * 28", clip(task), TaskTrain, TaskHeldOut)
		}
		m.a, _ = strconv.Atoi(p[1])
		m.b, _ = strconv.Atoi(p[2])
	}
	m.shown, m.called, m.steps, m.live = "", false, 0, true
	return m.observe(""), nil
}

// Step implements Env.
func (m *Multiply) Step(ctx context.Context, a Action) (StepResult, error) {
	return m.take(ctx, m.MaxSteps, func() StepResult { return m.step(a) }, stepLimitNote(m.MaxSteps))
}

func (m *Multiply) step(a Action) StepResult {
	rw := m.Rewards
	switch {
	case a.Name == Answer:
		v, err := strconv.Atoi(strings.TrimSpace(a.Param))
		if err != nil {
			return m.invalid(fmt.Sprintf("answer needs an integer value, got %q", clip(a.Param)))
		}
		if v == m.a*m.b {
			return StepResult{Observation: Observation{Text: fmt.Sprintf("Correct: %d * %d = %d.", m.a, m.b, v)}, Reward: rw.Correct, Done: true,
				Info: map[string]string{InfoOutcome: OutcomeSolved}}
		}
		return StepResult{Observation: Observation{Text: fmt.Sprintf("Wrong: %d * %d is not %d.", m.a, m.b, v)}, Reward: rw.Wrong, Done: true,
			Info: map[string]string{InfoOutcome: OutcomeWrongAnswer}}
	case a.Name == Calculate && m.Tools:
		if a.Param == "" {
			return m.invalid("calculate needs an expression")
		}
		v, err := evalInt(a.Param)
		if err != nil {
			m.shown = "error: " + err.Error()
			return StepResult{Observation: m.observe(m.shown), Reward: rw.ToolError,
				Info: map[string]string{InfoTool: Calculate, InfoToolError: err.Error()}}
		}
		m.shown = fmt.Sprintf("%s = %d", strings.Join(strings.Fields(a.Param), ""), v)
		m.called = true
		return StepResult{Observation: m.observe(m.shown), Reward: rw.Call, Info: map[string]string{InfoTool: Calculate}}
	case a.Name == "":
		return m.invalid("no action given")
	}
	return m.invalid(fmt.Sprintf("unknown action %q", clip(a.Name)))
}

func (m *Multiply) invalid(why string) StepResult {
	return StepResult{Observation: m.observe("Invalid action: " + why + "."), Reward: m.Rewards.Invalid, Invalid: why}
}

func (m *Multiply) observe(note string) Observation {
	text := fmt.Sprintf("What is %d * %d?", m.a, m.b)
	if note != "" {
		text += " " + note
	}
	var acts []ActionSpec
	if m.Tools {
		acts = append(acts, ActionSpec{Name: Calculate, Description: "evaluate an integer expression (+ - * and parentheses)", Param: "expression"})
	}
	acts = append(acts, ActionSpec{Name: Answer, Description: "give the product and finish", Param: "value"})
	return Observation{Text: text, Actions: acts}
}

// Teach implements Teacher: with Tools, calculate the product first, then
// answer with it; without, answer.
func (m *Multiply) Teach() (Action, error) {
	if !m.live {
		return Action{}, ErrDone
	}
	if m.Tools && !m.called {
		return Action{Name: Calculate, Param: fmt.Sprintf("%d*%d", m.a, m.b)}, nil
	}
	return Action{Name: Answer, Param: fmt.Sprint(m.a * m.b)}, nil
}

func withInfo(info map[string]string, k, v string) map[string]string {
	if info == nil {
		info = map[string]string{}
	}
	info[k] = v
	return info
}
