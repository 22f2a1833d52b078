package jobs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/ctlsign"
)

// writeTree makes files (path → content; a path ending in / is a folder)
// under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// listTree lists root's files and folders (folders with a trailing /)
// and the files' contents.
func listTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		if !d.Type().IsRegular() {
			t.Errorf("%s: %s, not a file or folder", rel, d.Type())
			return nil
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func pack(t *testing.T, dir string, excludes ...string) ([]byte, PackStats) {
	t.Helper()
	var buf bytes.Buffer
	st, err := PackWorkingDir(dir, append(append([]string{}, DefaultExcludes...), excludes...), &buf)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	if st.SHA256 != hex.EncodeToString(sum[:]) || st.Packed != int64(buf.Len()) {
		t.Fatalf("stats %+v for a package of %d bytes hashing to %x", st, buf.Len(), sum)
	}
	return buf.Bytes(), st
}

// A folder packs and unpacks to the same files, less .git and what
// --exclude matches; packing again, or after the files' times and
// permissions changed, gives the same bytes.
func TestWorkingDirRoundTrip(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, map[string]string{
		"recipe.yaml":             "name: x\n",
		"data/train.jsonl":        `{"prompt": "1+1", "answer": "2"}` + "\n",
		"data/raw/huge.bin":       "raw",
		"models/tiny/config.json": "{}",
		"empty/":                  "",
		".git/HEAD":               "ref: main\n",
		"sub/.git/config":         "x",
		"out/step.ckpt":           "ckpt",
		"deep/a/b/c/d.txt":        "d",
	})
	if err := os.Chmod(filepath.Join(src, "recipe.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("data/train.jsonl", filepath.Join(src, "train-link.jsonl")); err != nil {
		t.Fatal(err)
	}
	pkg, st := pack(t, src, "*.ckpt", "data/raw")
	if st.Files != 5 || st.NExcluded != 4 {
		t.Errorf("stats %+v: want 5 files, 4 left out (.git twice, *.ckpt, data/raw)", st)
	}
	dst := filepath.Join(t.TempDir(), "wd")
	ust, err := UnpackWorkingDir(bytes.NewReader(pkg), dst)
	if err != nil {
		t.Fatal(err)
	}
	got := listTree(t, dst)
	want := map[string]string{
		"recipe.yaml": "name: x\n", "data/": "", "data/train.jsonl": `{"prompt": "1+1", "answer": "2"}` + "\n",
		"models/": "", "models/tiny/": "", "models/tiny/config.json": "{}", "empty/": "", "sub/": "", "out/": "",
		"deep/": "", "deep/a/": "", "deep/a/b/": "", "deep/a/b/c/": "", "deep/a/b/c/d.txt": "d",
		"train-link.jsonl": `{"prompt": "1+1", "answer": "2"}` + "\n",
	}
	if len(got) != len(want) {
		var names []string
		for n := range got {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Fatalf("unpacked %v, want %d entries", names, len(want))
	}
	for p, body := range want {
		if g, ok := got[p]; !ok || g != body {
			t.Errorf("%s: unpacked %q (there: %v), want %q", p, g, ok, body)
		}
	}
	if ust.Files != st.Files || ust.Bytes != st.Bytes {
		t.Errorf("unpacked %+v, packed %+v", ust, st)
	}
	if fi, err := os.Stat(filepath.Join(dst, "recipe.yaml")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the executable bit: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "data/train.jsonl")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("a plain file's mode: %v %v", fi.Mode(), err)
	}
	// The same bytes again, whatever the files' times.
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(filepath.Join(src, "data/train.jsonl"), old, old); err != nil {
		t.Fatal(err)
	}
	if again, _ := pack(t, src, "*.ckpt", "data/raw"); !bytes.Equal(again, pkg) {
		t.Error("packing the same folder again gave other bytes")
	}
	// A file's content changed: other bytes.
	writeTree(t, src, map[string]string{"data/train.jsonl": "changed\n"})
	if again, _ := pack(t, src, "*.ckpt", "data/raw"); bytes.Equal(again, pkg) {
		t.Error("a changed file packed to the same bytes")
	}
}

// What a folder may not hold is refused, naming the entry and the way out.
func TestPackWorkingDirRefuses(t *testing.T) {
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"secret": "s", "dir/x": "x"})
	cases := []struct {
		name string
		make func(t *testing.T, root string)
		want string
	}{
		{"a link out of the folder", func(t *testing.T, root string) {
			if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "s")); err != nil {
				t.Fatal(err)
			}
		}, "s: a symbolic link to " + filepath.Join(outside, "secret") + ", out of the folder"},
		{"a link up and out", func(t *testing.T, root string) {
			if err := os.Symlink("../../../../../../../../etc/passwd", filepath.Join(root, "p")); err != nil {
				t.Fatal(err)
			}
		}, "p: a symbolic link to /etc/passwd, out of the folder"},
		{"a link to a folder", func(t *testing.T, root string) {
			writeTree(t, root, map[string]string{"d/f": "f"})
			if err := os.Symlink("d", filepath.Join(root, "dl")); err != nil {
				t.Fatal(err)
			}
		}, "dl: a symbolic link to a folder"},
		{"a dangling link", func(t *testing.T, root string) {
			if err := os.Symlink("nowhere", filepath.Join(root, "gone")); err != nil {
				t.Fatal(err)
			}
		}, "gone: a symbolic link that leads nowhere"},
		{"a pipe", func(t *testing.T, root string) {
			if err := mkfifo(filepath.Join(root, "fifo")); err != nil {
				t.Skip(err)
			}
		}, "fifo is no file or folder"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			c.make(t, root)
			var buf bytes.Buffer
			_, err := PackWorkingDir(root, nil, &buf)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--exclude") && !strings.Contains(err.Error(), "make it a folder") && !strings.Contains(err.Error(), "remove it") {
				t.Errorf("err %v, want it to say %q and the way out", err, c.want)
			}
			// Excluded, the same folder packs.
			base := strings.SplitN(c.want, ":", 2)[0]
			base = strings.Fields(base)[0]
			if _, err := PackWorkingDir(root, []string{base}, &buf); err != nil {
				t.Errorf("with --exclude %s: %v", base, err)
			}
		})
	}
	if err := CheckExcludes([]string{"[a-"}); err == nil {
		t.Error("a malformed pattern passed")
	}
	if _, err := PackWorkingDir(filepath.Join(outside, "secret"), nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Errorf("a file as the working dir: %v", err)
	}
}

