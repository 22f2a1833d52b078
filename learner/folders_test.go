package learner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

func folderSystem(t *testing.T) *actor.System {
	t.Helper()
	sys, err := actor.Start(actor.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sys.Stop)
	return sys
}

func sumHex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// leftovers lists what is in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// A folder offered by a folder server arrives byte for byte, in chunks
// of any size; hidden files and sub-folders are not offered.
func TestFolderServerRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys := folderSystem(t)
	src := t.TempDir()
	files := map[string][]byte{"config.json": []byte(`{"a":1}`), "model.safetensors": bytes.Repeat([]byte("0123456789"), 1000), "empty": nil}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(src, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, ".hidden"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "feedback"), 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := ServeFolders(sys, "folders-test")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.Allow(src)
	from := func(ctx context.Context, msg any) (any, error) { return sys.Call(ctx, srv.Ref(), msg) }
	reply, err := from(ctx, ManifestRequest{Dir: src})
	if err != nil {
		t.Fatal(err)
	}
	m := reply.(FolderManifest)
	if len(m.Files) != len(files) {
		t.Fatalf("manifest %+v, want the %d regular files only", m.Files, len(files))
	}
	for _, chunk := range []int64{7, 4096, 0} {
		dst := t.TempDir()
		calls := 0
		if err := FetchFolder(ctx, sys, from, m, dst, FetchOptions{Chunk: chunk, Fetched: func(FolderFile, int64) { calls++ }}); err != nil {
			t.Fatalf("chunk %d: %v", chunk, err)
		}
		for n, want := range files {
			got, err := os.ReadFile(filepath.Join(dst, n))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("chunk %d: %s: %d bytes (%v), want %d", chunk, n, len(got), err, len(want))
			}
		}
		if got := leftovers(t, dst); len(got) != len(files) {
			t.Errorf("chunk %d: %v in the destination, want the %d files", chunk, got, len(files))
		}
		if chunk == 7 && calls < 10000/7 {
			t.Errorf("chunk 7: %d chunks arrived", calls)
		}
	}
}

// A folder server offers only what it was told to, and only bytes of the
// files of a manifest it gave.
func TestFolderServerRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys := folderSystem(t)
	root := t.TempDir()
	allowed, under := filepath.Join(root, "model"), filepath.Join(root, "run", "checkpoints")
	for _, d := range []string{allowed, filepath.Join(under, "step-2"), filepath.Join(under, "step-4"), filepath.Join(root, "modelx"), filepath.Join(root, "run", "secret")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), []byte("0123456789"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := ServeFolders(sys, "folders-refuse")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.Allow(allowed)
	srv.AllowUnder(under)
	call := func(msg any) error { _, err := sys.Call(ctx, srv.Ref(), msg); return err }
	for _, ok := range []string{allowed, filepath.Join(under, "step-2"), filepath.Join(under, "step-2", "..", "step-2")} {
		if err := call(ManifestRequest{Dir: ok}); err != nil {
			t.Errorf("manifest of %s: %v", ok, err)
		}
	}
	for _, tc := range []struct {
		name string
		msg  any
		want string
	}{
		{"another folder", ManifestRequest{Dir: "/etc"}, "not a folder offered"},
		{"a sibling sharing the prefix", ManifestRequest{Dir: filepath.Join(root, "modelx")}, "not a folder offered"},
		{"out of the run's checkpoints", ManifestRequest{Dir: filepath.Join(under, "..", "..", "run", "secret")}, "not a folder offered"},
		{"the root itself", ManifestRequest{Dir: under}, "not a folder offered"},
		{"chunk before its manifest", ChunkRequest{Dir: filepath.Join(under, "step-4"), Name: "f", Off: 0, Len: 1}, "manifest first"},
		{"a file not in the manifest", ChunkRequest{Dir: allowed, Name: "../modelx/f", Off: 0, Len: 1}, "has no file"},
		{"past the end", ChunkRequest{Dir: allowed, Name: "f", Off: 5, Len: 6}, "bytes [5, +6) of a 10-byte file"},
		{"a negative offset", ChunkRequest{Dir: allowed, Name: "f", Off: -1, Len: 2}, "of a 10-byte file"},
		{"over a chunk", ChunkRequest{Dir: allowed, Name: "f", Off: 0, Len: FolderChunk + 1}, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "a file not in the manifest" || tc.name == "past the end" || tc.name == "a negative offset" || tc.name == "over a chunk" {
				if err := call(ManifestRequest{Dir: allowed}); err != nil {
					t.Fatal(err)
				}
			}
			if err := call(tc.msg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%+v: %v, want an error saying %q", tc.msg, err, tc.want)
			}
		})
	}
}

