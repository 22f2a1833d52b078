// Package ratelog bounds repeated warnings, so that junk from the network
// (a flood of bad packets, connections from non-members) cannot become a
// flood of log lines. Each kind of warning may be logged Burst times per
// window; the next line logged of that kind says how many were suppressed.
package ratelog

import (
	"log/slog"
	"sync"
	"time"
)

// Defaults for a Limiter's zero fields.
const (
	DefaultEvery = 10 * time.Second
	DefaultBurst = 5
)

// maxKinds bounds the kinds tracked; beyond it, new kinds share one.
const maxKinds = 1024

// Limiter decides which warnings are logged. Its zero value uses the
// defaults; it is safe for concurrent use.
type Limiter struct {
	Every time.Duration // window length (default DefaultEvery)
	Burst int           // lines per kind per window (default DefaultBurst)

	mu    sync.Mutex
	kinds map[string]*window
}

type window struct {
	start      time.Time
	logged     int
	suppressed int
}

// Allow reports whether a warning of kind may be logged at now and, when
// it may, how many of that kind were suppressed since the last one logged.
func (l *Limiter) Allow(kind string, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	every, burst := l.Every, l.Burst
	if every <= 0 {
		every = DefaultEvery
	}
	if burst <= 0 {
		burst = DefaultBurst
	}
	if l.kinds == nil {
		l.kinds = map[string]*window{}
	}
	w := l.kinds[kind]
	if w == nil {
		if len(l.kinds) >= maxKinds {
			kind = "(other)"
			w = l.kinds[kind]
		}
		if w == nil {
			w = &window{start: now}
			l.kinds[kind] = w
		}
	}
	if now.Sub(w.start) >= every {
		w.start, w.logged = now, 0
	}
	if w.logged >= burst {
		w.suppressed++
		return false, 0
	}
	w.logged++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}

// SetWindow changes Every and Burst; unlike setting the fields, it is safe
// while the limiter is in use.
func (l *Limiter) SetWindow(every time.Duration, burst int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Every, l.Burst = every, burst
}

// Warn logs msg with args at warn level on log unless warnings of that
// message are over the limit; msg is the kind.
func (l *Limiter) Warn(log *slog.Logger, msg string, args ...any) {
	ok, n := l.Allow(msg, time.Now())
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	log.Warn(msg, args...)
}
