package env

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Policy picks actions without a model, one episode at a time: a
// scripted teacher or random play. Act gets each observation of the
// episode in order, from Reset's on.
type Policy interface {
	Act(obs Observation) Action
}

// Policy kinds NewPolicy knows.
const (
	PolicyScripted = "scripted"
	PolicyRandom   = "random"
)

// teachers are the scripted teachers of the built-in environments.
var teachers = map[string]func() Policy{
	NameEquations:  func() Policy { return &equationsTeacher{} },
	NameCalculator: func() Policy { return productTeacher{tools: true} },
	NameMultiply:   func() Policy { return productTeacher{} },
	NameGuess:      func() Policy { return guessTeacher{} },
}

// NewPolicy returns a constructor of kind's policy (one per episode) for
// the environment named envName: scripted (the environment's teacher,
// for the built-in environments that have one) or random (an offered
// action drawn uniformly, a parameter drawn from -10..10; episode k of the
// constructor's calls draws from seed and k).
func NewPolicy(kind, envName string, seed uint64) (func() Policy, error) {
	switch kind {
	case PolicyScripted:
		mk, ok := teachers[envName]
		if !ok {
			var names []string
			for n := range teachers {
				names = append(names, n)
			}
			slices.Sort(names)
			return nil, fmt.Errorf("no scripted teacher for environment %q (there is one for %s)", envName, strings.Join(names, ", "))
		}
		return mk, nil
	case PolicyRandom:
		k := uint64(0)
		return func() Policy {
			k++
			return &random{rng: rand.New(rand.NewPCG(seed, k))}
		}, nil
	}
	return nil, fmt.Errorf("policy %q: want %s or %s", kind, PolicyScripted, PolicyRandom)
}

type random struct{ rng *rand.Rand }

func (r *random) Act(obs Observation) Action {
	if len(obs.Actions) == 0 {
		return Action{}
	}
	s := obs.Actions[r.rng.IntN(len(obs.Actions))]
	a := Action{Name: s.Name}
	if s.Param != "" {
		a.Param = strconv.Itoa(r.rng.IntN(21) - 10)
	}
	return a
}

// equationsTeacher solves Equations' equation in order: it reads the
// equation from the first observation.
type equationsTeacher struct {
	step int
	eq   equation
	bad  bool
}

func (t *equationsTeacher) Act(obs Observation) Action {
	if t.step == 0 {
		q, err := parseEquation(strings.TrimPrefix(obs.Text, "Solve for x: "))
		t.eq, t.bad = q, err != nil
	}
	t.step++
	if t.bad {
		return Action{}
	}
	switch t.step {
	case 1:
		return Action{Name: IdentifyOperation}
	case 2:
		return Action{Name: SubtractTerms}
	case 3:
		return Action{Name: DivideTerms}
	}
	return Action{Name: StateAnswer, Param: strconv.Itoa(t.eq.x)}
}

// productTeacher plays Multiply from its observations as Multiply's Teach
// does: with tools, calculate the product the question names, then answer
// with the result the calculator showed; without, answer the product. An
// observation it cannot read gets no action.
type productTeacher struct{ tools bool }

var (
	questionRE = regexp.MustCompile(`^What is (\d{1,6}) \* (\d{1,6})\?`)
	shownRE    = regexp.MustCompile(` = (-?\d{1,18})$`)
)

func (t productTeacher) Act(obs Observation) Action {
	q := questionRE.FindStringSubmatch(obs.Text)
	if q == nil {
		return Action{}
	}
	if !t.tools {
		a, _ := strconv.Atoi(q[1])
		b, _ := strconv.Atoi(q[2])
		return Action{Name: Answer, Param: strconv.Itoa(a * b)}
	}
	if m := shownRE.FindStringSubmatch(obs.Text); m != nil {
		return Action{Name: Answer, Param: m[1]}
	}
	return Action{Name: Calculate, Param: q[1] + "*" + q[2]}
}

// guessTeacher plays Guess from its observations as Guess's Teach does:
// the middle of the range the observation says is still open.
type guessTeacher struct{}

var openRangeRE = regexp.MustCompile(`The number is from (\d{1,6}) to (\d{1,6});`)

func (guessTeacher) Act(obs Observation) Action {
	m := openRangeRE.FindStringSubmatch(obs.Text)
	if m == nil {
		return Action{}
	}
	lo, _ := strconv.Atoi(m[1])
	hi, _ := strconv.Atoi(m[2])
	return Action{Name: GuessAction, Param: strconv.Itoa((lo + hi) / 2)}
}