// Bytes that do not match what the sender's manifest says are refused, and
// leave nothing in the destination: another content of the same size, a
// chunk of another size, a reply that is no chunk.
func TestFetchFolderRefusesWrongBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys := folderSystem(t)
	good := []byte("the optimizer state")
	m := FolderManifest{Dir: "/staging/save-1", Files: []FolderFile{{Name: "optimizer.safetensors", Size: int64(len(good)), SHA256: sumHex(good)}}}
	for _, tc := range []struct {
		name  string
		reply func(r ChunkRequest) any
		want  string
	}{
		{"other bytes", func(r ChunkRequest) any {
			bad := bytes.ToUpper(good[r.Off : r.Off+r.Len])
			return Chunk{Ref: sys.Bulk().Offer(bad, 1, time.Minute)}
		}, "SHA-256"},
		{"a short chunk", func(r ChunkRequest) any {
			return Chunk{Ref: sys.Bulk().Offer(good[r.Off:r.Off+r.Len-1], 1, time.Minute)}
		}, "offered"},
		{"a lying size", func(r ChunkRequest) any {
			ref := sys.Bulk().Offer(good[r.Off:r.Off+r.Len-1], 1, time.Minute)
			ref.Size = r.Len
			return Chunk{Ref: ref}
		}, "bulk"},
		{"no chunk", func(ChunkRequest) any { return Saved{} }, "want learner.Chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := func(_ context.Context, msg any) (any, error) {
				r, ok := msg.(ChunkRequest)
				if !ok {
					return nil, fmt.Errorf("unexpected %T", msg)
				}
				return tc.reply(r), nil
			}
			dst := t.TempDir()
			err := FetchFolder(ctx, sys, from, m, dst, FetchOptions{Chunk: 8})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want an error saying %q", err, tc.want)
			}
			if got := leftovers(t, dst); len(got) != 0 {
				t.Errorf("left in the destination: %v", got)
			}
		})
	}
}

