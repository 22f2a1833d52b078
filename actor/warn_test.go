package actor

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Refusals of non-members are logged a few times per window, then counted.
// The window is an hour during the flood and a millisecond after it, so a
// slow machine (200 dials taking over a window) cannot change the count.
func TestNonMemberWarningsAreRateLimited(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	s, err := Start(Config{Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	s.warn.SetWindow(time.Hour, 3)
	s.SetPeerFilter(func(string) bool { return false })
	from := "192.0.2.7:4000"
	hello := append([]byte(bulkHelloMagic), 0, byte(len(from)))
	hello = append(hello, from...)
	refuse := func(k int) {
		for range k {
			c, err := net.Dial("tcp", s.Bulk().Addr())
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Write(hello)
			_, _ = io.ReadAll(c)
			c.Close()
		}
	}
	logged := func() string {
		mu.Lock()
		defer mu.Unlock()
		return logs.String()
	}
	refuse(200)
	if out := logged(); strings.Count(out, "refusing a non-member") != 3 {
		t.Fatalf("200 refusals in one window logged %d times, want 3:\n%s", strings.Count(out, "refusing a non-member"), out)
	}
	s.warn.SetWindow(time.Millisecond, 3)
	time.Sleep(2 * time.Millisecond) // the window that held the flood ends
	refuse(1)
	out := logged()
	if n := strings.Count(out, "refusing a non-member"); n != 4 {
		t.Errorf("201 refusals logged %d times, want 3 then 1:\n%s", n, out)
	}
	if !strings.Contains(out, "suppressed=197") {
		t.Errorf("no line counts the 197 suppressed refusals:\n%s", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A connection closed for the bulk port's cap per address is logged with
// its peer's address, not only the group the cap counts (which, for IPv6,
// is a /64 and names no one host).
func TestBulkCapRefusalNamesPeer(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	s, err := Start(Config{Secret: []byte("cap key"), MaxConnsPerAddr: 1, MaxUnprovenPerAddr: 1,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	held, err := net.Dial("tcp", s.Bulk().Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	over, err := net.Dial("tcp", s.Bulk().Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(over); err != nil {
		t.Fatalf("the connection over the cap: %v, want it closed", err)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if !strings.Contains(out, "bulk: refusing a connection") || !strings.Contains(out, "peer="+over.LocalAddr().String()) ||
		!strings.Contains(out, "127.0.0.1 already holds 1 connections") {
		t.Errorf("the refusal does not name the peer %s and its count:\n%s", over.LocalAddr(), out)
	}
}
