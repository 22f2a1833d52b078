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
