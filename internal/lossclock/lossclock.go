// Package lossclock decides when a replica whose calls keep failing is
// lost: the pools of rollout and ctxopt drop a replica once its calls have
// failed in transport or gone unanswered for a loss timeout, counted from
// the sending of the first such call. The Clock is pure (the caller
// passes the times) and holds no lock; Caller is the call loop that owns
// one (call.go).
package lossclock

import "time"

// Clock is the loss clock of one replica's calls. Its zero value with
// Timeout set is ready: no call has failed yet.
type Clock struct {
	// Timeout is how long calls may keep failing or go unanswered before
	// the replica is lost.
	Timeout time.Duration
	since   time.Time // when the first call of the current run of failures was sent; zero while calls are answered
}

// Budget is how long a call sent at sent may wait for its answer: until
// Timeout after the first failing call of the current run was sent, or
// after sent when none has failed. A call that gets no answer is thus cut
// off once the replica would be lost, whatever its own time limit. It may
// be zero or negative when that time has passed.
func (c *Clock) Budget(sent time.Time) time.Duration {
	since := c.since
	if since.IsZero() {
		since = sent
	}
	return since.Add(c.Timeout).Sub(sent)
}

// Answered records that a call got an answer (an error the replica itself
// answered counts: it is alive): the run of failures, if any, ends.
func (c *Clock) Answered() { c.since = time.Time{} }

// Failed records that the call sent at sent failed in transport or went
// unanswered, and reports whether, at now, the calls have been failing for
// Timeout: the replica is lost.
func (c *Clock) Failed(sent, now time.Time) (lost bool) {
	if c.since.IsZero() {
		c.since = sent
	}
	return now.Sub(c.since) >= c.Timeout
}
