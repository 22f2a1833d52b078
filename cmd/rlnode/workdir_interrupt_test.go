package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A submit interrupted (Ctrl-C) while it uploads its working dir leaves
// no packed copy of the folder in the temporary folder: the node here
// takes the upload's first bytes and then waits.
func TestSubmitWorkingDirInterruptedLeavesNoFile(t *testing.T) {
	laptop, tmp := t.TempDir(), t.TempDir()
	proj := filepath.Join(laptop, "proj")
	writeFiles(t, proj, map[string]string{
		"recipe.yaml":     "name: mine\nmodels: {policy: {init: {}}}\ndata: {dataset: {train: train.jsonl}}\neval: {held_out: 4}\n",
		"train.jsonl":     strings.Repeat("{\"prompt\": \"1+1\", \"answer\": \"2\"}\n", 32),
		"blob/random.bin": string(bytes.Repeat([]byte{1, 2, 3, 5, 7, 11, 13}, 1<<18)),
	})
	key := filepath.Join(laptop, "cluster.key")
	if err := os.WriteFile(key, bytes.Repeat([]byte("k"), 32), 0o600); err != nil {
		t.Fatal(err)
	}
	uploading := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			http.NotFound(w, r)
		case http.MethodPut:
			_, _ = io.ReadFull(r.Body, make([]byte, 1024))
			close(uploading)
			<-release
		}
	}))
	defer srv.Close()
	defer close(release) // before Close, which waits for the handler
	cmd := rlnodeCmd(t, laptop, "submit", filepath.Join(proj, "recipe.yaml"), "--working-dir", proj, "--no-wait", "--address", srv.URL, "--key-file", key)
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-uploading:
	case <-done:
		t.Fatalf("submit ended before its upload:\n%s", out.String())
	case <-time.After(runGuard):
		_ = cmd.Process.Kill()
		t.Fatalf("no upload within %v:\n%s", runGuard, out.String())
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(runGuard):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("submit did not end on Ctrl-C within %v", runGuard)
	}
	left, _ := os.ReadDir(tmp)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if len(names) > 0 {
		t.Errorf("the interrupted submit left %v in its temporary folder %s\n%s", names, tmp, out.String())
	}
}

// writeFiles writes files (slash-separated paths → contents) under root.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
