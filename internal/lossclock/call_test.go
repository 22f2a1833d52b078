package lossclock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// The call loop returns an answer, the replica's own error or a refusal
// for size at once; retries transport failures until the clock runs out
// (expired, with the last failure) or the replica is reported lost.
func TestCaller(t *testing.T) {
	transport := errors.New("connection refused")
	for _, c := range []struct {
		name          string
		answers       []error // the sends' errors in turn; past the end, the last again
		lostAfter     int     // sends after which IsLost says true (0: never)
		wantSends     int
		lost, expired bool
		err           error
	}{
		{"answered", []error{nil}, 0, 1, false, false, nil},
		{"its own error", []error{&actor.ActorError{Message: "bad job"}}, 0, 1, false, false, &actor.ActorError{}},
		{"too large", []error{actor.ErrTooLarge}, 0, 1, false, false, actor.ErrTooLarge},
		{"failures then an answer", []error{transport, transport, nil}, 0, 3, false, false, nil},
		{"failing until the clock runs out", []error{transport}, 0, -1, false, true, transport},
		{"lost while failing", []error{transport}, 2, 2, true, false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			sends := 0
			lc := &Caller{Clock: Clock{Timeout: 200 * time.Millisecond}, PollFirst: time.Millisecond, PollMax: 20 * time.Millisecond,
				IsLost: func() bool { return c.lostAfter > 0 && sends >= c.lostAfter }}
			_, lost, expired, err := lc.Call(context.Background(), func(context.Context) (any, error) {
				e := c.answers[min(sends, len(c.answers)-1)]
				sends++
				return "v", e
			})
			if lost != c.lost || expired != c.expired {
				t.Errorf("lost %v, expired %v; want %v, %v", lost, expired, c.lost, c.expired)
			}
			var ae *actor.ActorError
			switch {
			case c.err == nil && err != nil, c.err != nil && !errors.Is(err, c.err) && !(errors.As(c.err, &ae) && errors.As(err, &ae)):
				t.Errorf("err %v, want %v", err, c.err)
			}
			if c.wantSends > 0 && sends != c.wantSends {
				t.Errorf("%d sends, want %d", sends, c.wantSends)
			}
			if c.expired && sends < 2 {
				t.Errorf("expired after %d sends: failures were not retried", sends)
			}
		})
	}
	// A cancelled ctx ends the loop with its error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	lc := &Caller{Clock: Clock{Timeout: time.Minute}, PollFirst: time.Millisecond, PollMax: time.Millisecond, IsLost: func() bool { return false }}
	if _, lost, expired, err := lc.Call(ctx, func(context.Context) (any, error) { return nil, errors.New("x") }); lost || expired || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: lost %v expired %v err %v", lost, expired, err)
	}
}
