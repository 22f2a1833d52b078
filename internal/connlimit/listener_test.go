package connlimit

import (
	"io"
	"net"
	"testing"
	"time"
)

// A listener capped at 3 connections per address keeps 3 open, closes the
// 4th at once (telling Refused who it was, by its group's name), and
// admits a new one after one of the 3 closes; on IPv4 and IPv6 loopback.
func TestListenerCapsPerAddress(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run(host, func(t *testing.T) { testListenerCaps(t, host) })
	}
}

func testListenerCaps(t *testing.T, host string) {
	raw, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		if host == "::1" {
			t.Skipf("no IPv6 loopback here: %v", err)
		}
		t.Fatal(err)
	}
	l := Limit(raw, 3)
	defer l.Close()
	refused := make(chan string, 10)
	l.Refused = func(addr net.Addr, err error) { refused <- addr.String() + ": " + err.Error() }
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var server []net.Conn
	for range 3 {
		defer dial().Close()
		select {
		case c := <-accepted:
			server = append(server, c)
		case <-time.After(5 * time.Second):
			t.Fatal("a connection under the cap was not accepted")
		}
	}
	over := dial()
	over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the connection over the cap: read %v, want EOF (closed by the listener)", err)
	}
	select {
	case r := <-refused:
		if r != over.LocalAddr().String()+": "+host+" already holds 3 connections (the cap per address)" {
			t.Errorf("Refused told %q", r)
		}
	default:
		t.Error("Refused was not told of the connection over the cap")
	}
	if total, _ := l.Gate.Count(host); total != 3 {
		t.Fatalf("counted %d open connections, want 3", total)
	}
	// Closing an accepted connection frees its place.
	server[0].Close()
	if total, _ := l.Gate.Count(host); total != 2 {
		t.Fatalf("counted %d open connections after one closed, want 2", total)
	}
	next := dial()
	defer next.Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("a connection under the cap again was not accepted")
	}
}
