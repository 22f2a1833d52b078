package env

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// Env is an environment a policy acts in. An Env holds the state of one
// episode at a time and need not be safe for concurrent use: run one Env
// per episode, each in its own goroutine.
//
// Reset starts a new episode of task (what a task string means is the
// environment's own; an unknown task is an error) and seed; the same task
// and seed give the same episode. Step plays one action and returns what
// follows. The contract:
//   - an action that is not offered (an unknown name, the empty name the
//     agent episode sends for a turn it could not parse) or has a malformed
//     parameter is not an error: the result says why in Invalid, its
//     observation says so too, and it carries the environment's penalty
//     reward; the episode goes on unless a step limit ends it;
//   - Step before Reset or after a result with Done is ErrDone;
//   - rewards are finite numbers (Checked turns NaN or ±Inf into
//     ErrBadReward);
//   - an error is for an environment that cannot go on (ctx done, a remote
//     environment gone); the episode ends with it.
type Env interface {
	Reset(ctx context.Context, seed int64, task string) (Observation, error)
	Step(ctx context.Context, a Action) (StepResult, error)
}

// Observation is what the policy sees: a text and the actions it may take
// now.
type Observation struct {
	Text    string
	Actions []ActionSpec
}

// ActionSpec describes one valid action. Param names the action's one
// parameter; empty when it takes none.
type ActionSpec struct {
	Name        string
	Description string
	Param       string
}

// Action is one action a policy took: a name and, for an action that
// takes one, its parameter as written.
type Action struct {
	Name  string
	Param string
}

// StepResult is what one step produced. Invalid says why the action was
// not accepted (empty when it was). Info carries the environment's own
// details (the built-in ones set "outcome" when Done: see Equations).
type StepResult struct {
	Observation Observation
	Reward      float64
	Done        bool
	Invalid     string
	Info        map[string]string
}

var (
	// ErrDone: Step before Reset, or after the episode ended.
	ErrDone = errors.New("env: step with no episode running (not reset, or done)")
	// ErrBadReward: an environment returned a reward that is not a finite
	// number.
	ErrBadReward = errors.New("env: reward is not a finite number")
	// ErrRewardBound: an environment's rewards in one episode summed, in
	// magnitude, past MaxEpisodeReward.
	ErrRewardBound = fmt.Errorf("env: an episode's rewards may sum to %g in magnitude at most (env.MaxEpisodeReward)", MaxEpisodeReward)
)

// MaxEpisodeReward bounds the sum of the magnitudes of one episode's
// rewards. Rewards each finite can still sum past the largest float (1e308
// twice), and a batch's returns are summed, averaged and squared again
// (group advantages, metrics, the learner's float32 value loss): under
// this bound none of those overflows, and no environment of ours comes
// near it (the built-in ones' episodes sum to at most a few tens).
const MaxEpisodeReward = 1e9

// Checked wraps e so that the Env contract holds whatever e does: Step
// before Reset or after Done is ErrDone (e is not called), a NaN or
// infinite reward is ErrBadReward and ends the episode, a reward that
// takes the episode's rewards past MaxEpisodeReward in magnitude is
// ErrRewardBound and ends the episode, a Reset observation that offers
// no action is an error. Errors name the step (and an HTTP environment's
// URL and episode).
func Checked(e Env) Env { return &checked{env: e} }

type checked struct {
	env  Env
	live bool
	step int
	size float64 // the sum of the episode's rewards' magnitudes so far
}

func (c *checked) Reset(ctx context.Context, seed int64, task string) (Observation, error) {
	c.live, c.step, c.size = false, 0, 0
	obs, err := c.env.Reset(ctx, seed, task)
	if err != nil {
		return Observation{}, fmt.Errorf("reset task %q seed %d: %w", task, seed, err)
	}
	if len(obs.Actions) == 0 {
		return Observation{}, fmt.Errorf("reset task %q seed %d: the observation offers no action", task, seed)
	}
	c.live = true
	return obs, nil
}

func (c *checked) Step(ctx context.Context, a Action) (StepResult, error) {
	if !c.live {
		return StepResult{}, ErrDone
	}
	c.step++
	r, err := c.env.Step(ctx, a)
	if err != nil {
		c.live = false
		return StepResult{}, fmt.Errorf("step %d (%s): %w", c.step, a, err)
	}
	if math.IsNaN(r.Reward) || math.IsInf(r.Reward, 0) {
		c.live = false
		return StepResult{}, fmt.Errorf("step %d (%s): reward %v: %w", c.step, a, r.Reward, ErrBadReward)
	}
	if size := c.size + math.Abs(r.Reward); size > MaxEpisodeReward {
		c.live = false
		where := ""
		if h, ok := c.env.(*HTTP); ok {
			where = fmt.Sprintf("%s %s (episode %s): ", ErrHTTPEnv, h.URL(), h.Episode())
		}
		return StepResult{}, fmt.Errorf("%sstep %d (%s): reward %g takes the episode's rewards to %g in magnitude: %w", where, c.step, a, r.Reward, size, ErrRewardBound)
	}
	c.size += math.Abs(r.Reward)
	if r.Done {
		c.live = false
	}
	return r, nil
}
