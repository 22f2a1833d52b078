package ctxio

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// Reads come at most a chunk at a time, with the bytes of r, and stop
// with the context's error once it is done.
func TestReader(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	src := bytes.Repeat([]byte("0123456789"), 10)
	r := Reader(ctx, bytes.NewReader(src), 16)
	p := make([]byte, 64)
	n, err := r.Read(p)
	if err != nil || n != 16 || !bytes.Equal(p[:n], src[:16]) {
		t.Fatalf("first read: %d bytes %q, %v; want the first 16 bytes", n, p[:n], err)
	}
	cancel()
	if n, err := r.Read(p); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %d bytes, %v; want none and context.Canceled", n, err)
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("a plain sleep: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// An hour's sleep under a done context returns its error at once (the
	// test's own bound would catch a sleep that did not).
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("sleep under a cancelled context: %v, want context.Canceled", err)
	}
}
