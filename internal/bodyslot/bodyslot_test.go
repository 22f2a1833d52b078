package bodyslot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func request(addr string) (*http.Request, context.CancelFunc) {
	r := httptest.NewRequest("POST", "/", nil)
	r.RemoteAddr = addr
	ctx, cancel := context.WithCancel(r.Context())
	return r.WithContext(ctx), cancel
}

// Take admits Total bodies, at most PerAddr of one address; a taker over
// a cap waits until a place of its own frees, and gives up when its client
// leaves.
func TestTakeCaps(t *testing.T) {
	g := &Gate{Total: 3, PerAddr: 2}
	take := func(addr string) (*Place, bool) {
		r, _ := request(addr)
		return g.Take(r)
	}
	a1, ok1 := take("10.0.0.1:1")
	_, ok2 := take("10.0.0.1:2")
	if !ok1 || !ok2 {
		t.Fatal("the first two of one address were not admitted")
	}
	admitted := make(chan bool)
	go func() { _, ok := take("10.0.0.1:3"); admitted <- ok }() // over the address's cap: waits
	if _, ok := take("10.0.0.2:1"); !ok {
		t.Fatal("another address was not admitted while one waits")
	}
	a1.Release()
	a1.Release() // a second release gives back nothing more
	if !<-admitted {
		t.Fatal("the waiting taker was not admitted once its address's place freed")
	}
	r, cancel := request("10.0.0.3:1") // over the total
	cancel()
	if _, ok := g.Take(r); ok {
		t.Error("a taker whose client left was admitted over the total")
	}
}

// The places of one address are those of its group: an IPv6 client may
// take a fresh address of its /64 for each request, and an IPv4-mapped
// address is its IPv4 one.
func TestTakeGroupsAddresses(t *testing.T) {
	g := &Gate{Total: 4, PerAddr: 1}
	left := func(addr string) bool { // a taker whose client has left: admitted only if a place is free at once
		r, cancel := request(addr)
		cancel()
		_, ok := g.Take(r)
		return ok
	}
	if !left("[2001:db8:1:2::1]:1000") || !left("10.0.0.1:1000") {
		t.Fatal("the first body of an address was not admitted")
	}
	for _, addr := range []string{"[2001:db8:1:2::2]:1000", "[2001:db8:1:2:ffff::1]:1001", "[::ffff:10.0.0.1]:1001"} {
		if left(addr) {
			t.Errorf("%s was admitted over its group's cap", addr)
		}
	}
	if !left("[2001:db8:1:3::1]:1000") {
		t.Error("the next /64 was not admitted")
	}
}

// A body read to its end gives back its address's share while its place
// is still held (for parsing): only reading is slow at a sender's will.
func TestBodyReadFreesAddressShare(t *testing.T) {
	g := &Gate{Total: 2, PerAddr: 1}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := g.Take(r)
		io.ReadAll(p.Body(w, r))
		// Still holding p, a second body of the same address gets a place
		// at once (its client has left: it would not wait).
		r2, cancel := request(r.RemoteAddr)
		cancel()
		p2, ok := g.Take(r2)
		if !ok {
			w.WriteHeader(500)
			return
		}
		p2.Release()
		p.Release()
	}))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
	if g.n != 0 || len(g.byAddr) != 0 {
		t.Errorf("after both released: %d places, %v by address", g.n, g.byAddr)
	}
}

// A body read to its end, and read again, leaves the connection without a
// deadline: net/http then watches it in the background for the client
// leaving, and a deadline passing would cancel the request.
func TestBodyLeavesDeadlineAfterEnd(t *testing.T) {
	g := &Gate{Grace: 50 * time.Millisecond, MinRate: 1 << 30, MaxTime: 50 * time.Millisecond}
	result := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := g.Body(w, r)
		io.ReadAll(b)
		b.Read(make([]byte, 1)) // some readers look once more past the end
		time.Sleep(300 * time.Millisecond)
		result <- r.Context().Err()
	}))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-result; err != nil {
		t.Errorf("the request was cancelled after its body was read: %v", err)
	}
}

// Failure tells a reader of a watched request (a reverse proxy's error
// handler) that its body was cut off, even when what the reader saw was
// the request's context cancelled: net/http cancels it as the read fails.
func TestFailureOfAWatchedBody(t *testing.T) {
	g := &Gate{Grace: 50 * time.Millisecond, MinRate: 1 << 30, MaxTime: time.Second}
	type seen struct{ read, failure, ctx error }
	result := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = Watch(r)
		before := Failure(r.Context())
		_, err := io.ReadAll(g.Body(w, r))
		if before != nil {
			err = fmt.Errorf("Failure before the read: %w", before)
		}
		result <- seen{err, Failure(r.Context()), r.Context().Err()}
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
	got := <-result
	if !errors.Is(got.read, ErrTooSlow) || !errors.Is(got.failure, ErrTooSlow) {
		t.Fatalf("read %v, Failure %v: want both ErrTooSlow", got.read, got.failure)
	}
	t.Logf("the request's context after the read: %v", got.ctx)

	// A read still blocked past its deadline counts as failed already; a
	// deadline not yet passed, or a body read to its end, does not.
	n := &note{}
	ctx := context.WithValue(context.Background(), noteKey{}, n)
	n.set(time.Now().Add(time.Hour), 3, nil)
	if err := Failure(ctx); err != nil {
		t.Errorf("deadline an hour away: %v", err)
	}
	n.set(time.Now().Add(-time.Millisecond), 3, nil)
	if err := Failure(ctx); !errors.Is(err, ErrTooSlow) {
		t.Errorf("deadline passed: %v, want ErrTooSlow", err)
	}
	n.set(time.Time{}, 100, nil)
	if err := Failure(ctx); err != nil {
		t.Errorf("body in: %v", err)
	}
	if err := Failure(context.Background()); err != nil {
		t.Errorf("an unwatched context: %v", err)
	}
}
