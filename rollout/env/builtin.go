package env

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// Teacher is an environment that knows a good next action in its current
// state: the scripted teacher of SFT warm-ups. Teach before Reset or
// after the episode ended is ErrDone.
type Teacher interface {
	Env
	Teach() (Action, error)
}

// Names of the built-in environments, as New takes them.
const (
	NameEquations  = "equations"  // Equations
	NameCalculator = "calculator" // Multiply with the calculate action
	NameMultiply   = "multiply"   // Multiply without it: the no-tool baseline
	NameGuess      = "guess"      // Guess
)

// BuiltinNames are the built-in environments New makes, in the order it
// documents them.
var BuiltinNames = []string{NameEquations, NameCalculator, NameMultiply, NameGuess}

// New makes a fresh built-in environment by name, with its default
// rewards; maxSteps > 0 sets its step limit (0 keeps its default). Each
// built-in environment is a Teacher and takes the tasks TaskTrain and
// TaskHeldOut.
func New(name string, maxSteps int) (Teacher, error) {
	if maxSteps < 0 {
		return nil, fmt.Errorf("env %s: max steps %d: want ≥ 0", name, maxSteps)
	}
	var e Teacher
	var limit *int
	switch name {
	case NameEquations:
		q := NewEquations()
		e, limit = q, &q.MaxSteps
	case NameCalculator, NameMultiply:
		m := NewMultiply(name == NameCalculator)
		e, limit = m, &m.MaxSteps
	case NameGuess:
		g := NewGuess()
		e, limit = g, &g.MaxSteps
	default:
		return nil, fmt.Errorf("unknown environment %q (want one of %s)", name, strings.Join(BuiltinNames, ", "))
	}
	if maxSteps > 0 {
		*limit = maxSteps
	}
	return e, nil
}

// Teach implements Teacher: the next step of the solution.
func (e *Equations) Teach() (Action, error) {
	if !e.live {
		return Action{}, ErrDone
	}
	switch e.stage {
	case 0:
		return Action{Name: IdentifyOperation}, nil
	case 1:
		return Action{Name: SubtractTerms}, nil
	case 2:
		return Action{Name: DivideTerms}, nil
	}
	return Action{Name: StateAnswer, Param: fmt.Sprint(e.eq.x)}, nil
}

// inHeldOut splits drawn tasks: a fifth of them, by a hash of their
// numbers, are held out.
func inHeldOut(nums ...int) bool {
	h := fnv.New32a()
	for _, n := range nums {
		fmt.Fprintf(h, "%d,", n)
	}
	return h.Sum32()%5 == 0
}