// A manifest from another node is checked before anything is fetched.
func TestCheckManifest(t *testing.T) {
	ok := sumHex(nil)
	many := make([]FolderFile, MaxFolderFiles+1)
	for i := range many {
		many[i] = FolderFile{Name: fmt.Sprintf("f%d", i), SHA256: ok}
	}
	for _, tc := range []struct {
		name  string
		files []FolderFile
		want  string // "" for none
	}{
		{"fine", []FolderFile{{Name: "model.safetensors", Size: 3, SHA256: ok}, {Name: "config.json", SHA256: ok}}, ""},
		{"a path", []FolderFile{{Name: "../driver_state.json", SHA256: ok}}, "want a plain name"},
		{"a sub-folder", []FolderFile{{Name: "a/b", SHA256: ok}}, "want a plain name"},
		{"hidden", []FolderFile{{Name: ".x", SHA256: ok}}, "want a plain name"},
		{"empty name", []FolderFile{{Name: "", SHA256: ok}}, "want a plain name"},
		{"twice", []FolderFile{{Name: "a", SHA256: ok}, {Name: "a", SHA256: ok}}, "twice"},
		{"negative size", []FolderFile{{Name: "a", Size: -1, SHA256: ok}}, "of -1 bytes"},
		{"sizes that overflow", []FolderFile{{Name: "a", Size: math.MaxInt64 - 1, SHA256: ok}, {Name: "b", Size: 2, SHA256: ok}}, "of 2 bytes"},
		{"bad hash", []FolderFile{{Name: "a", SHA256: "zz"}}, "64 hex digits"},
		{"too many", many, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckManifest(FolderManifest{Dir: "d", Files: tc.files})
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
}

// A learner stages only when it does not see the probe file; staging
// folders of processes that are gone are swept, not those of live ones.
func TestOpenStaging(t *testing.T) {
	home := t.TempDir()
	t.Setenv("RLNODE_HOME", home)
	run := t.TempDir()
	if err := os.WriteFile(filepath.Join(run, ".probe"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := OpenStaging(nil, &Folders{RunDir: run, Probe: ".probe"}, "l"); st != nil || err != nil {
		t.Fatalf("a learner that sees the run folder stages (%v, %v)", st, err)
	}
	if st, err := OpenStaging(nil, nil, "l"); st != nil || err != nil {
		t.Fatalf("a learner without Folders stages (%v, %v)", st, err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Skip(err)
	}
	base := filepath.Join(home, "staging")
	dead := filepath.Join(base, fmt.Sprintf("%d-learner-x-1", gone.Process.Pid))
	live := filepath.Join(base, fmt.Sprintf("%d-learner-y-1", os.Getppid()))
	for _, d := range []string{dead, live} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	st, err := OpenStaging(nil, &Folders{RunDir: filepath.Join(run, "elsewhere"), Probe: ".probe"}, "learner/r0")
	if err != nil || st == nil {
		t.Fatalf("a learner that does not see the run folder: %v, %v", st, err)
	}
	if filepath.Dir(st.Root()) != base {
		t.Errorf("staging %s, want it under %s", st.Root(), base)
	}
	if _, err := os.Stat(dead); err == nil {
		t.Errorf("a gone process's staging %s was kept", dead)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live process's staging was removed: %v", err)
	}
	st.Close()
	if _, err := os.Stat(st.Root()); err == nil {
		t.Errorf("Close left %s", st.Root())
	}
}

// A folder written anew under the same name is offered with its new
// files once the server is told (Changed): the new bytes arrive. Before
// it is told, the manifest it computed stands, and the new bytes are
// refused for not matching it.
func TestFolderServerChanged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys := folderSystem(t)
	root := t.TempDir()
	src := filepath.Join(root, "step-3")
	write := func(b string) {
		t.Helper()
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "model.safetensors"), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("first version")
	srv, err := ServeFolders(sys, "folders-changed")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.AllowUnder(root)
	from := func(ctx context.Context, msg any) (any, error) { return sys.Call(ctx, srv.Ref(), msg) }
	fetch := func() (string, error) {
		t.Helper()
		reply, err := from(ctx, ManifestRequest{Dir: src})
		if err != nil {
			t.Fatal(err)
		}
		dst := t.TempDir()
		if err := FetchFolder(ctx, sys, from, reply.(FolderManifest), dst, FetchOptions{}); err != nil {
			return "", err
		}
		b, err := os.ReadFile(filepath.Join(dst, "model.safetensors"))
		return string(b), err
	}
	if got, err := fetch(); err != nil || got != "first version" {
		t.Fatalf("first fetch: %q, %v", got, err)
	}
	write("second version, longer")
	if _, err := fetch(); err == nil {
		t.Fatal("a folder rewritten without Changed was fetched against its old manifest")
	}
	srv.Changed(src)
	if got, err := fetch(); err != nil || got != "second version, longer" {
		t.Fatalf("after Changed: %q, %v", got, err)
	}
}

// TestFolderServerManyReaders: more readers than the chunks a folder
// server keeps on offer (16 servers staging one model at once) each get
// the folder whole: a reader whose chunk was withdrawn for a newer one
// before it fetched it asks again. Before, it failed with "bulk offer not
// found" and the server (a learner, a vLLM server) did not start.
func TestFolderServerManyReaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sys := folderSystem(t)
	src := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<14) // 256 KiB
	if err := os.WriteFile(filepath.Join(src, "model.safetensors"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := ServeFolders(sys, "folders-many")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.Allow(src)
	from := func(ctx context.Context, msg any) (any, error) { return sys.Call(ctx, srv.Ref(), msg) }
	reply, err := from(ctx, ManifestRequest{Dir: src})
	if err != nil {
		t.Fatal(err)
	}
	m := reply.(FolderManifest)
	const readers = 4 * maxChunkOffers
	errs := make(chan error, readers)
	for range readers {
		go func() {
			dst := t.TempDir()
			err := FetchFolder(ctx, sys, from, m, dst, FetchOptions{Chunk: 4 << 10})
			if err == nil {
				if got, rerr := os.ReadFile(filepath.Join(dst, "model.safetensors")); rerr != nil || !bytes.Equal(got, data) {
					err = fmt.Errorf("the copy differs (%v)", rerr)
				}
			}
			errs <- err
		}()
	}
	for range readers {
		if err := <-errs; err != nil {
			t.Errorf("one of %d readers at once: %v", readers, err)
		}
	}
}

// TestFolderServerLinksOutOfItsRoots: folders offered by root (a run's
// checkpoints, the vLLM weights) are written by rlnode and hold plain
// files: a symbolic link there (a folder, or a file, pointing out: planted
// by whoever else writes a shared run folder) is refused, naming it, so
// the server never hands out the driver host's files through it. A model
// folder offered by name still follows its links (a Hugging Face cache's
// snapshot links to its blobs). Before, the server served what the links
// pointed to.
func TestFolderServerLinksOutOfItsRoots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys := folderSystem(t)
	root := t.TempDir()
	outside, under, model := filepath.Join(root, "home"), filepath.Join(root, "run", "checkpoints"), filepath.Join(root, "model")
	for _, d := range []string{outside, filepath.Join(under, "step-2"), model} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(outside, "id_ed25519")
	for p, b := range map[string]string{secret: "secret", filepath.Join(under, "step-2", "model.safetensors"): "weights", filepath.Join(outside, "blob"): "blob"} {
		if err := os.WriteFile(p, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		filepath.Join(under, "step-9"):                 outside,
		filepath.Join(under, "step-2", "optimizer.pt"): secret,
		filepath.Join(model, "config.json"):            filepath.Join(outside, "blob"),
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := ServeFolders(sys, "folders-links")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.Allow(model)
	srv.AllowUnder(under)
	call := func(msg any) (any, error) { return sys.Call(ctx, srv.Ref(), msg) }
	for _, c := range []struct {
		dir, want string
	}{
		{filepath.Join(under, "step-9"), "symbolic link"},
		{filepath.Join(under, "step-2"), "optimizer.pt"},
	} {
		reply, err := call(ManifestRequest{Dir: c.dir})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("manifest of %s: %+v, %v; want a refusal naming %q", c.dir, reply, err, c.want)
		}
	}
	reply, err := call(ManifestRequest{Dir: model})
	if err != nil {
		t.Fatalf("manifest of a model folder whose file is a link: %v", err)
	}
	if m := reply.(FolderManifest); len(m.Files) != 1 || m.Files[0].Name != "config.json" || m.Files[0].Size != 4 {
		t.Errorf("model folder's manifest %+v, want config.json, the link's 4 bytes", m)
	}
}
