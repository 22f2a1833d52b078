package main

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// lateNotes is the logger of the node `rlnode run --address` joins the
// cluster with: its warnings (a node lost, one left out of a placement
// group because it did not answer) become notes of the run once the
// run's logger exists (set), so an operator sees why the run avoids a
// node. Records before then, below Warn, and protoactor's own transport
// records (the run reports lost nodes in its own words) are dropped.
type lateNotes struct {
	to    *atomic.Pointer[slog.Logger]
	attrs []slog.Attr
	quiet bool
}

func newLateNotes() (*slog.Logger, func(*slog.Logger)) {
	to := &atomic.Pointer[slog.Logger]{}
	return slog.New(lateNotes{to: to}), func(l *slog.Logger) { to.Store(l) }
}

func (h lateNotes) Enabled(_ context.Context, l slog.Level) bool {
	return !h.quiet && l >= slog.LevelWarn && h.to.Load() != nil
}

func (h lateNotes) Handle(ctx context.Context, r slog.Record) error {
	l := h.to.Load()
	if l == nil || h.quiet || r.Level < slog.LevelWarn {
		return nil
	}
	return l.Handler().WithAttrs(h.attrs).Handle(ctx, r)
}

func (h lateNotes) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		if a.Key == "component" && a.Value.String() == "protoactor" {
			h.quiet = true
		}
	}
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return h
}

// WithGroup is not used by the cluster's loggers; attributes stay flat.
func (h lateNotes) WithGroup(string) slog.Handler { return h }
