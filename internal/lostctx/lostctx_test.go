package lostctx

import (
	"context"
	"testing"
	"time"
)

func TestWithLost(t *testing.T) {
	lost := make(chan struct{})
	ctx, cancel, isLost := WithLost(context.Background(), lost)
	defer cancel()
	if isLost() || ctx.Err() != nil {
		t.Fatalf("before the loss: lost %v, ctx %v", isLost(), ctx.Err())
	}
	close(lost)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the context did not end when lost closed")
	}
	if !isLost() {
		t.Error("isLost false after lost closed")
	}

	// Ending the parent ends the context without reporting a loss.
	parent, stop := context.WithCancel(context.Background())
	ctx, cancel, isLost = WithLost(parent, make(chan struct{}))
	defer cancel()
	stop()
	<-ctx.Done()
	if isLost() {
		t.Error("isLost true after only the parent ended")
	}
}
