package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/jobs"
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

// Two submits of one folder at once (a sweep's): the second finds the
// node receiving the same package from the first and waits for it, rather
// than fail on the node's 409.
func TestSubmitWorkingDirWaitsForTheSameUpload(t *testing.T) {
	home, work := t.TempDir(), t.TempDir()
	n := startRlnodeIn(t, work, home, "start", "--bind", "127.0.0.1:0", "--node-id", "same", "--cpus", "2")
	dumpOnFailure(t, n)
	proj := filepath.Join(t.TempDir(), "proj")
	writeFiles(t, proj, map[string]string{
		"recipe.yaml": "name: mine\nmodels: {policy: {init: {}}}\ndata: {dataset: {train: train.jsonl}}\neval: {held_out: 4}\n",
		"train.jsonl": strings.Repeat("{\"prompt\": \"1+1\", \"answer\": \"2\"}\n", 32),
	})
	var pkg bytes.Buffer
	st, err := jobs.PackWorkingDir(proj, jobs.DefaultExcludes, &pkg)
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(filepath.Join(home, "run", "same.token"))
	if err != nil {
		t.Fatal(err)
	}
	c := jobs.Client{Control: bannerValue(t, n, "control"), Token: strings.TrimSpace(string(token))}
	// The first submit's upload, under way: half its bytes sent.
	pr, pw := io.Pipe()
	defer pw.Close()
	first := make(chan error, 1)
	go func() { first <- c.UploadPackage(context.Background(), st.SHA256, pr, st.Packed) }()
	b := pkg.Bytes()
	if _, err := pw.Write(b[:len(b)/2]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the first upload's file on the node", func() bool {
		m, _ := filepath.Glob(filepath.Join(home, "packages", ".upload-*"))
		return len(m) > 0
	})
	cmd := rlnodeCmd(t, home, append([]string{"submit", filepath.Join(proj, "recipe.yaml"), "--working-dir", proj, "--no-wait", "--out", filepath.Join(work, "second")}, deterministicRun(2)...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	var out strings.Builder
	for !strings.Contains(out.String(), "waiting for it") {
		if !sc.Scan() {
			_ = cmd.Wait()
			t.Fatalf("the second submit ended without waiting for the first upload:\n%s%s", out.String(), errb.String())
		}
		out.WriteString(sc.Text() + "\n")
	}
	if _, err := pw.Write(b[len(b)/2:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-first; err != nil {
		t.Fatalf("the first upload: %v", err)
	}
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "holds it now") || !strings.Contains(out.String(), "submitted") {
		t.Errorf("the second submit: %v\n%s%s", err, out.String(), errb.String())
	}
}

// A recipe path that climbs out of --working-dir names a file that does
// not travel with the job: the submit refuses it before it packs or
// sends anything, naming the field, the folder and where it leads. What
// a folder it packs leaves out is named.
func TestSubmitWorkingDirRefusesPathsOutOfIt(t *testing.T) {
	laptop := t.TempDir()
	proj := filepath.Join(laptop, "proj")
	rows := strings.Repeat("{\"prompt\": \"1+1\", \"answer\": \"2\"}\n", 32)
	writeFiles(t, laptop, map[string]string{
		"shared.jsonl":      rows,
		"proj/train.jsonl":  rows,
		"proj/sub/in.yaml":  "name: climb\nmodels: {policy: {init: {}}}\ndata: {dataset: {train: ../../shared.jsonl}}\neval: {held_out: 4}\n",
		"proj/sub/ok.yaml":  "name: ok\nmodels: {policy: {init: {}}}\ndata: {dataset: {train: ../train.jsonl}}\neval: {held_out: 4}\n",
		"outside.yaml":      "name: outside\nmodels: {policy: {init: {}}}\ndata: {dataset: {train: train.jsonl}}\neval: {held_out: 4}\n",
		"proj/sub/keep.txt": "x",
		"proj/.git/HEAD":    "ref: refs/heads/main\n",
		"proj/big/blob.bin": "b",
	})
	key := filepath.Join(laptop, "cluster.key")
	if err := os.WriteFile(key, bytes.Repeat([]byte("k"), 32), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing listens here: a refusal comes before any request.
	addr := "http://127.0.0.1:9"
	cases := []struct {
		name string
		args []string
		want string // "" : refused for no path, only for the missing node
	}{
		{"recipe inside, climbing out", []string{filepath.Join(proj, "sub", "in.yaml")}, "data.dataset.train: ../../shared.jsonl leads out of --working-dir"},
		{"--set climbing out", []string{filepath.Join(laptop, "outside.yaml"), "--set", "data.dataset.train=../shared.jsonl"}, "--set data.dataset.train=../shared.jsonl: data.dataset.train: ../shared.jsonl leads out of --working-dir"},
		{"inside, up one folder", []string{filepath.Join(proj, "sub", "ok.yaml"), "--exclude", "big"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string{"submit"}, c.args...), "--working-dir", proj, "--no-wait", "--address", addr, "--key-file", key)
			out, errOut, code := runRlnode(t, laptop, args...)
			switch {
			case c.want != "" && (code != 1 || !strings.Contains(errOut, c.want) || strings.Contains(out, "working dir "+proj)):
				t.Errorf("exit %d, want 1 saying %q before packing\n%s%s", code, c.want, out, errOut)
			case c.want == "" && (strings.Contains(errOut, "leads out of") || !strings.Contains(out, "working dir "+proj) || !strings.Contains(out, "left out .git, big (.git, --exclude)")):
				t.Errorf("a path inside the folder was refused, or the folder not packed, or what was left out not named: exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}