// tarGz builds a package from raw entries, as a hostile uploader might.
func tarGz(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		h := h
		if h.Format == 0 {
			h.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			if _, err := tw.Write(bytes.Repeat([]byte{'x'}, int(h.Size))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A package is a stranger's upload: only plain files and folders at
// local paths, within bounds, are unpacked; anything else fails the
// whole package, names the entry, and leaves nothing behind (nor
// anything outside the folder).
func TestUnpackWorkingDirRefusesHostilePackages(t *testing.T) {
	defer func(f int, b int64) { unpackFiles, unpackBytes = f, b }(unpackFiles, unpackBytes)
	unpackFiles, unpackBytes = 50, 1<<20
	reg := func(name string, size int64) tar.Header {
		return tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644}
	}
	many := []tar.Header{}
	for i := range 60 {
		many = append(many, reg("f"+strings.Repeat("x", i), 0))
	}
	cases := []struct {
		name    string
		entries []tar.Header
		want    string
	}{
		{"an absolute path", []tar.Header{reg("/tmp/evil", 1)}, `"/tmp/evil": not a plain relative path`},
		{"a path up and out", []tar.Header{reg("../evil", 1)}, `"../evil": not a plain relative path`},
		{"a path that climbs back", []tar.Header{reg("a/../../evil", 1)}, "not a plain relative path"},
		{"a path not clean", []tar.Header{reg("a//b", 1)}, "not a plain relative path"},
		{"a backslash", []tar.Header{reg(`a\..\..\evil`, 1)}, "not a plain relative path"},
		{"a symbolic link", []tar.Header{{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc"}, reg("l/passwd", 1)}, `"l": type "2"`},
		{"a hard link", []tar.Header{{Typeflag: tar.TypeLink, Name: "h", Linkname: "/etc/passwd"}}, `"h": type "1"`},
		{"a device", []tar.Header{{Typeflag: tar.TypeChar, Name: "zero", Devmajor: 1, Devminor: 5}}, `"zero": type "3"`},
		{"a fifo", []tar.Header{{Typeflag: tar.TypeFifo, Name: "p"}}, `"p": type "6"`},
		{"an entry twice", []tar.Header{reg("a", 1), reg("a", 2)}, `"a": twice`},
		{"a file where a folder goes", []tar.Header{reg("a", 1), reg("a/b", 1)}, "is a file, not a folder"},
		{"bytes past the bound", []tar.Header{reg("a", 600<<10), reg("b", 600<<10)}, `"b": its 614400 bytes pass the 1048576 bytes`},
		{"a declared size of exabytes", []tar.Header{reg("bomb", 1<<60)}, `"bomb": its 1152921504606846976 bytes pass`},
		{"too many entries", many, "over 50 files and folders"},
		{"the folder itself", []tar.Header{{Typeflag: tar.TypeDir, Name: "./"}}, "not a plain relative path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var pkg []byte
			if c.name == "a declared size of exabytes" {
				// The header alone: its size field claims 2^60 bytes.
				var buf bytes.Buffer
				zw := gzip.NewWriter(&buf)
				tw := tar.NewWriter(zw)
				h := c.entries[0]
				h.Format = tar.FormatPAX
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
				zw.Close()
				pkg = buf.Bytes()
			} else {
				pkg = tarGz(t, c.entries...)
			}
			parent := t.TempDir()
			dst := filepath.Join(parent, "wd")
			_, err := UnpackWorkingDir(bytes.NewReader(pkg), dst)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to say %q", err, c.want)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("left behind in the parent: %v", entries)
			}
		})
	}
	for _, c := range []struct {
		name string
		pkg  []byte
	}{{"not gzip", []byte("PK\x03\x04 a zip")}, {"gzip of no tar", gz(t, []byte("hello"))}, {"cut short", func() []byte { b := tarGz(t, reg("a", 4096)); return b[:len(b)/2] }()}} {
		t.Run(c.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "wd")
			if _, err := UnpackWorkingDir(bytes.NewReader(c.pkg), dst); err == nil || !strings.Contains(err.Error(), "working dir package") {
				t.Errorf("err %v", err)
			}
			if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("left %s behind: %v", dst, err)
			}
		})
	}
	// An existing folder is never unpacked into.
	dst := t.TempDir()
	if _, err := UnpackWorkingDir(bytes.NewReader(tarGz(t, reg("a", 1))), dst); err == nil {
		t.Error("unpacked into an existing folder")
	}
}

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o600) }

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

