package env

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/rlnode/rlnode/rollout/task"
)

// Actions of Equations, in the order that solves an equation.
const (
	IdentifyOperation = "identify_operation"
	SubtractTerms     = "subtract_terms"
	DivideTerms       = "divide_terms"
	StateAnswer       = "state_answer"
)

// Tasks of Equations besides an explicit equation.
const (
	TaskTrain   = "train"
	TaskHeldOut = "heldout"
)

// Outcomes of an Equations episode, in StepResult.Info["outcome"] when
// Done.
const (
	OutcomeSolved      = "solved"
	OutcomeWrongAnswer = "wrong_answer"
	OutcomeStepLimit   = "step_limit"
)

// EquationRewards are Equations' rewards per step.
type EquationRewards struct {
	Identify, Subtract, Divide, Answer float64 // each step of the solution, in order
	WrongAnswer                        float64 // state_answer with a wrong value (ends the episode)
	OutOfOrder                         float64 // an offered action that does not apply now
	Invalid                            float64 // an action not offered, or a malformed parameter
}

// DefaultEquationRewards: 1.5, 2, 2, 3 for the solution's steps (8.5 in
// all), −1 for a wrong answer or an invalid action, −0.5 for a step out of
// order.
var DefaultEquationRewards = EquationRewards{
	Identify: 1.5, Subtract: 2, Divide: 2, Answer: 3,
	WrongAnswer: -1, OutOfOrder: -0.5, Invalid: -1,
}

// Equations is step-by-step solving of a·x + b = c with an integer x.
// The task is TaskTrain or TaskHeldOut (an equation drawn from the seed,
// from that split; the splits share no equation), or an equation written
// like "3x + 5 = 14" or "-2x - 4 = 6".
//
// The solution is identify_operation → subtract_terms (b leaves the left
// side) → divide_terms (by a) → state_answer(x), rewarded per step
// (Rewards). All four actions are offered at every step. One that does not
// apply yet (or any more) leaves the equation as it is, for OutOfOrder; a
// correct state_answer ends the episode solved at any step (the skipped
// steps earn nothing), a wrong one ends it for WrongAnswer. An action not
// offered or a state_answer whose value is not an integer is Invalid. The
// step that reaches MaxSteps ends the episode (outcome step_limit).
type Equations struct {
	Rewards  EquationRewards
	MaxSteps int

	eq    equation
	stage int // 0: posed, 1: identified, 2: subtracted, 3: divided
	counted
}

// NewEquations is Equations with DefaultEquationRewards and a limit of 8
// steps.
func NewEquations() *Equations {
	return &Equations{Rewards: DefaultEquationRewards, MaxSteps: 8}
}

type equation struct{ a, b, c, x int }

// Reset implements Env.
func (e *Equations) Reset(ctx context.Context, seed int64, task string) (Observation, error) {
	if err := ctx.Err(); err != nil {
		return Observation{}, err
	}
	if e.MaxSteps <= 0 {
		return Observation{}, fmt.Errorf("equations: MaxSteps %d must be > 0", e.MaxSteps)
	}
	var eq equation
	switch task {
	case TaskTrain, TaskHeldOut:
		eq = drawEquation(seed, task == TaskHeldOut)
	default:
		var err error
		if eq, err = parseEquation(task); err != nil {
			return Observation{}, fmt.Errorf("equations: task %q: %w", task, err)
		}
	}
	e.eq, e.stage, e.steps, e.live = eq, 0, 0, true
	return e.observe("Solve for x: " + eq.String()), nil
}

// Step implements Env.
func (e *Equations) Step(ctx context.Context, a Action) (StepResult, error) {
	return e.take(ctx, e.MaxSteps, func() StepResult { return e.step(a) }, stepLimitNote(e.MaxSteps))
}

