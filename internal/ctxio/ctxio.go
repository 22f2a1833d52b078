// Package ctxio reads under a context: a long read (a large checkpoint's
// files) gives up between chunks once its context is done, instead of
// reading on to the end.
package ctxio

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"
)

// Reader returns r read at most chunk bytes at a time, each read checking
// ctx first: once ctx is done, Read returns ctx's error.
func Reader(ctx context.Context, r io.Reader, chunk int) io.Reader {
	return &reader{ctx: ctx, r: r, chunk: chunk}
}

type reader struct {
	ctx   context.Context
	r     io.Reader
	chunk int
}

func (c *reader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	if len(p) > c.chunk {
		p = p[:c.chunk]
	}
	return c.r.Read(p)
}

// FileSHA256 is the hex SHA-256 of the file at path, read in 1 MiB
// pieces that each check ctx first.
func FileSHA256(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, Reader(ctx, f, 1<<20)); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Sleep waits d, or until ctx is done, whichever comes first; it returns
// ctx's error in the second case (a retry loop's wait that a caller's
// cancellation cuts short).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
