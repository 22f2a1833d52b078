package traces

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestProxyUpstreamDown: a call the upstream never answers is answered 502
// naming the upstream, and recorded as a failed call.
func TestProxyUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	u, _ := url.Parse(down)
	sink := &collect{}
	proxy := serve(t, &Recorder{Next: NewProxy(u, nil), Sink: sink, Source: "p"})
	req, _ := http.NewRequest("POST", proxy+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	req.Header.Set(HeaderAgent, "agent-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(body), ln.Addr().String()) {
		t.Errorf("answer %d %s, want 502 naming the upstream", resp.StatusCode, body)
	}
	if len(sink.spans) != 1 {
		t.Fatalf("%d spans recorded", len(sink.spans))
	}
	s := sink.spans[0]
	if s.Status != StatusError || s.ErrorType != "upstream_error" || s.TraceID.String() != "0af7651916cd43dd8448eb211c80319c" ||
		s.ParentID.String() != "b7ad6b7169203331" || s.AgentName != "agent-1" || s.Source != "agent-1" {
		t.Errorf("span %+v", s)
	}
	// Other paths pass through unrecorded.
	if resp, err := http.Get(proxy + "/v1/models"); err == nil {
		resp.Body.Close()
	}
	if len(sink.spans) != 1 {
		t.Errorf("GET /v1/models was recorded")
	}
}

// declaredTooLarge answers 413 without reading a body whose declared
// length is over limit, as rlnode serve does, and echoes smaller ones.
func declaredTooLarge(limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			w.Header().Set("Connection", "close")
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
}

// TestRecorderLeavesTheBodyToNext: the recorder reads a request only as
// its handler does, so a body the handler refuses from its declared
// length is neither waited for nor held (it read 8 MiB of every body
// first: N clients made the recording rlnode serve hold N × 8 MiB, past
// its body bound and its parsing slots), and what the handler reads is
// still recorded.
func TestRecorderLeavesTheBodyToNext(t *testing.T) {
	sink := &collect{}
	url := serve(t, &Recorder{Next: declaredTooLarge(1 << 10), Sink: sink, Source: "s"})
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 100 MB declared, 10 bytes sent: the answer comes without the rest.
	io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{\"model\":")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a declared 100 MB body while the rest is not sent: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", resp.StatusCode)
	}

	body := `{"model":"m","prompt":"hello"}`
	resp2, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp2.Body)
	resp2.Body.Close()
	if len(sink.spans) != 2 {
		t.Fatalf("%d spans recorded, want 2", len(sink.spans))
	}
	if s := sink.spans[1]; s.RequestModel != "m" || !strings.Contains(s.InputMessages, "hello") {
		t.Errorf("the read request was not recorded: %+v", s)
	}
}

// testBudget is a Budget of max bytes.
type testBudget struct {
	mu        sync.Mutex
	max, held int64
}

func (b *testBudget) Take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held+n > b.max {
		return false
	}
	b.held += n
	return true
}

func (b *testBudget) Put(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
}

// TestRecorderKeepsAnswersWithinBudget: an answer kept while the shared
// budget is spent is kept truncated (and marked so), the call passes
// through whole, and what was kept is given back once recorded.
func TestRecorderKeepsAnswersWithinBudget(t *testing.T) {
	sink := &collect{}
	answer := `{"choices":[{"text":"` + strings.Repeat("x", 200) + `"}]}`
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer[:100])
		io.WriteString(w, answer[100:])
	})
	budget := &testBudget{max: 150}
	url := serve(t, &Recorder{Next: next, Sink: sink, Budget: budget})
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != answer {
		t.Errorf("the client got %d bytes, want the whole answer of %d", len(b), len(answer))
	}
	if len(sink.spans) != 1 || !strings.Contains(sink.spans[0].Attributes, "rlnode.record.truncated") {
		t.Fatalf("spans %+v, want one marked truncated", sink.spans)
	}
	if budget.held != 0 {
		t.Errorf("%d bytes still taken from the budget after the call was recorded", budget.held)
	}
}

// TestRecorderKeepsRequestsWithinBudget: with a RequestBudget, a request
// body kept while the budget is spent is kept truncated (and the span
// marked so), the handler still reads it whole, and what was kept is
// given back once the call is recorded. (rlnode serve --model's recorder
// once kept every request in progress whole, up to 8 MiB each.)
func TestRecorderKeepsRequestsWithinBudget(t *testing.T) {
	sink := &collect{}
	body := `{"model":"m","prompt":"` + strings.Repeat("y", 200) + `"}`
	var read int
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		read = len(b)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	})
	budget := &testBudget{max: 100}
	url := serve(t, &Recorder{Next: next, Sink: sink, RequestBudget: budget})
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if read != len(body) {
		t.Errorf("the handler read %d bytes, want the whole body of %d", read, len(body))
	}
	if len(sink.spans) != 1 || !strings.Contains(sink.spans[0].Attributes, "rlnode.record.truncated") {
		t.Fatalf("spans %+v, want one marked truncated", sink.spans)
	}
	if budget.held != 0 {
		t.Errorf("%d bytes still taken from the budget after the call was recorded", budget.held)
	}
}
