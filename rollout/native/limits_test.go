package native

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/bodyslot/bodyslottest"
	"github.com/rlnode/rlnode/internal/logbuf"
)

// openAIError is OpenAI's error body.
type openAIError struct {
	Error *struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// checkError checks that an answer is OpenAI's error shape with this
// status, type and code.
func checkError(t *testing.T, what string, status int, body []byte, wantStatus int, typ, code string) {
	t.Helper()
	var e openAIError
	raw := map[string]map[string]json.RawMessage{}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || json.Unmarshal(body, &raw) != nil {
		t.Fatalf("%s: status %d, body %.200q is not an OpenAI error", what, status, body)
	}
	for _, f := range []string{"message", "type", "param", "code"} {
		if _, ok := raw["error"][f]; !ok {
			t.Errorf("%s: error has no %q: %s", what, f, body)
		}
	}
	gotCode := ""
	if e.Error.Code != nil {
		gotCode = *e.Error.Code
	}
	if status != wantStatus || e.Error.Type != typ || gotCode != code || e.Error.Message == "" {
		t.Errorf("%s: status %d, error %+v; want %d, type %q, code %q", what, status, *e.Error, wantStatus, typ, code)
	}
}

// rawRequest sends head (request line and headers, without the blank
// line) and body on a new connection and returns the connection.
func rawRequest(t *testing.T, url, head, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	return c
}

func readResponse(t *testing.T, c net.Conn) (*http.Response, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

// closedWithin reports whether the server closes c within d, reading
// (and dropping) anything it sends first.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

func TestServerRefusesOversizeBody(t *testing.T) {
	url, _ := startServerLimits(t, Limits{MaxBodyBytes: 1 << 10})

	// A declared length over the limit is answered at once: the client has
	// sent 10 of its 100 MB.
	c := rawRequest(t, url, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000",
		`{"model":`)
	resp, b := readResponse(t, c)
	checkError(t, "Content-Length 100 MB", resp.StatusCode, b, 413, "invalid_request_error", "request_too_large")
	if !closedWithin(c, 5*time.Second) {
		t.Error("the connection stays open after refusing a body it did not read")
	}

	// A chunked body without end is refused once it passes the limit.
	c = rawRequest(t, url, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked", "")
	go func() {
		chunk := fmt.Sprintf("%x\r\n%s\r\n", 512, strings.Repeat("x", 512))
		for {
			if _, err := io.WriteString(c, chunk); err != nil {
				return
			}
		}
	}()
	resp, b = readResponse(t, c)
	checkError(t, "endless chunked body", resp.StatusCode, b, 413, "invalid_request_error", "request_too_large")

	// At the limit a request is served.
	pad := strings.Repeat("a", 900)
	code, b := post(t, url+"/v1/completions", `{"model":"tiny","max_tokens":1,"prompt":"hi","user":"`+pad+`"}`)
	if code != 200 {
		t.Errorf("a body under the limit: status %d: %s", code, b)
	}
}

// TestServerRefusesLongPromptBeforeTokenizing: a prompt that cannot fit
// the context is refused from its length, or as soon as tokenizing shows
// it, so handling it allocates about the body's copies, not its tokens
// (merging one 2 MiB word alone holds hundreds of MB).
func TestServerRefusesLongPromptBeforeTokenizing(t *testing.T) {
	e, _ := testEngine(t, Config{})
	s := NewServer(e, "tiny", Limits{MaxBodyBytes: 4 << 20}, nil)
	words := strings.Repeat("lorem ipsum dolor sit amet ", (2<<20)/27)
	word := strings.Repeat("a", 2<<20)
	cases := []struct{ name, path, body, param string }{
		{"completion, words", "/v1/completions", `{"model":"tiny","prompt":"` + words + `"}`, "prompt"},
		{"completion, one word", "/v1/completions", `{"model":"tiny","prompt":"` + word + `"}`, "prompt"},
		{"completion, list", "/v1/completions", `{"model":"tiny","prompt":["hi","` + word + `"]}`, "prompt"},
		{"chat, one word", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"` + word + `"}]}`, "messages"},
		{"chat, words", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"` + words + `"}]}`, "messages"},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("POST", c.path, strings.NewReader(c.body)))
		runtime.ReadMemStats(&after)
		checkError(t, c.name, w.Code, w.Body.Bytes(), 400, "invalid_request_error", "context_length_exceeded")
		if !strings.Contains(w.Body.String(), `"param":"`+c.param+`"`) {
			t.Errorf("%s: %s names no param %q", c.name, w.Body, c.param)
		}
		// The body, its JSON value, the message list's and the decoded
		// string, and some slack.
		if alloc, bound := after.TotalAlloc-before.TotalAlloc, uint64(5*len(c.body))+(1<<20); alloc > bound {
			t.Errorf("%s: the handler allocated %d bytes for a body of %d (bound %d)", c.name, alloc, len(c.body), bound)
		}
	}
}

