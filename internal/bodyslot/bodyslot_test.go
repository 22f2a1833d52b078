package bodyslot

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
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
	take := func(addr string) (func(), bool) {
		r, _ := request(addr)
		return g.Take(r)
	}
	releaseA1, ok1 := take("10.0.0.1:1")
	_, ok2 := take("10.0.0.1:2")
	if !ok1 || !ok2 {
		t.Fatal("the first two of one address were not admitted")
	}
	admitted := make(chan bool)
	go func() { _, ok := take("10.0.0.1:3"); admitted <- ok }() // over the address's cap: waits
	if _, ok := take("10.0.0.2:1"); !ok {
		t.Fatal("another address was not admitted while one waits")
	}
	releaseA1()
	if !<-admitted {
		t.Fatal("the waiting taker was not admitted once its address's place freed")
	}
	r, cancel := request("10.0.0.3:1") // over the total
	cancel()
	if _, ok := g.Take(r); ok {
		t.Error("a taker whose client left was admitted over the total")
	}
}
