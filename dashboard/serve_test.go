package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/connlimit/connlimittest"
)

// onceStatus is a cluster whose node answers once, then stops answering.
type onceStatus struct{ calls *atomic.Int32 }

func (f onceStatus) Status(context.Context) (cluster.Status, error) {
	if f.calls.Add(1) > 1 {
		return cluster.Status{}, io.ErrUnexpectedEOF
	}
	return cluster.Status{Node: "a", Nodes: []cluster.NodeStatus{{ID: "a", State: "ALIVE", CPUs: 2,
		Total: cluster.Resources{"CPU": 2}, Used: cluster.Resources{"CPU": 0.5}}}}, nil
}

func get(t *testing.T, u string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestServeAPI(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	writeRun(t, a, 0, 20000, 10000)
	writeRun(t, b, 2, 8, 5)
	if err := os.WriteFile(filepath.Join(b, RecipeFile), []byte("name: quickstart\nseed: 2\nsft:\n  steps: 2\nschedule:\n  steps: 8\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := Serve("127.0.0.1:0", Config{Cluster: onceStatus{calls: new(atomic.Int32)}, RunDirs: []string{root}, PollEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base := strings.TrimSuffix(srv.URL, "/")

	for _, p := range []string{"/cluster", "/runs", "/traces"} {
		code, body, hdr := get(t, base+p)
		if code != 200 || !strings.Contains(body, "/static/app.js") || !strings.Contains(hdr.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s: %d %.80q %v", p, code, body, hdr)
		}
	}
	if code, body, _ := get(t, base+"/static/app.js"); code != 200 || !strings.Contains(body, "clusterPage") {
		t.Errorf("app.js: %d", code)
	}

	// The cluster: the first status, then the failures shown beside it.
	var cv ClusterView
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_, body, _ := get(t, base+"/api/cluster")
		if err := json.Unmarshal([]byte(body), &cv); err != nil {
			t.Fatal(err)
		}
		if cv.Error != "" && len(cv.Nodes) == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(cv.Nodes) != 1 || cv.Nodes[0].ID != "a" || !strings.Contains(cv.Error, "unexpected EOF") || cv.Totals["CPU"] != (ClusterTotal{2, 0.5}) {
		t.Fatalf("cluster view: %+v", cv)
	}

	var list RunList
	_, body, _ := get(t, base+"/api/runs")
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Runs) != 2 || list.Runs[0].Rows != 10000 {
		t.Fatalf("runs: %v %s", err, body)
	}

	// 10,000 rows come back as at most 400 points a metric.
	var sr struct{ Runs []SeriesRun }
	q := url.Values{"run": {a, b, filepath.Join(root, "nope")}, "points": {"400"}}
	_, body, _ = get(t, base+"/api/series?"+q.Encode())
	if err := json.Unmarshal([]byte(body), &sr); err != nil || len(sr.Runs) != 3 {
		t.Fatalf("series: %v %.300s", err, body)
	}
	rw := sr.Runs[0].Metrics["reward_mean"]
	if len(rw.X) != 400 || rw.Raw != 10000 || rw.X[0] != 1 || rw.X[399] != 10000 || sr.Runs[0].Rows != 10000 {
		t.Errorf("reward of 10,000 rows: %d points of %d, from %v", len(rw.X), rw.Raw, rw.X[:3])
	}
	// Zoomed to steps 2,001–2,300: those 300 points, whole.
	q.Set("from", "2001")
	q.Set("to", "2300")
	var zoomed struct{ Runs []SeriesRun }
	_, body, _ = get(t, base+"/api/series?"+q.Encode())
	if err := json.Unmarshal([]byte(body), &zoomed); err != nil {
		t.Fatal(err)
	}
	if z := zoomed.Runs[0].Metrics["reward_mean"]; len(z.X) != 300 || z.Raw != 300 || z.X[0] != 2001 || z.X[299] != 2300 {
		t.Errorf("zoomed reward: %d points of %d, %v…", len(z.X), z.Raw, z.X[:min(3, len(z.X))])
	}
	if _, ok := zoomed.Runs[1].Metrics["reward_mean"]; ok {
		t.Errorf("run b has no step in 2,001–2,300 yet its reward came back")
	}
	if rb := sr.Runs[1].Metrics["reward_mean"]; len(rb.X) != 3 || rb.Raw != 3 {
		t.Errorf("reward of run b (steps 3–5 after 2 warm-up steps): %+v", rb)
	}
	if !strings.Contains(sr.Runs[2].Error, "gone") {
		t.Errorf("a run that is not there: %+v", sr.Runs[2])
	}
	q = url.Values{"run": {"/etc"}}
	if _, body, _ = get(t, base+"/api/series?"+q.Encode()); !strings.Contains(body, "not a run folder under") {
		t.Errorf("a folder outside --runs: %s", body)
	}
	if code, _, _ := get(t, base+"/api/series"); code != http.StatusBadRequest {
		t.Errorf("series of no run: %d", code)
	}

	var d struct {
		Rows  []DiffRow
		Error string
	}
	q = url.Values{"run": {a, b}}
	_, body, _ = get(t, base+"/api/diff?"+q.Encode())
	want := []DiffRow{{"schedule.steps", []string{"20000", "8"}}, {"seed", []string{"1", "2"}}, {"sft.steps", []string{"0", "2"}}}
	if err := json.Unmarshal([]byte(body), &d); err != nil || !reflect.DeepEqual(d.Rows, want) {
		t.Errorf("diff: %v %s", err, body)
	}
}

func TestGuard(t *testing.T) {
	srv, err := Serve("127.0.0.1:0", Config{RunDirs: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base := strings.TrimSuffix(srv.URL, "/")
	resp, err := http.Post(base+"/api/runs", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
	if code, _, _ := get(t, base+"/api/runs", "Host", "evil.example:8265"); code != http.StatusForbidden {
		t.Errorf("a page rebinding its name to loopback: %d, want 403", code)
	}
	if code, _, _ := get(t, base+"/api/runs", "Origin", "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("a cross-origin request: %d, want 403", code)
	}
	if code, _, _ := get(t, base+"/api/runs", "Host", "localhost"); code != 200 {
		t.Errorf("Host localhost: %d", code)
	}

	if _, err := Serve("0.0.0.0:0", Config{}); err == nil || !strings.Contains(err.Error(), "beyond loopback") {
		t.Fatalf("beyond loopback without a token: %v", err)
	}
	open, err := Serve("0.0.0.0:0", Config{Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	u, _ := url.Parse(open.URL)
	obase := "http://127.0.0.1:" + u.Port()
	if code, body, _ := get(t, obase+"/api/runs"); code != http.StatusUnauthorized || !strings.Contains(body, "?token=") {
		t.Errorf("no token: %d %s", code, body)
	}
	if code, _, _ := get(t, obase+"/runs?token=wrong"); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", code)
	}
	code, _, hdr := get(t, obase+"/runs?token=s3cret&run=x")
	cookie := hdr.Get("Set-Cookie")
	if code != http.StatusSeeOther || hdr.Get("Location") != "/runs?run=x" || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("the token: %d %v", code, hdr)
	}
	if code, _, _ := get(t, obase+"/api/runs", "Cookie", strings.Split(cookie, ";")[0]); code != 200 {
		t.Errorf("with the cookie: %d", code)
	}
	if code, _, _ := get(t, obase+"/api/runs", "Authorization", "Bearer s3cret"); code != 200 {
		t.Errorf("with the bearer token: %d", code)
	}
	if code, _, _ := get(t, obase+"/api/runs", "Host", "dash.example:"+u.Port(), "Authorization", "Bearer s3cret"); code != 200 {
		t.Errorf("a host name beyond loopback: %d", code)
	}
}

// TestServeCapsConnectionsPerAddress: one address may hold 32 connections
// open on the dashboard; the next is closed unanswered and the refusal is
// logged with the peer. (It held every connection a client opened, taking
// the descriptors of the node it may share a process with.)
func TestServeCapsConnectionsPerAddress(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), nil))
	srv, err := Serve("127.0.0.1:0", Config{RunDirs: []string{t.TempDir()}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	addr := strings.TrimSuffix(strings.TrimPrefix(srv.URL, "http://"), "/")
	connlimittest.HoldsAtMost(t, addr, "/api/runs", DefaultConnsPerAddr)
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "dashboard: refusing a connection") || !strings.Contains(logged.String(), "peer=127.0.0.1:") {
		t.Errorf("log %q does not say which connection was refused", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
