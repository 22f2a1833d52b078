package jobs

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
)

// Two submits of working dirs into one new --out at once: one takes the
// folder, the other is refused (409) and leaves the first's working dir
// whole.
func TestWorkingDirSubmitsIntoOneFolder(t *testing.T) {
	node, sha := nodeHolding(t, "one-out", t.TempDir(), map[string]string{"data/a.jsonl": "{}\n", "recipe.yaml": "name: x\n"})
	out := filepath.Join(t.TempDir(), "run")
	req := SubmitRequest{WorkingDir: sha, SourceName: "recipe.yaml", Source: "name: x\n", Out: out}
	var rival *madeRunDir
	var rivalErr error
	defer func(f func()) { outChecked = f }(outChecked)
	first := true
	outChecked = func() {
		if first { // the rival finds the folder as new as this submit did
			first = false
			rival, _, rivalErr = unpackWorkingDir(context.Background(), node, Config{}, req)
		}
	}
	m, code, err := unpackWorkingDir(context.Background(), node, Config{}, req)
	if rivalErr != nil {
		t.Fatalf("the rival submit: %v", rivalErr)
	}
	if err == nil || code != http.StatusConflict || !strings.Contains(err.Error(), "another submit") {
		t.Errorf("the second submit into %s: %d %v (made %v), want 409 naming the other submit", out, code, err, m)
	}
	if got := listTree(t, rival.workingDir); got["data/a.jsonl"] != "{}\n" {
		t.Errorf("the first submit's working dir after the second's refusal: %v", got)
	}
	m.undo()
	rival.undo()
	if left, _ := os.ReadDir(out); len(left) > 0 {
		t.Errorf("both undone, %s holds %v", out, left)
	}
}

// A run folder that holds only a working_dir, left by a submit whose node
// was killed while it unpacked, is refused saying what it holds and what
// to do, and is left as it is.
func TestWorkingDirLeftByAKilledUnpack(t *testing.T) {
	node, sha := nodeHolding(t, "killed", t.TempDir(), map[string]string{"recipe.yaml": "name: x\n"})
	out := filepath.Join(t.TempDir(), "run")
	writeTree(t, filepath.Join(out, WorkingDirFolder), map[string]string{"data/part": "torn"})
	m, code, err := unpackWorkingDir(context.Background(), node, Config{}, SubmitRequest{WorkingDir: sha, SourceName: "recipe.yaml", Source: "name: x\n", Out: out})
	if err == nil || code != http.StatusConflict || !strings.Contains(err.Error(), "holds only working_dir") || !strings.Contains(err.Error(), "remove the folder") {
		t.Errorf("submit into a folder a killed unpack left: %d %v (made %v)", code, err, m)
	}
	if got := listTree(t, out); got["working_dir/data/part"] != "torn" {
		t.Errorf("the folder after the refusal: %v", got)
	}
}

// Without --out, a working-dir submit's run folder is named after the
// recipe, as one without a working dir is, not after its file (every
// recipe.yaml of a sweep made runs/recipe-DATE).
func TestWorkingDirRunFolderName(t *testing.T) {
	runs := t.TempDir()
	node, sha := nodeHolding(t, "named", runs, map[string]string{"recipe.yaml": "name: mine\n"})
	for _, c := range []struct{ recipeName, want string }{{"mine", "mine-"}, {"../bad name", "recipe-"}} {
		m, _, err := unpackWorkingDir(context.Background(), node, Config{RunsDir: runs}, SubmitRequest{WorkingDir: sha, SourceName: "recipes/recipe.yaml", Source: "name: mine\n", RecipeName: c.recipeName})
		if err != nil {
			t.Fatal(err)
		}
		if got := filepath.Base(m.out); filepath.Dir(m.out) != runs || !strings.HasPrefix(got, c.want) {
			t.Errorf("recipe name %q: run folder %s, want %s/%s…", c.recipeName, m.out, runs, c.want)
		}
		m.undo()
	}
}

// nodeHolding starts node id running jobs into runs, and keeps in its
// package store a working dir of files (path → content): the node and
// the package's SHA-256.
func nodeHolding(t *testing.T, id, runs string, files map[string]string) (*cluster.Node, string) {
	t.Helper()
	t.Setenv("RLNODE_HOME", t.TempDir())
	node := serveJobs(t, cluster.Config{NodeID: id}, Config{Executable: "/bin/true", RunsDir: runs, PackagesDir: filepath.Join(t.TempDir(), "packages")})
	src := t.TempDir()
	writeTree(t, src, files)
	pkg, st := pack(t, src)
	host.Lock()
	store := host.store
	host.Unlock()
	if _, err := store.put(st.SHA256, int64(len(pkg)), bytes.NewReader(pkg)); err != nil {
		t.Fatal(err)
	}
	return node, st.SHA256
}

// A node unpacks at most MaxUnpacks working dirs at once: a submit that
// finds every turn taken waits up to unpackWait, then is refused (503)
// naming the node, and so is one whose request ends while it waits;
// neither makes a run folder. Once a turn is free it unpacks.
func TestWorkingDirUnpacksTakeTurns(t *testing.T) {
	node, sha := nodeHolding(t, "turns", t.TempDir(), map[string]string{"recipe.yaml": "name: x\n"})
	defer func(d time.Duration) { unpackWait = d }(unpackWait)
	unpackWait = 50 * time.Millisecond
	for range MaxUnpacks { // every turn taken, as by unpacks in progress
		unpacking <- struct{}{}
	}
	free := func() {
		for range MaxUnpacks {
			<-unpacking
		}
	}
	defer func() {
		if len(unpacking) == MaxUnpacks {
			free()
		}
	}()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"no turn in time", context.Background(), "node turns is unpacking 2 other working dirs"},
		{"request ended", cancelled, "the request ended while waiting for its turn"},
	} {
		out := filepath.Join(t.TempDir(), "run")
		m, code, err := unpackWorkingDir(c.ctx, node, Config{}, SubmitRequest{WorkingDir: sha, SourceName: "recipe.yaml", Source: "name: x\n", Out: out})
		if err == nil || code != http.StatusServiceUnavailable || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %d %v (made %v), want 503 saying %q", c.name, code, err, m, c.want)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: made %s (%v)", c.name, out, err)
		}
	}
	free()
	out := filepath.Join(t.TempDir(), "run")
	m, _, err := unpackWorkingDir(context.Background(), node, Config{}, SubmitRequest{WorkingDir: sha, SourceName: "recipe.yaml", Source: "name: x\n", Out: out})
	if err != nil {
		t.Fatalf("with the turns free: %v", err)
	}
	m.keep()
	if len(unpacking) != 0 {
		t.Errorf("%d turns held after the unpack returned", len(unpacking))
	}
}
