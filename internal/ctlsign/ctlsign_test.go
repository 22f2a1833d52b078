package ctlsign

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// served is req as a server receives it: Host from the URL, the body
// readable again.
func served(t *testing.T, method, url, body string, sign func(*http.Request)) *http.Request {
	t.Helper()
	out, _ := http.NewRequest(method, url, strings.NewReader(body))
	sign(out)
	in := httptest.NewRequest(method, url, strings.NewReader(body))
	in.Header = out.Header.Clone()
	return in
}

func TestVerify(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	clock := now
	v := NewVerifier(key, func() time.Time { return clock })
	at := func(t0 time.Time) func(*http.Request) {
		return func(r *http.Request) { Sign(r, key, []byte("body"), t0) }
	}
	cases := []struct {
		name   string
		req    *http.Request
		refuse string
	}{
		{"signed now", served(t, "POST", "http://h:1/jobs?x=1", "body", at(now)), ""},
		{"4 minutes behind", served(t, "POST", "http://h:1/jobs", "body", at(now.Add(-4*time.Minute))), ""},
		{"6 minutes ahead", served(t, "POST", "http://h:1/jobs", "body", at(now.Add(6*time.Minute))), "6m0s ahead of this node's clock"},
		{"another key", served(t, "POST", "http://h:1/jobs", "body", func(r *http.Request) { Sign(r, []byte("other"), []byte("body"), now) }), "does not match"},
		{"body signed, other sent", served(t, "POST", "http://h:1/jobs", "other", at(now)), "not the one signed"},
		{"no header", served(t, "POST", "http://h:1/jobs", "body", func(*http.Request) {}), "no RLNODE-HMAC-SHA256"},
		{"short nonce", served(t, "POST", "http://h:1/jobs", "body", func(r *http.Request) {
			r.Header.Set("Authorization", Scheme+" t=1800000000,n=ab,b="+strings.Repeat("0", 64)+",s="+strings.Repeat("0", 64))
		}), "want t=UNIX"},
		{"unknown field", served(t, "POST", "http://h:1/jobs", "body", func(r *http.Request) {
			r.Header.Set("Authorization", Scheme+" t=1,x=2")
		}), "unknown field"},
		{"huge header", served(t, "POST", "http://h:1/jobs", "body", func(r *http.Request) {
			r.Header.Set("Authorization", Scheme+" "+strings.Repeat("t=1,", 100))
		}), "over 256 bytes"},
	}
	for _, c := range cases {
		err := v.Verify(c.req, 1<<10)
		switch {
		case c.refuse == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refuse != "" && (err == nil || !strings.Contains(err.Error(), c.refuse)):
			t.Errorf("%s: %v, want a refusal saying %q", c.name, err, c.refuse)
		}
	}
	// The handler reads the body the verifier read.
	r := served(t, "POST", "http://h:1/jobs", "body", at(now))
	if err := v.Verify(r, 1<<10); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(r.Body); string(b) != "body" {
		t.Errorf("the body after Verify is %q", b)
	}
	// Host is signed: a request sent to h, replayed to another host.
	moved := served(t, "POST", "http://h:1/jobs", "body", at(now))
	moved.Host = "other:1"
	if err := v.Verify(moved, 1<<10); err == nil {
		t.Error("a request signed for h:1 was taken by other:1")
	}
	// A body over the bound.
	big := served(t, "POST", "http://h:1/jobs", strings.Repeat("x", 2000), func(r *http.Request) { Sign(r, key, []byte(strings.Repeat("x", 2000)), now) })
	if err := v.Verify(big, 1<<10); err == nil || !strings.Contains(err.Error(), "over 1024 bytes") {
		t.Errorf("2000-byte body under a 1024 bound: %v", err)
	}
	// Replay within the window, then its nonce forgotten after it: an
	// old copy is refused by its time.
	r1 := served(t, "GET", "http://h:1/jobs", "", func(r *http.Request) { Sign(r, key, nil, now) })
	r2 := r1.Clone(r1.Context())
	if err := v.Verify(r1, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(r2, 0); err == nil || !strings.Contains(err.Error(), "replayed") {
		t.Errorf("replay: %v", err)
	}
	clock = now.Add(Window + 2*time.Minute)
	r3 := r1.Clone(r1.Context())
	if err := v.Verify(r3, 0); err == nil || !strings.Contains(err.Error(), "clock") {
		t.Errorf("replay after the window: %v", err)
	}
	// The next request taken sweeps the nonces whose window has passed.
	if err := v.Verify(served(t, "GET", "http://h:1/jobs", "", func(r *http.Request) { Sign(r, key, nil, clock) }), 0); err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	left := len(v.nonces)
	v.mu.Unlock()
	if left != 1 {
		t.Errorf("%d nonces remembered, want the last one only", left)
	}
}

// Past MaxNonces in a window, signed requests are refused until older
// nonces expire; the map does not grow.
func TestVerifyNonceBound(t *testing.T) {
	key := []byte("k")
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier(key, func() time.Time { return now })
	for i := 0; i < MaxNonces; i++ {
		v.nonces[fmt.Sprintf("%032x", i)] = now.Unix() + 300
	}
	r := served(t, "GET", "http://h:1/jobs", "", func(r *http.Request) { Sign(r, key, nil, now) })
	if err := v.Verify(r, 0); err == nil || !strings.Contains(err.Error(), "try again later") {
		t.Errorf("past the bound: %v", err)
	}
	if len(v.nonces) != MaxNonces {
		t.Errorf("%d nonces, bound %d", len(v.nonces), MaxNonces)
	}
}

// countingBody counts the bytes read from it.
type countingBody struct {
	r io.Reader
	n int
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func (c *countingBody) Close() error { return nil }

// A request whose signature does not hold is refused before its body is
// read: a stranger's body costs the node neither the memory nor the time
// of up to maxBody bytes; a signed header with another body is refused
// once the body is read.
func TestVerifyReadsNoBodyUnsigned(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier(key, func() time.Time { return now })
	body := strings.Repeat("x", 1<<20)
	for _, c := range []struct {
		name string
		sign func(*http.Request)
	}{
		{"another key", func(r *http.Request) { Sign(r, []byte("not the key"), []byte(body), now) }},
		{"a made-up signature", func(r *http.Request) {
			r.Header.Set("Authorization", fmt.Sprintf("%s t=%d,n=%s,b=%s,s=%s", Scheme, now.Unix(), strings.Repeat("ab", 16), strings.Repeat("0", 64), strings.Repeat("0", 64)))
		}},
	} {
		r := served(t, "POST", "http://h:1/jobs", "", c.sign)
		cb := &countingBody{r: strings.NewReader(body)}
		r.Body = cb
		if err := v.Verify(r, 2<<20); err == nil {
			t.Fatalf("%s: taken", c.name)
		}
		if cb.n != 0 {
			t.Errorf("%s: %d bytes of the body read before the signature was refused", c.name, cb.n)
		}
	}
	// The header of a signed request, with another body than it signed.
	r := served(t, "POST", "http://h:1/jobs", "", func(r *http.Request) { Sign(r, key, []byte("signed"), now) })
	r.Body = io.NopCloser(strings.NewReader("changed"))
	if err := v.Verify(r, 1<<10); err == nil || !strings.Contains(err.Error(), "body") {
		t.Errorf("a signed header with another body: %v", err)
	}
}

// A time so far from the node's clock that the difference, in
// nanoseconds, wraps around int64 is refused like any other time out of
// the window (a nonce kept until such a time would be forgotten at
// once, and the request taken again); the refusal says which way the
// clocks differ.
func TestVerifyFarTimes(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier(key, func() time.Time { return now })
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{time.Unix(now.Unix()-(1<<55), 0), "behind"},
		{time.Unix(now.Unix()+(1<<55), 0), "ahead of"},
		{now.Add(-6 * time.Minute), "6m0s behind"},
		{now.Add(7 * time.Minute), "7m0s ahead of"},
	} {
		r := served(t, "GET", "http://h:1/jobs", "", func(r *http.Request) { Sign(r, key, nil, c.at) })
		if err := v.Verify(r, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("signed at unix %d, the node's clock at %d: %v, want a refusal saying %q", c.at.Unix(), now.Unix(), err, c.want)
		}
	}
}

// VerifyStream reads none of the body: the handler's read that reaches
// its end fails unless the bytes are the ones signed, or when they pass
// the bound; a replay is refused before any byte.
func TestVerifyStream(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	v := NewVerifier(key, func() time.Time { return now })
	body := strings.Repeat("package bytes ", 1000)
	sign := func(r *http.Request) { Sign(r, key, []byte(body), now) }
	cases := []struct {
		name, sent string
		bound      int64
		refuse     string
	}{
		{"the bytes signed", body, 1 << 20, ""},
		{"one byte changed", body[:5000] + "X" + body[5001:], 1 << 20, "not the one signed"},
		{"cut short", body[:100], 1 << 20, "not the one signed"},
		{"bytes added", body + "more", 1 << 20, "not the one signed"},
		{"past the bound", body, 1000, "over"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _ := http.NewRequest("PUT", "http://h:1/packages/x", strings.NewReader(body))
			sign(out)
			in := httptest.NewRequest("PUT", "http://h:1/packages/x", strings.NewReader(c.sent))
			in.Header = out.Header.Clone()
			in.ContentLength = -1
			if err := v.VerifyStream(in, c.bound); err != nil {
				t.Fatalf("VerifyStream: %v", err)
			}
			got, err := io.ReadAll(in.Body)
			switch {
			case c.refuse == "" && (err != nil || string(got) != body):
				t.Errorf("read %d bytes, %v", len(got), err)
			case c.refuse != "" && (err == nil || !strings.Contains(err.Error(), c.refuse)):
				t.Errorf("read %d bytes, %v: want a refusal saying %q", len(got), err, c.refuse)
			}
			// A copy of the same request is refused at once.
			again := httptest.NewRequest("PUT", "http://h:1/packages/x", strings.NewReader(c.sent))
			again.Header, again.ContentLength = out.Header.Clone(), -1
			if err := v.VerifyStream(again, c.bound); err == nil || !strings.Contains(err.Error(), "used before") {
				t.Errorf("replayed: %v", err)
			}
		})
	}
	// Signed with another key: refused before its body is touched.
	out, _ := http.NewRequest("PUT", "http://h:1/packages/x", strings.NewReader(body))
	Sign(out, []byte("another key"), []byte(body), now)
	in := httptest.NewRequest("PUT", "http://h:1/packages/x", strings.NewReader(body))
	in.Header = out.Header.Clone()
	if err := v.VerifyStream(in, 1<<20); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("another key: %v", err)
	}
}
