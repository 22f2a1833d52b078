package lossclock

import (
	"testing"
	"time"
)

// event is one thing a pool's call loop tells the clock, at a time in
// seconds from the start: a call sent at sent that was answered, or that
// failed (checked at at), or a look at the budget of a call sent at sent.
type event struct {
	kind     string // "budget", "answered", "failed"
	sent, at float64
	want     float64 // budget: seconds; failed: 1 when lost, 0 when not
}

func TestClock(t *testing.T) {
	const timeout = 10 * time.Second
	cases := []struct {
		name   string
		events []event
	}{
		{"first call gets the whole timeout", []event{
			{kind: "budget", sent: 3, want: 10},
		}},
		{"a failure starts the clock at its sending, not its end", []event{
			{kind: "failed", sent: 1, at: 6, want: 0},
			{kind: "budget", sent: 7, want: 4},
			{kind: "failed", sent: 7, at: 10.5, want: 0},
			{kind: "failed", sent: 10.5, at: 11, want: 1},
		}},
		{"an unanswered first call is lost at exactly the timeout", []event{
			{kind: "budget", sent: 0, want: 10},
			{kind: "failed", sent: 0, at: 10, want: 1},
		}},
		{"an answer stops the clock; the next failure starts it again", []event{
			{kind: "failed", sent: 0, at: 8, want: 0},
			{kind: "answered"},
			{kind: "budget", sent: 9, want: 10},
			{kind: "failed", sent: 9, at: 12, want: 0},
			{kind: "failed", sent: 12, at: 18.9, want: 0},
			{kind: "failed", sent: 18.9, at: 19, want: 1},
		}},
		{"the budget runs out (and below zero) once the timeout has passed", []event{
			{kind: "failed", sent: 0, at: 1, want: 0},
			{kind: "budget", sent: 10, want: 0},
			{kind: "budget", sent: 12, want: -2},
		}},
		{"answers alone never lose", []event{
			{kind: "answered"},
			{kind: "answered"},
			{kind: "budget", sent: 100, want: 10},
		}},
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Clock{Timeout: timeout}
			for i, e := range tc.events {
				switch e.kind {
				case "budget":
					if got, want := c.Budget(at(e.sent)), time.Duration(e.want*float64(time.Second)); got != want {
						t.Fatalf("event %d: Budget(%v) = %v, want %v", i, e.sent, got, want)
					}
				case "answered":
					c.Answered()
				case "failed":
					if got, want := c.Failed(at(e.sent), at(e.at)), e.want == 1; got != want {
						t.Fatalf("event %d: Failed(sent %v, at %v) = %v, want %v", i, e.sent, e.at, got, want)
					}
				default:
					t.Fatalf("event %d: kind %q", i, e.kind)
				}
			}
		})
	}
}
