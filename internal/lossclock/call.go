package lossclock

import (
	"context"
	"errors"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// Caller is the call loop of one replica's job, as the rollout and ctxopt
// pools run it: each call is retried while it fails in transport, until
// it is answered, the cluster reports the replica lost, ctx ends, or the
// calls have failed or gone unanswered for the clock's timeout; between
// tries, and between the job's polls, it pauses PollFirst, doubling up to
// PollMax. One goroutine owns a Caller.
type Caller struct {
	Clock Clock
	// MaxWait bounds one call's wait besides the clock's budget (0: the
	// budget alone).
	MaxWait            time.Duration
	PollFirst, PollMax time.Duration
	// IsLost says the cluster reported the replica lost (ctx then ends).
	IsLost func() bool
	wait   time.Duration
}

// Pause waits the next pause; it reports the replica lost, or ctx's
// error, if either ends the wait.
func (c *Caller) Pause(ctx context.Context) (lost bool, err error) {
	if c.wait == 0 {
		c.wait = c.PollFirst
	}
	select {
	case <-ctx.Done():
		if c.IsLost() {
			return true, nil
		}
		return false, ctx.Err()
	case <-time.After(c.wait):
	}
	c.wait = min(2*c.wait, c.PollMax)
	return false, nil
}

// Call calls send until the replica answers: v and err are its answer
// (err its own error, an *actor.ActorError, or actor.ErrTooLarge, a
// refusal for size that a retry would meet again). lost says the replica
// was reported lost; expired that the clock ran out, with the last
// failure as err; otherwise err may be ctx's.
func (c *Caller) Call(ctx context.Context, send func(context.Context) (any, error)) (v any, lost, expired bool, err error) {
	for {
		sent := time.Now()
		budget := c.Clock.Budget(sent)
		if c.MaxWait > 0 {
			budget = min(budget, c.MaxWait)
		}
		cctx, cancel := context.WithTimeout(ctx, budget)
		v, err := send(cctx)
		cancel()
		var answered *actor.ActorError
		if err == nil || errors.As(err, &answered) || errors.Is(err, actor.ErrTooLarge) {
			// An answer, or a refusal for size (by this node or the
			// replica's): no sign of a loss.
			c.Clock.Answered()
			return v, false, false, err
		}
		if c.IsLost() {
			return nil, true, false, nil
		}
		if ctx.Err() != nil {
			return nil, false, false, ctx.Err()
		}
		if c.Clock.Failed(sent, time.Now()) {
			return nil, false, true, err
		}
		if lost, err := c.Pause(ctx); lost || err != nil {
			return nil, lost, false, err
		}
	}
}

// ResetPause makes the next pause PollFirst again (a new phase of the
// job: its polls after its submit).
func (c *Caller) ResetPause() { c.wait = 0 }
