package ctxio

import (
	"bytes"
	"context"
	"errors"
	"testing"
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