func (e *Equations) step(a Action) StepResult {
	rw, eq := e.Rewards, e.eq
	next := map[string]int{IdentifyOperation: 0, SubtractTerms: 1, DivideTerms: 2}
	switch a.Name {
	case IdentifyOperation, SubtractTerms, DivideTerms:
		if a.Param != "" {
			return e.invalid(fmt.Sprintf("%s takes no parameter", a.Name))
		}
		if next[a.Name] != e.stage {
			return StepResult{
				Observation: e.observe(fmt.Sprintf("%s does not apply now; the equation is unchanged: %s", a.Name, e.current())),
				Reward:      rw.OutOfOrder,
			}
		}
		e.stage++
		var text string
		var reward float64
		switch a.Name {
		case IdentifyOperation:
			text, reward = fmt.Sprintf("x is multiplied by %d and %d is added: move the constant term, then divide by %d. Equation: %s", eq.a, eq.b, eq.a, e.current()), rw.Identify
		case SubtractTerms:
			text, reward = fmt.Sprintf("Subtracted %d from both sides: %s", eq.b, e.current()), rw.Subtract
		case DivideTerms:
			text, reward = fmt.Sprintf("Divided both sides by %d: %s", eq.a, e.current()), rw.Divide
		}
		return StepResult{Observation: e.observe(text), Reward: reward}
	case StateAnswer:
		v, err := strconv.Atoi(strings.TrimSpace(a.Param))
		if err != nil {
			return e.invalid(fmt.Sprintf("state_answer needs an integer value, got %q", clip(a.Param)))
		}
		if v == eq.x {
			return StepResult{Observation: Observation{Text: fmt.Sprintf("Correct: x = %d.", v)}, Reward: rw.Answer, Done: true,
				Info: map[string]string{"outcome": OutcomeSolved}}
		}
		return StepResult{Observation: Observation{Text: fmt.Sprintf("Wrong: x = %d does not solve %s.", v, eq)}, Reward: rw.WrongAnswer, Done: true,
			Info: map[string]string{"outcome": OutcomeWrongAnswer}}
	case "":
		return e.invalid("no action given")
	}
	return e.invalid(fmt.Sprintf("unknown action %q", clip(a.Name)))
}

func (e *Equations) invalid(why string) StepResult {
	return StepResult{
		Observation: e.observe(fmt.Sprintf("Invalid action: %s. The equation is unchanged: %s", why, e.current())),
		Reward:      e.Rewards.Invalid,
		Invalid:     why,
	}
}

func (e *Equations) observe(text string) Observation {
	return Observation{Text: text, Actions: []ActionSpec{
		{Name: IdentifyOperation, Description: "name the operations applied to x"},
		{Name: SubtractTerms, Description: "remove the constant term from the left side"},
		{Name: DivideTerms, Description: "divide both sides by the coefficient of x"},
		{Name: StateAnswer, Description: "give the value of x and finish", Param: "value"},
	}}
}

// current is the equation as far as it has been solved.
func (e *Equations) current() string {
	eq := e.eq
	switch e.stage {
	case 0, 1:
		return eq.String()
	case 2:
		return fmt.Sprintf("%s = %d", task.LinearTerm(eq.a), eq.c-eq.b)
	}
	return fmt.Sprintf("x = %d", eq.x)
}

func (q equation) String() string {
	sign, b := "+", q.b
	if b < 0 {
		sign, b = "-", -b
	}
	return fmt.Sprintf("%s %s %d = %d", task.LinearTerm(q.a), sign, b, q.c)
}

var equationRE = regexp.MustCompile(`^\s*(-?\d*)\s*x\s*([+-])\s*(\d+)\s*=\s*(-?\d+)\s*$`)

// parseEquation reads "a x ± b = c", a ≠ 0, with an integer solution.
func parseEquation(s string) (equation, error) {
	m := equationRE.FindStringSubmatch(s)
	if m == nil {
		return equation{}, fmt.Errorf("not %s, %s or an equation like 3x + 5 = 14", TaskTrain, TaskHeldOut)
	}
	var q equation
	switch m[1] {
	case "":
		q.a = 1
	case "-":
		q.a = -1
	default:
		var err error
		if q.a, err = strconv.Atoi(m[1]); err != nil {
			return equation{}, fmt.Errorf("coefficient %q: %w", m[1], err)
		}
	}
	b, err1 := strconv.Atoi(m[3])
	c, err2 := strconv.Atoi(m[4])
	const lim = 1_000_000
	switch {
	case err1 != nil || err2 != nil || abs(q.a) > lim || b > lim || abs(c) > lim:
		return equation{}, fmt.Errorf("numbers beyond ±%d", lim)
	case q.a == 0:
		return equation{}, fmt.Errorf("coefficient of x is 0")
	}
	if m[2] == "-" {
		b = -b
	}
	q.b, q.c = b, c
	if (c-b)%q.a != 0 {
		return equation{}, fmt.Errorf("x = %d/%d is not an integer", c-b, q.a)
	}
	q.x = (c - b) / q.a
	return q, nil
}

// drawEquation draws from seed an equation with a in 2..9, x in −10..10,
// b in ±1..20, from the held-out split (a fifth of the equations, by a
// hash of a, b and x) or the train split (the rest).
func drawEquation(seed int64, heldOut bool) equation {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x65717561))
	for {
		q := equation{a: 2 + rng.IntN(8), x: rng.IntN(21) - 10, b: 1 + rng.IntN(20)}
		if rng.IntN(2) == 0 {
			q.b = -q.b
		}
		q.c = q.a*q.x + q.b
		if isHeldOut(q) == heldOut {
			return q
		}
	}
}

func isHeldOut(q equation) bool {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d,%d,%d", q.a, q.b, q.x)
	return h.Sum32()%5 == 0
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
