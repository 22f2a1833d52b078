package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/ctlsign"
)

func TestControlGuard(t *testing.T) {
	const token = "s3cret"
	ok := http.NewServeMux()
	ok.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	cases := []struct {
		name    string
		method  string
		host    string
		origin  string
		auth    string
		namesOK bool
		want    int
	}{
		{"status by address", "GET", "127.0.0.1:9000", "", "", false, http.StatusAccepted},
		{"status as localhost", "GET", "localhost:9000", "", "", false, http.StatusAccepted},
		{"status over IPv6", "GET", "[::1]:9000", "", "", false, http.StatusAccepted},
		{"status from its own page", "GET", "127.0.0.1:9000", "http://127.0.0.1:9000", "", false, http.StatusAccepted},
		{"status from a foreign page", "GET", "127.0.0.1:9000", "http://evil.example", "", false, http.StatusForbidden},
		{"rebound name", "GET", "evil.example:9000", "", "", false, http.StatusForbidden},
		{"rebound name, same origin", "GET", "evil.example:9000", "http://evil.example:9000", "", false, http.StatusForbidden},
		{"host name beyond loopback", "GET", "gpu-3:9000", "", "", true, http.StatusAccepted},
		{"stop with the token", "POST", "127.0.0.1:9000", "", "Bearer " + token, false, http.StatusAccepted},
		{"stop without a token", "POST", "127.0.0.1:9000", "", "", false, http.StatusUnauthorized},
		{"stop with a wrong token", "POST", "127.0.0.1:9000", "", "Bearer guess", false, http.StatusUnauthorized},
		{"stop with the token in another scheme", "POST", "127.0.0.1:9000", "", "Basic " + token, false, http.StatusUnauthorized},
		{"stop from a foreign page with the token", "POST", "127.0.0.1:9000", "http://evil.example", "Bearer " + token, false, http.StatusForbidden},
		{"stop from a null origin", "POST", "127.0.0.1:9000", "null", "Bearer " + token, false, http.StatusForbidden},
		{"stop beyond loopback without a token", "POST", "gpu-3:9000", "", "", true, http.StatusUnauthorized},
		{"delete without a token", "DELETE", "127.0.0.1:9000", "", "", false, http.StatusUnauthorized},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, "http://"+c.host+"/stop", nil)
			r.Host = c.host
			if c.origin != "" {
				r.Header.Set("Origin", c.origin)
			}
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			w := httptest.NewRecorder()
			controlGuard(token, ctlsign.NewVerifier([]byte("k"), nil), c.namesOK, ok, nil).ServeHTTP(w, r)
			if w.Code != c.want {
				t.Fatalf("%s %s (Host %s, Origin %q, Authorization %q): HTTP %d, want %d: %s", c.method, "/stop", c.host, c.origin, c.auth, w.Code, c.want, w.Body)
			}
		})
	}
}

// ServeControl writes the token file (mode 0600) beside the run file,
// removes both on close, and warns when it listens beyond loopback.
func TestServeControlTokenFileAndWarning(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	var logs bytes.Buffer
	n, err := Start(context.Background(), Config{NodeID: "ctl", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	for _, c := range []struct {
		bind string
		warn bool
	}{{"127.0.0.1:0", false}, {"0.0.0.0:0", true}} {
		logs.Reset()
		ctrl, closeCtrl, err := n.ServeControl(c.bind)
		if err != nil {
			t.Fatal(err)
		}
		tokenFile := filepath.Join(Home(), "run", "ctl.token")
		if fi, err := os.Stat(tokenFile); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: token file %v (%v), want mode 0600", c.bind, fi, err)
		}
		ri, err := FindRunning("ctl")
		if err != nil || ri.Token == "" || ri.Control != ctrl {
			t.Fatalf("%s: FindRunning: %+v, %v", c.bind, ri, err)
		}
		if got := strings.Contains(logs.String(), "control endpoint listens beyond loopback"); got != c.warn {
			t.Errorf("%s: warned %v, want %v: %s", c.bind, got, c.warn, logs.String())
		}
		if err := RequestStop(context.Background(), ctrl, "wrong"); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
			t.Errorf("%s: stop with a wrong token: %v, want HTTP 401", c.bind, err)
		}
		closeCtrl()
		if _, err := os.Stat(tokenFile); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: token file after close: %v", c.bind, err)
		}
	}
	select {
	case <-n.Done():
		t.Fatal("a stop with a wrong token stopped the node")
	default:
	}
}

