// Package connlimittest checks, from a test, that an HTTP server holds at
// most a given number of connections from one address.
package connlimittest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// HoldsAtMost opens n+1 connections from this host to the HTTP server at
// addr, each sending GET path and keeping the connection alive: the first
// n must be answered and stay open, the last closed unanswered. The
// connections are closed when the test ends.
func HoldsAtMost(t *testing.T, addr, path string, n int) {
	t.Helper()
	get := "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
	for i := 0; i <= n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, get)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case i < n && err != nil:
			t.Fatalf("connection %d: %v", i+1, err)
		case i < n:
			io.Copy(io.Discard, resp.Body) // kept alive, held open
		case err == nil:
			t.Fatalf("connection %d from one address was answered %s; want it closed", i+1, resp.Status)
		}
	}
}