// The store keeps a package only when its bytes hash to its name, whole,
// within its bounds, and forgets it PackageTTL after its last use.
func TestPackageStore(t *testing.T) {
	now := time.Now()
	s := &packageStore{dir: filepath.Join(t.TempDir(), "packages"), now: func() time.Time { return now }, uploading: map[string]bool{}}
	body := []byte("a package's bytes")
	sum := sha256.Sum256(body)
	sha := hex.EncodeToString(sum[:])
	if _, err := s.put(strings.Repeat("0", 64), int64(len(body)), bytes.NewReader(body)); err == nil || !strings.Contains(err.Error(), "do not hash to") {
		t.Errorf("misnamed: %v", err)
	}
	if _, err := s.put(sha, int64(len(body))+5, bytes.NewReader(body)); err == nil || !strings.Contains(err.Error(), "bytes came of the") {
		t.Errorf("cut short: %v", err)
	}
	if _, err := s.put(sha, MaxPackageBytes+1, bytes.NewReader(body)); err == nil || !strings.Contains(err.Error(), "over the") {
		t.Errorf("announced over the bound: %v", err)
	}
	if _, ok := s.has(sha); ok {
		t.Fatal("a refused upload is held")
	}
	if held, err := s.put(sha, -1, bytes.NewReader(body)); err != nil || held {
		t.Fatalf("put: held %v, %v", held, err)
	}
	if held, err := s.put(sha, -1, bytes.NewReader(nil)); err != nil || !held {
		t.Errorf("put again: held %v, %v (want held, nothing read)", held, err)
	}
	if fi, err := os.Stat(s.dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the store's folder: %v %v", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(s.dir)
	if len(entries) != 1 {
		t.Errorf("store holds %v, want the package alone (no upload left over)", entries)
	}
	// Used within the TTL it stays; past it, the next upload sweeps it.
	now = now.Add(PackageTTL / 2)
	if _, ok := s.has(sha); !ok {
		t.Fatal("gone within its TTL")
	}
	now = now.Add(PackageTTL - time.Minute)
	other := []byte("another")
	osum := sha256.Sum256(other)
	if _, err := s.put(hex.EncodeToString(osum[:]), -1, bytes.NewReader(other)); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.has(sha); !ok {
		t.Fatal("swept within the TTL of its last use")
	}
	now = now.Add(PackageTTL + time.Minute)
	s.sweep()
	if _, err := s.open(sha); err == nil || !strings.Contains(err.Error(), "upload it again") {
		t.Errorf("past its TTL: %v", err)
	}
	// Over the store's bound: refused, saying so.
	s.limit = int64(len(body)) - 1
	if _, err := s.put(sha, int64(len(body)), bytes.NewReader(body)); !errors.Is(err, errNoRoom) {
		t.Errorf("over the store's bound: %v", err)
	}
}

// The package routes on a node's control endpoint: an upload signed with
// the cluster key is kept once its bytes hash to its name; changed on the
// way, signed with another key, unsigned or misnamed, it is refused and
// nothing is kept.
func TestPackageRoutes(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	ctrl, packages := packageNode(t, "pkgs", key)
	ctx := t.Context()
	c := Client{Control: ctrl, Key: key}
	src := t.TempDir()
	writeTree(t, src, map[string]string{"data/a.jsonl": strings.Repeat("{}\n", 1000)})
	pkg, st := pack(t, src)
	if has, err := c.HasPackage(ctx, st.SHA256); err != nil || has {
		t.Fatalf("before the upload: has %v, %v", has, err)
	}
	if err := c.UploadPackage(ctx, st.SHA256, bytes.NewReader(pkg), int64(len(pkg))); err != nil {
		t.Fatal(err)
	}
	if has, err := c.HasPackage(ctx, st.SHA256); err != nil || !has {
		t.Fatalf("after the upload: has %v, %v", has, err)
	}
	other := append([]byte{}, pkg...)
	other[len(other)/2] ^= 1
	osum := sha256.Sum256(other)
	osha := hex.EncodeToString(osum[:])
	put := func(sha string, body []byte, auth func(*http.Request)) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+ctrl+"/packages/"+sha, bytes.NewReader(body))
		auth(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(msg)
	}
	cases := []struct {
		name, sha string
		body      []byte
		auth      func(*http.Request)
		code      int
		want      string
	}{
		{"signed for other bytes", osha, pkg, func(r *http.Request) { ctlsign.SignHash(r, key, osha, time.Now()) }, http.StatusBadRequest, "not the one signed"},
		{"signed, misnamed", osha, pkg, func(r *http.Request) { ctlsign.Sign(r, key, pkg, time.Now()) }, http.StatusBadRequest, "do not hash to"},
		{"another key", osha, other, func(r *http.Request) { ctlsign.Sign(r, []byte("another"), other, time.Now()) }, http.StatusUnauthorized, "does not match"},
		{"unsigned", osha, other, func(*http.Request) {}, http.StatusUnauthorized, "needs the node's token"},
		{"not a hash", "..%2F..%2Fetc", other, func(r *http.Request) { ctlsign.Sign(r, key, other, time.Now()) }, http.StatusBadRequest, "64 lowercase hex digits"},
	}
	for _, cs := range cases {
		if code, msg := put(cs.sha, cs.body, cs.auth); code != cs.code || !strings.Contains(msg, cs.want) {
			t.Errorf("%s: HTTP %d %s, want %d saying %q", cs.name, code, msg, cs.code, cs.want)
		}
	}
	if has, err := c.HasPackage(ctx, osha); err != nil || has {
		t.Errorf("a refused upload is held: %v %v", has, err)
	}
	entries, _ := os.ReadDir(packages)
	if len(entries) != 1 {
		t.Errorf("the store holds %v, want the one package", entries)
	}
}

