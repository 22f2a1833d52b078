package env

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
)

// GuessAction is Guess's one action.
const GuessAction = "guess"

// GuessRewards are Guess's rewards per step.
type GuessRewards struct {
	Found   float64 // the guess that finds the number (ends solved)
	Guess   float64 // any other guess inside the range still open
	Outside float64 // a guess outside it (what is known rules it out)
	Invalid float64 // an action not offered, or a guess that is no integer
}

// DefaultGuessRewards: 1 for finding the number, −0.1 for another guess,
// −0.3 for a guess outside the range still open, −0.5 for an invalid
// action.
var DefaultGuessRewards = GuessRewards{Found: 1, Guess: -0.1, Outside: -0.3, Invalid: -0.5}

// Guess is the higher/lower game: find a hidden number from 1 to Max
// within MaxSteps guesses. Each answer says "higher" or "lower" and the
// range still open, which the next guess needs. The task is TaskTrain or
// TaskHeldOut (the hidden number drawn from the seed; a fifth of the
// numbers are held out) or "find N". The step that reaches MaxSteps ends
// the episode (outcome step_limit).
type Guess struct {
	Max      int
	Rewards  GuessRewards
	MaxSteps int

	target, lo, hi int
	counted
}

// NewGuess is Guess over 1..50 with DefaultGuessRewards and 6 guesses
// (binary search needs at most 6).
func NewGuess() *Guess { return &Guess{Max: 50, Rewards: DefaultGuessRewards, MaxSteps: 6} }

var findRE = regexp.MustCompile(`^\s*find\s+(\d{1,6})\s*$`)

// Reset implements Env.
func (g *Guess) Reset(ctx context.Context, seed int64, task string) (Observation, error) {
	if err := ctx.Err(); err != nil {
		return Observation{}, err
	}
	if g.MaxSteps <= 0 || g.Max < 2 {
		return Observation{}, fmt.Errorf("guess: MaxSteps %d, Max %d: want > 0 and ≥ 2", g.MaxSteps, g.Max)
	}
	switch task {
	case TaskTrain, TaskHeldOut:
		rng := rand.New(rand.NewPCG(uint64(seed), 0x67756573))
		for {
			g.target = 1 + rng.IntN(g.Max)
			if inHeldOut(g.target) == (task == TaskHeldOut) {
				break
			}
		}
	default:
		m := findRE.FindStringSubmatch(task)
		n := 0
		if m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		if n < 1 || n > g.Max {
			return Observation{}, fmt.Errorf("guess: task %q: not %s, %s or find N with N in 1..%d", clip(task), TaskTrain, TaskHeldOut, g.Max)
		}
		g.target = n
	}
	g.lo, g.hi, g.steps, g.live = 1, g.Max, 0, true
	return g.observe(fmt.Sprintf("Find the hidden number from 1 to %d.", g.Max)), nil
}

// Step implements Env.
func (g *Guess) Step(ctx context.Context, a Action) (StepResult, error) {
	noneLeft := func() string { return fmt.Sprintf(" No guesses left: it was %d.", g.target) }
	return g.take(ctx, g.MaxSteps, func() StepResult { return g.step(a) }, noneLeft)
}

func (g *Guess) step(a Action) StepResult {
	rw := g.Rewards
	switch a.Name {
	case GuessAction:
		n, err := strconv.Atoi(strings.TrimSpace(a.Param))
		if err != nil {
			return g.invalid(fmt.Sprintf("guess needs an integer, got %q", clip(a.Param)))
		}
		if n == g.target {
			return StepResult{Observation: Observation{Text: fmt.Sprintf("%d is right.", n)}, Reward: rw.Found, Done: true,
				Info: map[string]string{InfoOutcome: OutcomeSolved}}
		}
		reward := rw.Guess
		if n < g.lo || n > g.hi {
			reward = rw.Outside
		}
		dir := "higher"
		if n > g.target {
			dir = "lower"
			g.hi = min(g.hi, n-1)
		} else {
			g.lo = max(g.lo, n+1)
		}
		return StepResult{Observation: g.observe(fmt.Sprintf("%d: %s.", n, dir)), Reward: reward}
	case "":
		return g.invalid("no action given")
	}
	return g.invalid(fmt.Sprintf("unknown action %q", clip(a.Name)))
}

func (g *Guess) invalid(why string) StepResult {
	return StepResult{Observation: g.observe("Invalid action: " + why + "."), Reward: g.Rewards.Invalid, Invalid: why}
}

func (g *Guess) observe(text string) Observation {
	left := g.MaxSteps - g.steps
	return Observation{
		Text:    fmt.Sprintf("%s The number is from %d to %d; %d guesses left.", text, g.lo, g.hi, left),
		Actions: []ActionSpec{{Name: GuessAction, Description: "guess the number", Param: "number"}},
	}
}

// Teach implements Teacher: the middle of the range still open.
func (g *Guess) Teach() (Action, error) {
	if !g.live {
		return Action{}, ErrDone
	}
	return Action{Name: GuessAction, Param: fmt.Sprint((g.lo + g.hi) / 2)}, nil
}
