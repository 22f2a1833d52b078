package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestAllow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		kind       string
		at         time.Duration
		ok         bool
		suppressed int
	}
	for _, tc := range []struct {
		name  string
		burst int
		steps []step
	}{
		{"burst then suppressed, count on the next window", 2, []step{
			{"a", 0, true, 0}, {"a", 1, true, 0}, {"a", 2, false, 0}, {"a", 3, false, 0},
			{"a", 10 * time.Second, true, 2}, {"a", 11 * time.Second, true, 0}, {"a", 12 * time.Second, false, 0},
		}},
		{"kinds are counted apart", 1, []step{
			{"a", 0, true, 0}, {"b", 0, true, 0}, {"a", 1, false, 0}, {"b", 1, false, 0}, {"b", 2, false, 0},
			{"a", 10 * time.Second, true, 1}, {"b", 10 * time.Second, true, 2},
		}},
		{"a quiet kind starts a fresh window", 1, []step{
			{"a", 0, true, 0}, {"a", time.Minute, true, 0}, {"a", time.Minute + 1, false, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Limiter{Every: 10 * time.Second, Burst: tc.burst}
			for i, s := range tc.steps {
				ok, n := l.Allow(s.kind, t0.Add(s.at))
				if ok != s.ok || n != s.suppressed {
					t.Fatalf("step %d (%s at %v): got %v, %d; want %v, %d", i, s.kind, s.at, ok, n, s.ok, s.suppressed)
				}
			}
		})
	}
}

func TestKindsAreBounded(t *testing.T) {
	l := &Limiter{Burst: 1}
	now := time.Unix(0, 0)
	for i := range maxKinds + 100 {
		l.Allow(strings.Repeat("k", i+1), now)
	}
	if len(l.kinds) > maxKinds+1 {
		t.Fatalf("%d kinds tracked, want at most %d", len(l.kinds), maxKinds+1)
	}
}

func TestWarnSaysHowManyWereSuppressed(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := &Limiter{Every: 50 * time.Millisecond, Burst: 1}
	for range 1000 {
		l.Warn(log, "junk", "from", "x")
	}
	time.Sleep(60 * time.Millisecond)
	l.Warn(log, "junk", "from", "x")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "suppressed=999") {
		t.Fatalf("got %d lines:\n%s", len(lines), buf.String())
	}
}