// The folders ServeControl makes for its run files (a job's node-local
// RLNODE_HOME) are removed on close when empty; a folder that was there
// before, or that holds another node's files, stays.
func TestServeControlRemovesTheFoldersItMade(t *testing.T) {
	n, err := Start(context.Background(), Config{NodeID: "ctl", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	serve := func(t *testing.T) func() {
		t.Helper()
		_, closeCtrl, err := n.ServeControl("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return closeCtrl
	}
	t.Run("made here", func(t *testing.T) {
		parent := t.TempDir()
		home := filepath.Join(parent, "job-1", "home")
		t.Setenv("RLNODE_HOME", home)
		serve(t)()
		if _, err := os.Stat(filepath.Join(parent, "job-1")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after close: %v, want it removed", filepath.Join(parent, "job-1"), err)
		}
		if _, err := os.Stat(parent); err != nil {
			t.Errorf("%s, there before: %v", parent, err)
		}
	})
	t.Run("there before", func(t *testing.T) {
		home := t.TempDir()
		t.Setenv("RLNODE_HOME", home)
		serve(t)()
		if _, err := os.Stat(filepath.Join(home, "run")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("run folder after close: %v, want it removed", err)
		}
		if _, err := os.Stat(home); err != nil {
			t.Errorf("home, there before: %v", err)
		}
	})
	t.Run("holding files", func(t *testing.T) {
		home := filepath.Join(t.TempDir(), "home")
		t.Setenv("RLNODE_HOME", home)
		closeCtrl := serve(t)
		other := filepath.Join(home, "run", "other.json")
		if err := os.WriteFile(other, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		closeCtrl()
		if _, err := os.Stat(other); err != nil {
			t.Errorf("another node's run file after close: %v", err)
		}
	})
}

// A run file left by a killed node whose pid another process took since
// does not keep a node of that id from starting: the file records the
// process's start time too. It used to refuse ("node id ... already runs
// on this host") for as long as the other process lived.
func TestServeControlOverAStaleRunFile(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	runDir := filepath.Join(Home(), "run")
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The parent process is alive and is not this node's process.
	stale := RunInfo{NodeID: "phoenix", Gossip: "127.0.0.1:1", Control: "127.0.0.1:1", PID: os.Getppid(), ProcessStart: "1"}
	b, _ := json.Marshal(stale)
	if err := os.WriteFile(filepath.Join(runDir, "phoenix.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, all, err := RunFiles()
	if err != nil || len(all) != 1 || !strings.Contains(all[0].Gone, "now belongs to another process") {
		t.Fatalf("RunFiles: %+v, %v; want phoenix gone, its pid reused", all, err)
	}
	if _, err := FindRunning("phoenix"); !errors.Is(err, ErrNodeGone) {
		t.Fatalf("FindRunning of the gone node: %v, want ErrNodeGone", err)
	}
	n, err := Start(context.Background(), Config{NodeID: "phoenix", Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctrl, closeCtrl, err := n.ServeControl("127.0.0.1:0")
	if err != nil {
		t.Fatalf("ServeControl over a stale run file: %v", err)
	}
	defer closeCtrl()
	if ri, err := FindRunning("phoenix"); err != nil || ri.Control != ctrl || ri.ProcessStart == "" {
		t.Fatalf("FindRunning after the restart: %+v, %v", ri, err)
	}
}

// Routes added with HandleControl need the node's token whatever their
// method (a job's log is as private as its stop), and answer with it.
func TestHandleControlNeedsTheToken(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	n, err := Start(context.Background(), Config{NodeID: "routes", Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	n.HandleControl("GET /private/{name}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("hello " + r.PathValue("name")))
	}))
	ctrl, closeCtrl, err := n.ServeControl("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeCtrl()
	ri, err := FindRunning("routes")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		auth string
		code int
		body string
	}{{"", http.StatusUnauthorized, "needs the node's token"}, {"Bearer wrong", http.StatusUnauthorized, "needs the node's token"}, {"Bearer " + ri.Token, http.StatusOK, "hello x"}} {
		req, _ := http.NewRequest("GET", "http://"+ctrl+"/private/x", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.Contains(string(b), c.body) {
			t.Errorf("GET with %q: HTTP %d %q, want %d %q", c.auth, resp.StatusCode, b, c.code, c.body)
		}
	}
	// The built-in status stays open to GET.
	if _, err := FetchStatus(context.Background(), ctrl); err != nil {
		t.Errorf("status: %v", err)
	}
}

// A node started with NoResources offers nothing, so nothing is placed
// on it; a spawn's KeepDead out of its bounds is refused.
func TestNoResourcesNodeAndKeepDeadBounds(t *testing.T) {
	n, err := Start(context.Background(), Config{NoResources: true, Memory: NoMemory, CPUs: 8, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	if total, _ := n.Resources(); total[CPU] != 0 || total[GPU] != 0 || total[Memory] != 0 {
		t.Errorf("a node with NoResources offers %v", total)
	}
	if _, err := n.Spawn(context.Background(), "test.counter", SpawnOptions{Resources: Resources{CPU: 1}}); !errors.Is(err, ErrInfeasible) {
		t.Errorf("a one-CPU actor on a node that offers none: %v", err)
	}
	for _, d := range []time.Duration{-time.Second, MaxKeepDead + time.Second} {
		if _, err := n.Spawn(context.Background(), "test.counter", SpawnOptions{KeepDead: d}); err == nil || !strings.Contains(err.Error(), "KeepDead") {
			t.Errorf("KeepDead %v: %v", d, err)
		}
	}
}

// A request signed with the cluster key reaches the token routes without
// the token (how a host without a node submits jobs); one signed with
// another key, replayed, or changed on the way is refused saying why, and
// a signed request does not stop the node.
func TestControlTakesRequestsSignedWithTheClusterKey(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	key := bytes.Repeat([]byte{7}, 32)
	n, err := Start(context.Background(), Config{NodeID: "signed", Key: key, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	n.HandleControl("POST /echo", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(append([]byte("got "), b...))
	}))
	ctrl, closeCtrl, err := n.ServeControl("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeCtrl()
	do := func(req *http.Request) (int, string) {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	signed := func(k []byte, method, path, body string) *http.Request {
		req, _ := http.NewRequest(method, "http://"+ctrl+path, strings.NewReader(body))
		ctlsign.Sign(req, k, []byte(body), time.Now())
		return req
	}
	if code, body := do(signed(key, "POST", "/echo", "ping")); code != http.StatusOK || body != "got ping" {
		t.Fatalf("signed with the cluster key: HTTP %d %q", code, body)
	}
	if code, body := do(signed(bytes.Repeat([]byte{8}, 32), "POST", "/echo", "ping")); code != http.StatusUnauthorized || !strings.Contains(body, "another cluster key") {
		t.Errorf("signed with another key: HTTP %d %q", code, body)
	}
	// The same request twice: the copy is refused.
	req := signed(key, "POST", "/echo", "once")
	again := req.Clone(context.Background())
	again.Body = io.NopCloser(strings.NewReader("once"))
	if code, _ := do(req); code != http.StatusOK {
		t.Fatalf("first send: HTTP %d", code)
	}
	if code, body := do(again); code != http.StatusUnauthorized || !strings.Contains(body, "replayed") {
		t.Errorf("replayed: HTTP %d %q", code, body)
	}
	// Changed on the way: the body, then the path.
	changed := signed(key, "POST", "/echo", "pay 1")
	changed.Body = io.NopCloser(strings.NewReader("pay 9"))
	if code, body := do(changed); code != http.StatusUnauthorized || !strings.Contains(body, "changed on the way") {
		t.Errorf("body changed: HTTP %d %q", code, body)
	}
	moved := signed(key, "POST", "/echo", "x")
	moved.URL.Path = "/stop"
	if code, body := do(moved); code != http.StatusUnauthorized {
		t.Errorf("path changed to /stop: HTTP %d %q", code, body)
	}
	// An hour-old signature.
	old, _ := http.NewRequest("POST", "http://"+ctrl+"/echo", strings.NewReader("x"))
	ctlsign.Sign(old, key, []byte("x"), time.Now().Add(-time.Hour))
	if code, body := do(old); code != http.StatusUnauthorized || !strings.Contains(body, "clock") {
		t.Errorf("an hour old: HTTP %d %q", code, body)
	}
	if code, body := do(signed(key, "POST", "/stop", "")); code != http.StatusForbidden {
		t.Errorf("signed stop: HTTP %d %q", code, body)
	}
	select {
	case <-n.Done():
		t.Fatal("a signed request stopped the node")
	default:
	}
}

// SetNote puts a line in an ALIVE hosted actor's record, seen in Status;
// its death clears it; a note for an actor this node does not host, or
// one not ALIVE, is refused; an over-long note is cut.
func TestSetNote(t *testing.T) {
	a := startLocalNode(t, "note-a", testKey(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "noted"})
	if err != nil {
		t.Fatal(err)
	}
	note := func() string {
		for _, s := range a.Status().Actors {
			if s.Name == "noted" {
				return s.Note
			}
		}
		return "(no actor)"
	}
	if err := a.SetNote("noted", strings.Repeat("x", MaxNoteBytes+10)); err != nil {
		t.Fatal(err)
	}
	if n := note(); len(n) != MaxNoteBytes {
		t.Errorf("an over-long note kept %d bytes, want %d", len(n), MaxNoteBytes)
	}
	// Cut at a character's start (an odd prefix puts a 2-byte one across
	// the bound).
	if err := a.SetNote("noted", "x"+strings.Repeat("é", MaxNoteBytes)); err != nil {
		t.Fatal(err)
	}
	if n := note(); !utf8.ValidString(n) || len(n) > MaxNoteBytes || len(n) < MaxNoteBytes-3 {
		t.Errorf("an over-long note of 2-byte characters kept %d bytes, valid UTF-8 %v; want up to %d, whole characters", len(n), utf8.ValidString(n), MaxNoteBytes)
	}
	if err := a.SetNote("noted", "waiting for room: CPU 4"); err != nil || note() != "waiting for room: CPU 4" {
		t.Errorf("note %q, %v", note(), err)
	}
	if err := a.SetNote("nobody", "x"); err == nil {
		t.Error("a note for an actor that does not exist was taken")
	}
	if err := h.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rec, _ := a.Record("noted")
	for deadline := time.Now().Add(10 * time.Second); rec.State != Dead && time.Now().Before(deadline); rec, _ = a.Record("noted") {
		time.Sleep(20 * time.Millisecond)
	}
	if rec.State != Dead || rec.Note != "" {
		t.Errorf("after its stop: %s, note %q", rec.State, rec.Note)
	}
	if err := a.SetNote("noted", "x"); err == nil {
		t.Error("a note for a DEAD actor was taken")
	}
}

// A stranger's headers are bounded far below net/http's 1 MiB default:
// every connection an address may hold would otherwise buffer as much.
func TestControlBoundsHeaders(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	n, err := Start(context.Background(), Config{NodeID: "headers", Key: bytes.Repeat([]byte{7}, 32), Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctrl, closeCtrl, err := n.ServeControl("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeCtrl()
	req, _ := http.NewRequest("GET", "http://"+ctrl+"/status", nil)
	req.Header.Set("X-Padding", strings.Repeat("x", 200<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 200 KiB header: HTTP %d, want %d", resp.StatusCode, http.StatusRequestHeaderFieldsTooLarge)
	}
}

// A record this node writes anew for a change of state (a restart, a
// loss, a death: bury, restartOrBury, forgetPreviousLife) drops the
// actor's note; those written after a node's loss kept it.
func TestRewriteDropsTheNote(t *testing.T) {
	n := &Node{id: "n1"}
	rec := n.rewrite(ActorRecord{Name: "a", State: Alive, Version: 3, Note: "waiting for room: CPU 1"})
	if rec.Note != "" || rec.Version != 4 || rec.Writer != "n1" {
		t.Errorf("rewritten: %+v", rec)
	}
}

// Forget drops an ended actor's record from status and Record at once,
// on the node asked and, once gossip brings it, on the others; its
// arguments go with it; the name may be spawned again; a live actor's
// record is refused; the directory drops the record deadRecordTTL on.
func TestForget(t *testing.T) {
	key := testKey(t)
	a := startLocalNode(t, "fg-a", key)
	b, err := Start(context.Background(), Config{NodeID: "fg-b", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Join: []string{a.GossipAddress()}, Detection: FastDetection, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "ended", Detached: true, KeepDead: MaxKeepDead})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Forget("ended"); err == nil || !strings.Contains(err.Error(), "stop it first") {
		t.Errorf("forgetting a live actor: %v", err)
	}
	if err := h.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	dead := func(n *Node) bool { rec, ok := n.Record("ended"); return ok && rec.State == Dead }
	waitFor(t, "the record DEAD on both nodes", 20*time.Second, func() bool { return dead(a) && dead(b) })
	listed := func(n *Node) bool {
		for _, s := range n.Status().Actors {
			if s.Name == "ended" {
				return true
			}
		}
		return false
	}
	if err := b.Forget("ended"); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Record("ended"); ok || listed(b) {
		t.Error("a forgotten record is still shown on the node that forgot it")
	}
	waitFor(t, "the forgetting on the other node", 20*time.Second, func() bool { _, ok := a.Record("ended"); return !ok && !listed(a) })
	if raw, ok := a.dir.Actor("ended"); !ok || !raw.Forgotten || raw.Args != nil || raw.KeepDeadMs != 0 {
		t.Errorf("the directory's record: %+v, %v (want it kept, forgotten, without arguments, for deadRecordTTL)", raw, ok)
	}
	if err := a.Forget("ended"); !errors.Is(err, actor.ErrActorNotFound) {
		t.Errorf("forgetting it again: %v", err)
	}
	if err := a.Forget("nobody"); !errors.Is(err, actor.ErrActorNotFound) {
		t.Errorf("forgetting an actor that never was: %v", err)
	}
	// The name is free: a new actor of that name is shown, on both nodes.
	if _, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "ended"}); err != nil {
		t.Fatalf("spawning the forgotten name again: %v", err)
	}
	alive := func(n *Node) bool { rec, ok := n.Record("ended"); return ok && rec.State == Alive && !rec.Forgotten }
	waitFor(t, "the new actor on both nodes", 20*time.Second, func() bool { return alive(a) && alive(b) })
	// A forgotten record leaves the directory after deadRecordTTL.
	if err := a.StopActor(ctx, "ended"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second actor DEAD", 20*time.Second, func() bool { return dead(a) })
	if err := a.Forget("ended"); err != nil {
		t.Fatal(err)
	}
	a.dir.collect(time.Now().Add(deadRecordTTL+time.Second), func(string) bool { return true })
	if _, ok := a.dir.Actor("ended"); ok {
		t.Error("a forgotten record outlived deadRecordTTL")
	}
}

// A node not found among this RLNODE_HOME's run files may run under
// another (each node of a cluster tried on one machine with a home of
// its own): the error says where it looked and that RLNODE_HOME picks
// the folder. It said only that no node ran on this host, while one did.
func TestFindRunningNamesRLNodeHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("RLNODE_HOME", home)
	for _, addr := range []string{"", "127.0.0.1:7946"} {
		_, err := FindRunning(addr)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(home, "run")) || !strings.Contains(err.Error(), "set RLNODE_HOME") {
			t.Errorf("FindRunning(%q) = %v; want it to name %s and RLNODE_HOME", addr, err, filepath.Join(home, "run"))
		}
	}
}

// A node whose control endpoint takes the request and never answers (its
// process stopped with SIGSTOP) is reported in words, with Go's error
// kept underneath: rlnode status said only "context deadline exceeded".
func TestFetchStatusFromANodeThatDoesNotAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := FetchStatus(ctx, strings.TrimPrefix(srv.URL, "http://"))
	if !errors.Is(err, context.DeadlineExceeded) || err == nil || !strings.Contains(err.Error(), "no answer within") || !strings.Contains(err.Error(), "may be stopped") {
		t.Errorf("status from a node that does not answer: %v", err)
	}
}