// TestServerRefusesLongListsBeforeDecoding: a list longer than a request
// may hold (messages, a message's parts or tool calls, tools, prompts) is
// refused from the count of its elements, so handling it allocates about
// the body's copies. An empty element is 2 bytes of JSON and tens of bytes
// decoded: before, 1.4 million empty messages in a 4 MiB body took 550 MB.
func TestServerRefusesLongListsBeforeDecoding(t *testing.T) {
	e, _ := testEngine(t, Config{})
	s := NewServer(e, "tiny", Limits{MaxBodyBytes: 4 << 20}, nil)
	many := func(elem string) string { return elem + strings.Repeat(","+elem, 1_300_000) }
	user := `{"role":"user","content":"hi"}`
	cases := []struct{ name, path, body, param, want string }{
		{"messages", "/v1/chat/completions", `{"model":"tiny","messages":[` + many(`{}`) + `]}`, "messages", "more than 65536 messages"},
		{"parts", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":[` + many(`{}`) + `]}]}`, "messages[0].content", "more than 65536 parts"},
		{"tool calls", "/v1/chat/completions", `{"model":"tiny","messages":[` + user + `,{"role":"assistant","tool_calls":[` + many(`{}`) + `]}]}`, "messages[1].tool_calls", "more than 65536 tool calls"},
		{"tools", "/v1/chat/completions", `{"model":"tiny","messages":[` + user + `],"tools":[` + many(`{}`) + `]}`, "tools", "want 1 to 64 tools, got more than 65536"},
		{"prompt lists", "/v1/completions", `{"model":"tiny","prompt":[` + many(`[]`) + `]}`, "prompt", "a list of more than"},
		{"prompt texts", "/v1/completions", `{"model":"tiny","prompt":[` + many(`""`) + `]}`, "prompt", "a list of more than"},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest("POST", c.path, strings.NewReader(c.body)))
		runtime.ReadMemStats(&after)
		if w.Code != 400 || !strings.Contains(w.Body.String(), `"param":"`+c.param+`"`) || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s: %d %s, want 400 naming %s and saying %q", c.name, w.Code, abbreviate(w.Body.Bytes()), c.param, c.want)
		}
		// The body, its JSON value and the list's, and some slack.
		if alloc, bound := after.TotalAlloc-before.TotalAlloc, uint64(5*len(c.body))+(1<<20); alloc > bound {
			t.Errorf("%s: the handler allocated %d bytes for a body of %d (bound %d)", c.name, alloc, len(c.body), bound)
		}
	}
}

