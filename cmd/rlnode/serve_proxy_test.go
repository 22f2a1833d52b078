package main

import (
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/bodyslot"
	"github.com/rlnode/rlnode/internal/bodyslot/bodyslottest"
)

// TestProxyBoundsRequestsInFlight: the recording proxy bounds, across all
// clients, the requests in progress (--max-requests) and the request
// bodies being passed on (--max-inflight-bytes); past either it answers
// 429 naming the flag, and a body declared over --max-body-bytes is 413.
// (There was no global bound: every connection of every address could
// hold a body in flight; a body over the limit was answered 502.)
func TestProxyBoundsRequestsInFlight(t *testing.T) {
	hold := make(chan struct{})
	arrived := make(chan struct{}, 8)
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Hold") != "" {
			arrived <- struct{}{}
			<-hold
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[]}`)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go upstream.Serve(ln)
	defer upstream.Close()
	url, _, _, _ := startServe(t, "--upstream", "http://"+ln.Addr().String(), "--traces", t.TempDir(),
		"--max-requests", "3", "--max-body-bytes", "1000", "--max-inflight-bytes", "1500")

	post := func(body string, held bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if held {
			req.Header.Set("X-Hold", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error.Message
	}
	body := func(n int) string { return `{"prompt":"` + strings.Repeat("x", n-13) + `"}` }

	// Two held requests: 2 in progress, 1,400 body bytes in flight.
	done := make(chan int, 2)
	for range 2 {
		go func() { code, _ := post(body(700), true); done <- code }()
		<-arrived
	}
	if code, msg := post(body(200), false); code != 429 || !strings.Contains(msg, "--max-inflight-bytes") {
		t.Errorf("a body past the bytes in flight: %d %q, want 429 naming --max-inflight-bytes", code, msg)
	}
	if code, msg := post(body(1200), false); code != 413 || !strings.Contains(msg, "--max-body-bytes") {
		t.Errorf("a body over --max-body-bytes: %d %q, want 413 naming it", code, msg)
	}
	go func() { code, _ := post(body(50), true); done <- code }()
	<-arrived
	if code, msg := post(body(50), false); code != 429 || !strings.Contains(msg, "--max-requests") {
		t.Errorf("a fourth request: %d %q, want 429 naming --max-requests", code, msg)
	}
	close(hold)
	for range 3 {
		if code := <-done; code != 200 {
			t.Errorf("held request: %d, want 200", code)
		}
	}
	if code, msg := post(body(700), false); code != 200 {
		t.Errorf("after the held requests ended: %d %q, want 200", code, msg)
	}
}

// TestProxyCountsKeptAnswersInFlight: what the recorder keeps of answers
// in progress counts against --max-inflight-bytes too, so many large
// answers cannot pin 8 MiB each. (Before, only request bodies counted.)
func TestProxyCountsKeptAnswersInFlight(t *testing.T) {
	hold := make(chan struct{})
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("X-Hold") != "" {
			io.WriteString(w, `{"choices":[{"text":"`+strings.Repeat("x", 1500))
			http.NewResponseController(w).Flush()
			<-hold
		}
		io.WriteString(w, `"}]}`)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go upstream.Serve(ln)
	defer upstream.Close()
	defer close(hold)
	url, _, _, _ := startServe(t, "--upstream", "http://"+ln.Addr().String(), "--traces", t.TempDir(),
		"--max-body-bytes", "1000", "--max-inflight-bytes", "2000")

	req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
	req.Header.Set("X-Hold", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Once the client has the answer's first 1,500 bytes, the recorder holds them.
	if _, err := io.ReadFull(resp.Body, make([]byte, 1500)); err != nil {
		t.Fatal(err)
	}
	resp2, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"`+strings.Repeat("y", 600)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if resp2.StatusCode != 429 || !strings.Contains(string(b), "--max-inflight-bytes") {
		t.Errorf("a 600-byte body while 1,500 answer bytes are kept: %d %s, want 429 naming --max-inflight-bytes", resp2.StatusCode, b)
	}
}

// TestProxyCutsOffTricklingBodies: a request body that falls behind the
// minimum rate is cut off with 408 and its place among --max-requests
// freed, so slow senders cannot fill the proxy's places for everyone.
// (Before, each held its place for up to --read-timeout.)
func TestProxyCutsOffTricklingBodies(t *testing.T) {
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"choices":[]}`)
	})}
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go upstream.Serve(uln)
	defer upstream.Close()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	tf := addTraceFlags(fs)
	fs.Parse([]string{"--upstream", "http://" + uln.Addr().String()})
	lim := &proxyLimits{requests: 3, kept: recordBudget{bytes: 1 << 20}, maxBody: 1 << 10, bodies: bodyslot.Gate{Grace: time.Second, MinRate: 1 << 10, MaxTime: time.Hour}}
	srv := &http.Server{Handler: tf.proxyHandler(nil, lim, slog.New(slog.DiscardHandler))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	var slow []net.Conn
	for range 3 {
		slow = append(slow, bodyslottest.Trickle(t, "http://"+ln.Addr().String(), "/v1/completions", "", `{"prompt":`))
	}
	for i, c := range slow {
		code, b, err := bodyslottest.Answer(c)
		if err != nil {
			t.Fatalf("slow sender %d: no answer: %v", i, err)
		}
		if code != http.StatusRequestTimeout || !strings.Contains(string(b), "too slowly") {
			t.Errorf("slow sender %d: %d %s, want 408 saying the body arrives too slowly", i, code, b)
		}
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Post("http://"+ln.Addr().String()+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("a normal request after the slow ones: %d, want 200", resp.StatusCode)
	}
}
