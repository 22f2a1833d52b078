package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
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
