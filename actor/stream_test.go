package actor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// streamAsk asks a streamer for N replies (then the error Fail, if set);
// Plain answers once, as for a Call.
type streamAsk struct {
	N     int
	Fail  string
	Plain bool
}

type streamItem struct{ I int }

// streamCount asks a streamer how many replies it has sent, and why its
// last stream stopped early ("" if none did), once no stream runs.
type streamCount struct{}

type streamCounted struct {
	Sent    int
	Stopped string
}

type streamer struct {
	mu      sync.Mutex
	sent    int
	stopped string
	active  int
	changed chan struct{}
}

func (s *streamer) Receive(ctx *Context, msg any) (any, error) {
	switch m := msg.(type) {
	case streamAsk:
		if m.Plain {
			return streamItem{I: -1}, nil
		}
		w, err := ctx.StreamReplies()
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.active++
		s.stopped = ""
		s.mu.Unlock()
		defer s.done()
		for i := range m.N {
			if err := w.Send(streamItem{I: i}); err != nil {
				s.mu.Lock()
				s.stopped = err.Error()
				s.mu.Unlock()
				w.Close(err)
				return nil, nil
			}
			s.mu.Lock()
			s.sent++
			s.mu.Unlock()
		}
		if m.Fail != "" {
			w.Close(errors.New(m.Fail))
		} else {
			w.Close(nil)
		}
		return nil, nil
	case streamCount:
		for {
			s.mu.Lock()
			if s.active == 0 {
				defer s.mu.Unlock()
				return streamCounted{Sent: s.sent, Stopped: s.stopped}, nil
			}
			if s.changed == nil {
				s.changed = make(chan struct{})
			}
			ch := s.changed
			s.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Context().Done():
				return nil, ctx.Context().Err()
			}
		}
	}
	return nil, fmt.Errorf("streamer: unexpected %T", msg)
}

func (s *streamer) done() {
	s.mu.Lock()
	s.active--
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	s.mu.Unlock()
}

// sentNow is the streamer's count while a stream may run (no waiting).
type sentNow struct{}

func init() {
	RegisterMessage(streamAsk{}, streamItem{}, streamCount{}, streamCounted{}, sentNow{})
	RegisterKind("test.streamer", func(*Context, any) (Actor, error) { return &streamerWithNow{}, nil })
}

// streamerWithNow also answers sentNow at once, for the window check.
type streamerWithNow struct{ streamer }

func (s *streamerWithNow) Receive(ctx *Context, msg any) (any, error) {
	if _, ok := msg.(sentNow); ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		return streamCounted{Sent: s.sent}, nil
	}
	return s.streamer.Receive(ctx, msg)
}

// TestStreamedReplies: a streamed call's replies come in order, as they
// are sent, then io.EOF; the producer is never more than StreamWindow
// replies ahead of what its caller has read; the caller's Close stops the
// producer (its Send fails with ErrCallCancelled); an error the producer
// ends with comes after its replies; a Receive that answers as for a Call
// gives one reply; StreamReplies refuses a message sent by Call. In-process
// and across nodes.
func TestStreamedReplies(t *testing.T) {
	s := startTestSystem(t)
	p := startPeer(t)
	for _, tc := range []struct {
		name string
		ref  Ref
	}{
		{"local", spawnStreamer(t, s)},
		{"remote", Ref{Name: "streamer", Kind: "test.streamer", Address: p.addr, ID: "a/streamer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const n = 5 * StreamWindow
			before, err := CallAs[streamCounted](ctx, s, tc.ref, streamCount{})
			if err != nil {
				t.Fatal(err)
			}
			st, err := s.Stream(ctx, tc.ref, streamAsk{N: n})
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				v, err := st.Next(ctx)
				if err != nil {
					t.Fatalf("reply %d: %v", i, err)
				}
				if it, ok := v.(streamItem); !ok || it.I != i {
					t.Fatalf("reply %d: %+v", i, v)
				}
				now, err := CallAs[streamCounted](ctx, s, tc.ref, sentNow{})
				if err != nil {
					t.Fatal(err)
				}
				if ahead := now.Sent - before.Sent - (i + 1); ahead > StreamWindow {
					t.Fatalf("after %d replies read the producer had sent %d: %d ahead, over the window of %d", i+1, now.Sent-before.Sent, ahead, StreamWindow)
				}
			}
			for range 2 {
				if v, err := st.Next(ctx); !errors.Is(err, io.EOF) {
					t.Fatalf("after the last reply: %v, %v; want io.EOF", v, err)
				}
			}

			// Close after 3 replies: the producer stops.
			st, err = s.Stream(ctx, tc.ref, streamAsk{N: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if _, err := st.Next(ctx); err != nil {
					t.Fatal(err)
				}
			}
			st.Close()
			if _, err := st.Next(ctx); !errors.Is(err, ErrStreamClosed) {
				t.Errorf("Next after Close: %v", err)
			}
			c, err := CallAs[streamCounted](ctx, s, tc.ref, streamCount{})
			if err != nil {
				t.Fatal(err)
			}
			if sent := c.Sent - before.Sent - n; !strings.Contains(c.Stopped, ErrCallCancelled.Error()) || sent > 3+StreamWindow {
				t.Errorf("producer after Close: %d sent, stopped by %q; want at most %d, stopped by the cancel", sent, c.Stopped, 3+StreamWindow)
			}

			// The end of Stream's ctx stops the producer too.
			sctx, stop := context.WithCancel(ctx)
			st, err = s.Stream(sctx, tc.ref, streamAsk{N: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Next(ctx); err != nil {
				t.Fatal(err)
			}
			stop()
			if _, err := st.Next(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("Next after the stream's ctx ended: %v", err)
			}
			c2, err := CallAs[streamCounted](ctx, s, tc.ref, streamCount{})
			if err != nil {
				t.Fatal(err)
			}
			if sent := c2.Sent - c.Sent; !strings.Contains(c2.Stopped, ErrCallCancelled.Error()) || sent > 1+StreamWindow {
				t.Errorf("producer after its stream's ctx ended: %d sent, stopped by %q", sent, c2.Stopped)
			}

			// The producer's error comes after its replies.
			st, err = s.Stream(ctx, tc.ref, streamAsk{N: 2, Fail: "out of prompts"})
			if err != nil {
				t.Fatal(err)
			}
			var got []any
			for {
				v, err := st.Next(ctx)
				if err != nil {
					var ae *ActorError
					if !errors.As(err, &ae) || ae.Message != "out of prompts" || len(got) != 2 {
						t.Errorf("stream ending in an error: %v after %v", err, got)
					}
					break
				}
				got = append(got, v)
			}

			// One reply, as for a Call.
			st, err = s.Stream(ctx, tc.ref, streamAsk{Plain: true})
			if err != nil {
				t.Fatal(err)
			}
			if v, err := st.Next(ctx); err != nil || v.(streamItem).I != -1 {
				t.Errorf("plain answer to a stream: %v, %v", v, err)
			}
			if _, err := st.Next(ctx); !errors.Is(err, io.EOF) {
				t.Errorf("after a plain answer: %v", err)
			}

			if _, err := s.Call(ctx, tc.ref, streamAsk{N: 1}); err == nil || !strings.Contains(err.Error(), ErrNotStreamed.Error()) {
				t.Errorf("StreamReplies for a Call: %v", err)
			}
		})
	}
}

func spawnStreamer(t *testing.T, s *System) Ref {
	t.Helper()
	ref, err := s.SpawnLocal(LocalSpawn{Name: "streamer", Kind: "test.streamer", MaxConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	return ref
}