func TestServerCapsRequestsInProgress(t *testing.T) {
	e, _ := testEngine(t, Config{})
	s := NewServer(e, "tiny", Limits{MaxRequests: 1}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := s.HTTPServer()
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String()
	// The one place is held by a request whose body never comes. No other
	// request is sent before it has the place: one that had it first would
	// get the place and the held one a 429, which the server sends only
	// after draining the body that never comes.
	held := rawRequest(t, url, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000", "{")
	deadline := time.Now().Add(10 * time.Second)
	for len(s.adm.requests) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the held request never got the place")
		}
		time.Sleep(5 * time.Millisecond)
	}
	small := `{"model":"tiny","max_tokens":1,"prompt":"hi"}`
	resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(small))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	checkError(t, "second request", resp.StatusCode, b, 429, "requests", "rate_limit_exceeded")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	held.Close()
	for {
		code, b := post(t, url+"/v1/completions", small)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the place is not given back: status %d: %s", code, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAdmissionQueuedTokens(t *testing.T) {
	a := newAdmission(Limits{MaxRequests: 4, MaxQueuedTokens: 100})
	steps := []struct {
		reserve, release int
		status           int // 0: admitted
	}{
		{reserve: 60},
		{reserve: 41, status: 429},
		{reserve: 40},
		{reserve: 1, status: 429},
		{reserve: 101, status: 413},
		{release: 60},
		{reserve: 60},
	}
	for i, s := range steps {
		if s.release > 0 {
			a.release(s.release)
			continue
		}
		e := a.reserve(s.reserve)
		switch {
		case s.status == 0 && e != nil:
			t.Errorf("step %d: reserve(%d): %v", i, s.reserve, e)
		case s.status != 0 && (e == nil || e.status != s.status):
			t.Errorf("step %d: reserve(%d) = %v, want status %d", i, s.reserve, e, s.status)
		}
	}
}

func TestServerRefusesRequestOverTokenLimit(t *testing.T) {
	url, _ := startServerLimits(t, Limits{MaxQueuedTokens: 100})
	code, b := post(t, url+"/v1/completions", `{"model":"tiny","prompt":"hi","n":4,"max_tokens":30}`)
	checkError(t, "n × max_tokens over the limit", code, b, 413, "invalid_request_error", "request_too_large")
	code, b = post(t, url+"/v1/completions", `{"model":"tiny","prompt":"hi","n":2,"max_tokens":30}`)
	if code != 200 {
		t.Errorf("a request under the limit: status %d: %s", code, b)
	}
}

func TestServerClosesSlowAndIdleConnections(t *testing.T) {
	url, _ := startServerLimits(t, Limits{ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	cases := []struct {
		name string
		send func() net.Conn
	}{
		{"slow headers", func() net.Conn {
			return rawRequest(t, url, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: app", "")
		}},
		{"slow body", func() net.Conn {
			return rawRequest(t, url, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100", `{"model":`)
		}},
		{"idle keep-alive", func() net.Conn {
			c := rawRequest(t, url, "GET /health HTTP/1.1\r\nHost: x", "")
			if resp, _ := readResponse(t, c); resp.StatusCode != 200 || resp.Close {
				t.Fatalf("health: status %d, close %v", resp.StatusCode, resp.Close)
			}
			return c
		}},
	}
	for _, c := range cases {
		conn := c.send()
		if !closedWithin(conn, 10*time.Second) {
			t.Errorf("%s: the connection is still open 10 s later, with timeouts of 300 ms", c.name)
		}
	}
}

func TestServerWrongMethod(t *testing.T) {
	url, _ := startServer(t)
	cases := []struct{ method, path, allow string }{
		{"GET", "/v1/completions", "POST"},
		{"PUT", "/v1/chat/completions", "POST"},
		{"POST", "/v1/models", "GET, HEAD"},
		{"DELETE", "/v1/models/tiny", "GET, HEAD"},
		{"POST", "/health", "GET, HEAD"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, url+c.path, bytes.NewReader(nil))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		checkError(t, c.method+" "+c.path, resp.StatusCode, b, 405, "invalid_request_error", "")
		if got := resp.Header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
	code, b := post(t, url+"/v1/nothing", "{}")
	checkError(t, "unknown path", code, b, 404, "invalid_request_error", "")
}

// TestServerDropsClientThatDoesNotRead: a client that asks for a long
// stream and never reads it loses its place once a write waits past the
// write timeout, rather than holding it for good.
func TestServerDropsClientThatDoesNotRead(t *testing.T) {
	url, _ := startServerLimits(t, Limits{MaxRequests: 1, WriteTimeout: 300 * time.Millisecond})
	// A small receive buffer, so the stream (some 16k events of top-20
	// logprobs, megabytes) cannot all wait in the sockets.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"tiny","prompt":"hi","stream":true,"n":64,"max_tokens":250,"logprobs":20}`
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)

	// The stream has begun; from here on it is not read.
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	head := make([]byte, 12)
	if _, err := io.ReadFull(c, head); err != nil || string(head) != "HTTP/1.1 200" {
		t.Fatalf("stream: %q, %v", head, err)
	}

	small := `{"model":"tiny","max_tokens":1,"prompt":"hi"}`
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, b := post(t, url+"/v1/completions", small)
		if code == 200 {
			break
		}
		if code != 429 || time.Now().After(deadline) {
			t.Fatalf("the place is not given back: status %d: %s", code, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nonFinite finds the first NaN or infinity at every position of the
// unrolled loop and its tail, and nothing in finite extremes.
func TestNonFinite(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00001), math.Float32frombits(0xff800001)}
	good := []float32{0, float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 1, -2.5}
	for n := range 11 {
		v := make([]float32, n)
		for i := range v {
			v[i] = good[i%len(good)]
		}
		if got := FirstNonFinite(v); got != -1 {
			t.Fatalf("%d finite values: %d", n, got)
		}
		for at := range n {
			for _, x := range bad {
				w := append([]float32(nil), v...)
				w[at] = x
				if at+1 < n {
					w[n-1] = bad[0] // a later one does not hide the first
				}
				if got := FirstNonFinite(w); got != at {
					t.Fatalf("%v at %d of %d: found at %d", x, at, n, got)
				}
			}
		}
	}
}

// TestServerLogsRefusals: a request refused for the server's bounds is
// logged with the client's address and the reason (it was refused
// without a word in the server's log).
func TestServerLogsRefusals(t *testing.T) {
	e, _ := testEngine(t, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logged logbuf.Buffer
	srv := NewServer(e, "tiny", Limits{MaxBodyBytes: 1 << 10}, slog.New(slog.NewTextHandler(&logged, nil))).HTTPServer()
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := rawRequest(t, "http://"+ln.Addr().String(), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000", `{"model":`)
	resp, b := readResponse(t, c)
	checkError(t, "Content-Length 100 MB", resp.StatusCode, b, 413, "invalid_request_error", "request_too_large")
	line := logged.String()
	for _, want := range []string{`msg="refusing a request"`, "peer=" + c.LocalAddr().String(), "path=/v1/completions", "status=413", "larger than the server's limit of 1024 bytes"} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q lacks %q", line, want)
		}
	}
}

// TestServerSlowBodiesFromOneAddress: clients of one address trickling
// their bodies hold only that address's share of the body-reading places,
// so a request from another address is still answered. (Before, five such
// connections took every place for up to --read-timeout.)
func TestServerSlowBodiesFromOneAddress(t *testing.T) {
	url, _ := startServerLimits(t, Limits{ReadTimeout: time.Hour})
	for range 5 {
		bodyslottest.Trickle(t, url, "/v1/completions", "127.0.0.2", `{"prompt":`)
	}
	if code, b := post(t, url+"/v1/completions", `{"prompt":"hi","max_tokens":2}`); code != 200 {
		t.Errorf("a normal request while slow senders are connected: %d %s", code, b)
	}
}

// TestServerCutsOffTricklingBodies: bodies that fall behind the minimum
// rate are answered 408 and logged, so slow senders from many addresses
// cannot hold the places either.
func TestServerCutsOffTricklingBodies(t *testing.T) {
	e, _ := testEngine(t, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logged logbuf.Buffer
	srv := NewServer(e, "tiny", Limits{ReadTimeout: time.Hour, BodyGrace: time.Second, MinBodyRate: 1 << 10},
		slog.New(slog.NewTextHandler(&logged, nil))).HTTPServer()
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String()
	var slow []net.Conn
	for i := range 5 {
		slow = append(slow, bodyslottest.Trickle(t, url, "/v1/completions", fmt.Sprintf("127.0.0.%d", 2+i), `{"prompt":`))
	}
	if code, b := post(t, url+"/v1/completions", `{"prompt":"hi","max_tokens":2}`); code != 200 {
		t.Errorf("a normal request while slow senders are connected: %d %s", code, b)
	}
	for i, c := range slow {
		code, b, err := bodyslottest.Answer(c)
		if err != nil {
			t.Errorf("slow sender %d: no answer: %v", i, err)
			continue
		}
		checkError(t, fmt.Sprintf("slow sender %d", i), code, b, http.StatusRequestTimeout, "invalid_request_error", "request_timeout")
	}
	if line := logged.String(); !strings.Contains(line, `msg="refusing a request"`) || !strings.Contains(line, "status=408") {
		t.Errorf("refusals not logged: %q", line)
	}
}
