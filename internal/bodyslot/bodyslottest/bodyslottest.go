// Package bodyslottest has the slow senders that the tests of bodyslot's
// users (the native server, the OTLP receiver, the proxy) connect: real
// TCP connections that send a request's head and the first bytes of its
// body, then nothing.
package bodyslottest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Trickle connects to the server at url (http://HOST:PORT) from the
// local address from ("" for any), posts to path a JSON body declared
// 1,000 bytes long and sends only start of it. The connection is closed
// when the test ends.
func Trickle(t testing.TB, url, path, from, start string) net.Conn {
	t.Helper()
	var d net.Dialer
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n%s", path, start)
	return c
}

// Answer reads the server's answer on c (within a minute, a guard against
// hangs): its status and body, or the error that none came.
func Answer(c net.Conn) (status int, body []byte, err error) {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}