// A package that would leave the node's disk under diskReserve free is
// refused, uploaded or unpacked, saying how much is free.
func TestWorkingDirKeepsDiskFree(t *testing.T) {
	defer func(f func(string) (int64, bool)) { diskFree = f }(diskFree)
	diskFree = func(string) (int64, bool) { return diskReserve + 100, true }
	s := &packageStore{dir: filepath.Join(t.TempDir(), "packages"), now: time.Now, uploading: map[string]bool{}}
	body := bytes.Repeat([]byte("x"), 200)
	sum := sha256.Sum256(body)
	if _, err := s.put(hex.EncodeToString(sum[:]), int64(len(body)), bytes.NewReader(body)); !errors.Is(err, errNoRoom) || !strings.Contains(err.Error(), "GiB free") {
		t.Errorf("upload onto a full disk: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "wd")
	pkg := tarGz(t, tar.Header{Typeflag: tar.TypeReg, Name: "small", Size: 50}, tar.Header{Typeflag: tar.TypeReg, Name: "big", Size: 200})
	if _, err := UnpackWorkingDir(bytes.NewReader(pkg), dst); err == nil || !strings.Contains(err.Error(), `"big"`) || !strings.Contains(err.Error(), "GiB free") {
		t.Errorf("unpack onto a full disk: %v", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("left %s behind: %v", dst, err)
	}
}

// packageNode starts node id under key, taking working dirs into its own
// packages folder, with its control endpoint on loopback: the endpoint's
// address and the packages folder.
func packageNode(t *testing.T, id string, key []byte) (string, string) {
	t.Helper()
	t.Setenv("RLNODE_HOME", t.TempDir())
	packages := filepath.Join(t.TempDir(), "packages")
	node := serveJobs(t, cluster.Config{NodeID: id, Key: key}, Config{Executable: "/bin/true", RunsDir: t.TempDir(), PackagesDir: packages})
	ctrl, closeCtrl, err := node.ServeControl("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeCtrl)
	return ctrl, packages
}

// A package is one gzip member holding one whole tar: a tar cut at an
// entry's boundary, or after one of its two end blocks, a tar split over
// gzip members, and bytes after the tar or after the member are refused;
// zero padding to the tar's record size (as GNU tar writes) is not.
func TestUnpackWorkingDirRefusesIncompletePackages(t *testing.T) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	var ends []int // where each entry's data (padded) ends
	for _, name := range []string{"a", "b"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: 100, Mode: 0o644, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(bytes.Repeat([]byte{'x'}, 100)); err != nil {
			t.Fatal(err)
		}
		if err := tw.Flush(); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, raw.Len())
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	whole := raw.Bytes()
	if len(whole) != ends[1]+1024 {
		t.Fatalf("tar of %d bytes, want its entries' %d and two end blocks", len(whole), ends[1])
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, c := range []struct {
		name string
		pkg  []byte
		want string // "" for a package that unpacks
	}{
		{"whole", gz(t, whole), ""},
		{"padded to a tar record", gz(t, cat(whole, make([]byte, 10240-len(whole)%10240))), ""},
		{"cut after the first entry", gz(t, whole[:ends[0]]), "without its end-of-archive blocks"},
		{"cut after the last entry", gz(t, whole[:ends[1]]), "without its end-of-archive blocks"},
		{"cut after one end block", gz(t, whole[:ends[1]+512]), "without its end-of-archive blocks"},
		{"split over two gzip members", cat(gz(t, whole[:ends[0]]), gz(t, whole[ends[0]:])), "without its end-of-archive blocks"},
		{"a second gzip member after the tar", cat(gz(t, whole), gz(t, []byte("more"))), "bytes after the gzip member"},
		{"bytes after the gzip member", cat(gz(t, whole), []byte("junk")), "bytes after the gzip member"},
		{"data after the tar's end", gz(t, cat(whole, []byte("junk"))), "data after the tar's end-of-archive blocks"},
		{"zeros past a record after the tar's end", gz(t, cat(whole, make([]byte, 20*1024))), "data after the tar's end-of-archive blocks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "wd")
			st, err := UnpackWorkingDir(bytes.NewReader(c.pkg), dst)
			if c.want == "" {
				if err != nil || st.Files != 2 {
					t.Fatalf("unpacked %+v, %v: want both files", st, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v (unpacked %+v), want it to say %q", err, st, c.want)
			}
			if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("left %s behind: %v", dst, err)
			}
		})
	}
}

// A package a GET confirmed at the very end of its TTL is not swept
// before the submit that names it opens it: the sweep of an upload beside
// the GET waits for the GET, which gives the package PackageTTL more.
func TestPackageConfirmedSurvivesTheSweep(t *testing.T) {
	now := time.Now()
	s := &packageStore{dir: filepath.Join(t.TempDir(), "packages"), now: func() time.Time { return now }, uploading: map[string]bool{}}
	body := []byte("a package's bytes")
	sum := sha256.Sum256(body)
	sha := hex.EncodeToString(sum[:])
	if _, err := s.put(sha, int64(len(body)), bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.path(sha))
	if err != nil {
		t.Fatal(err)
	}
	now = fi.ModTime().Add(PackageTTL) // exactly at its TTL
	defer func(f func(*packageStore)) { afterPackageStat = f }(afterPackageStat)
	swept := false
	afterPackageStat = func(s *packageStore) {
		// An upload's sweep, a moment after the GET looked.
		now = now.Add(time.Second)
		if s.mu.TryLock() {
			swept = true
			s.sweep()
			s.mu.Unlock()
		}
	}
	if _, ok := s.has(sha); !ok {
		t.Fatal("GET: not held at its TTL's end")
	}
	afterPackageStat = func(*packageStore) {}
	s.mu.Lock()
	s.sweep()
	s.mu.Unlock()
	f, err := s.open(sha)
	if err != nil {
		t.Fatalf("the submit after a GET answered 200 (a sweep ran beside the GET: %v): %v", swept, err)
	}
	f.Close()
}
