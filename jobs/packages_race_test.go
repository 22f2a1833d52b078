package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/ctlsign"
)

func shaOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Uploads beside each other are counted against the store's bound at
// their announced sizes from their start: two that fit alone but not
// together are not both taken.
func TestPackageUploadsShareTheBound(t *testing.T) {
	s := &packageStore{dir: filepath.Join(t.TempDir(), "packages"), now: time.Now, uploading: map[string]bool{}, limit: 1000}
	a, b := bytes.Repeat([]byte("a"), 600), bytes.Repeat([]byte("b"), 600)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.put(shaOf(a), int64(len(a)), pr)
		done <- err
	}()
	if _, err := pw.Write(a[:100]); err != nil { // read by the upload: it is under way
		t.Fatal(err)
	}
	if _, err := s.put(shaOf(b), int64(len(b)), bytes.NewReader(b)); !errors.Is(err, errNoRoom) || !strings.Contains(err.Error(), "in progress") {
		t.Errorf("a second upload of 600 bytes beside one of 600, under a bound of 1000: %v (want refused for room)", err)
	}
	if _, err := pw.Write(a[100:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("the first upload: %v", err)
	}
	if _, ok := s.has(shaOf(b)); ok {
		t.Error("the store holds both packages, 1200 bytes under a bound of 1000")
	}
	if s.reserved != 0 || len(s.temps) != 0 || len(s.uploading) != 0 {
		t.Errorf("after the uploads the store still counts %d bytes, %d files, %d uploads in progress", s.reserved, len(s.temps), len(s.uploading))
	}
}

// An upload left torn by a node killed while it received it (its file
// written to last over 2×uploadIdle ago) is removed when the node next
// serves jobs, and by the next upload's sweep, and no longer counts
// against the bound; a fresh one (another node's on this home, under
// way) is kept.
func TestTornUploadsAreSwept(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	packages := filepath.Join(t.TempDir(), "packages")
	if err := os.MkdirAll(packages, 0o700); err != nil {
		t.Fatal(err)
	}
	torn := func(name string, n int) string {
		p := filepath.Join(packages, name)
		if err := os.WriteFile(p, make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-3 * uploadIdle)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		return p
	}
	atStart := torn(uploadPrefix+"killed", 10)
	serveJobs(t, cluster.Config{NodeID: "torn"}, Config{Executable: "/bin/true", RunsDir: t.TempDir(), PackagesDir: packages})
	if _, err := os.Stat(atStart); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a torn upload outlived the node's start: %v", err)
	}

	s := &packageStore{dir: packages, now: time.Now, uploading: map[string]bool{}, limit: 1000}
	tornFile := torn(uploadPrefix+"1", 900)
	live := filepath.Join(packages, uploadPrefix+"2")
	if err := os.WriteFile(live, make([]byte, 50), 0o600); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("c"), 200)
	if _, err := s.put(shaOf(body), int64(len(body)), bytes.NewReader(body)); err != nil {
		t.Errorf("an upload of 200 bytes beside a torn one of 900 and a live one of 50, under a bound of 1000: %v", err)
	}
	if _, err := os.Stat(tornFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the torn upload is kept: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("an upload under way was removed: %v", err)
	}
}

// An upload that does not say its size is refused before its body is
// kept: the store counts each upload at its size from its start.
func TestPackageUploadNeedsItsSize(t *testing.T) {
	key := bytes.Repeat([]byte{9}, 32)
	ctrl, _ := packageNode(t, "sized", key)
	body := bytes.Repeat([]byte("d"), 4096)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://"+ctrl+"/packages/"+shaOf(body), io.NopCloser(bytes.NewReader(body)))
	req.ContentLength = -1 // sent chunked
	ctlsign.Sign(req, key, body, time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusLengthRequired || !strings.Contains(string(msg), "Content-Length") {
		t.Errorf("an upload of unknown size: HTTP %d %s, want %d", resp.StatusCode, msg, http.StatusLengthRequired)
	}
	if has, err := (Client{Control: ctrl, Key: key}).HasPackage(t.Context(), shaOf(body)); err != nil || has {
		t.Errorf("the upload of unknown size is held: %v %v", has, err)
	}
}

// trickle gives its bytes one at a time, a pause before each.
type trickle struct {
	b     []byte
	pause time.Duration
}

func (t *trickle) Read(p []byte) (int, error) {
	if len(t.b) == 0 {
		return 0, io.EOF
	}
	time.Sleep(t.pause)
	p[0], t.b = t.b[0], t.b[1:]
	return 1, nil
}

// An upload that never goes idle but trickles in (a byte every 100 ms,
// never uploadIdle apart) is cut off once it falls under uploadMinRate,
// saying so, and leaves nothing: it held its room against the store's
// bound, its file and its connection for as long as it trickled.
func TestTrickledUploadIsCutOff(t *testing.T) {
	defer func(d time.Duration, r int64) { uploadIdle, uploadMinRate = d, r }(uploadIdle, uploadMinRate)
	uploadIdle, uploadMinRate = time.Second, 1<<20
	key := bytes.Repeat([]byte{5}, 32)
	ctrl, packages := packageNode(t, "trickled", key)
	body := bytes.Repeat([]byte("t"), 2000) // 200 s at this pace
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+ctrl+"/packages/"+shaOf(body), &trickle{b: body, pause: 100 * time.Millisecond})
	req.ContentLength = int64(len(body))
	ctlsign.SignHash(req, key, shaOf(body), time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the trickled upload was not answered: %v", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 == 2 || !strings.Contains(string(msg), "slower than") {
		t.Errorf("the trickled upload: HTTP %d %s, want refused for its pace", resp.StatusCode, msg)
	}
	if left, _ := filepath.Glob(filepath.Join(packages, "*")); len(left) > 0 {
		t.Errorf("the store keeps %v", left)
	}
}
