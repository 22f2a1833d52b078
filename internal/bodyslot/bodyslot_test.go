package bodyslot

import (
	"context"
	"io"
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
