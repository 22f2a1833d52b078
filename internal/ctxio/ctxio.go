// Package ctxio reads under a context: a long read (a large checkpoint's
// files) gives up between chunks once its context is done, instead of
// reading on to the end.
package ctxio

import (
	"context"
	"io"
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
