package env

import (
	"context"
	"fmt"
)

// counted is a built-in environment's episode bookkeeping: the steps taken
// and whether the episode still runs.
type counted struct {
	steps int
	live  bool
}

// take carries out one step: it refuses a step after done (ErrDone) or
// after ctx ends, counts the step, and ends the episode when the step limit
// is reached without the environment ending it, adding the step-limit
// outcome and limitNote to the observation.
func (c *counted) take(ctx context.Context, maxSteps int, step func() StepResult, limitNote func() string) (StepResult, error) {
	if !c.live {
		return StepResult{}, ErrDone
	}
	if err := ctx.Err(); err != nil {
		return StepResult{}, err
	}
	c.steps++
	r := step()
	if !r.Done && c.steps >= maxSteps {
		r.Done = true
		r.Info = withInfo(r.Info, InfoOutcome, OutcomeStepLimit)
		r.Observation.Text += limitNote()
	}
	if r.Done {
		c.live = false
	}
	return r, nil
}

// stepLimitNote is the observation's note when an episode runs out of steps.
func stepLimitNote(maxSteps int) func() string {
	return func() string { return fmt.Sprintf("\nStep limit of %d reached.", maxSteps) }
}
