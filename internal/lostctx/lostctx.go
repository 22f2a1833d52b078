// Package lostctx ties a call's context to a replica's "lost" signal: the
// pools of rollout and ctxopt abandon a call when the replica it runs on is
// declared lost, and run it elsewhere.
package lostctx

import "context"

// WithLost returns a context that ends with parent or when lost is
// closed, its cancel function (call it when the call is done, as with
// context.WithCancel), and a report of whether lost is closed.
func WithLost(parent context.Context, lost <-chan struct{}) (context.Context, context.CancelFunc, func() bool) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	isLost := func() bool {
		select {
		case <-lost:
			return true
		default:
			return false
		}
	}
	return ctx, cancel, isLost
}
