package traces

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
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
