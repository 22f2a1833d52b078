package outpath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMkdirAll(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"rel": "missing", "chain": "rel", "tofile": "file", "ok": "made"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(tmp, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(tmp, "made"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{"rel", "rel is a symbolic link to " + filepath.Join(tmp, "missing") + ", which does not exist: create that folder (mkdir -p " + filepath.Join(tmp, "missing") + ")"},
		{"chain", "chain is a symbolic link to " + filepath.Join(tmp, "missing") + ", which does not exist"},
		{"rel/sub", "rel is a symbolic link to " + filepath.Join(tmp, "missing") + ", which does not exist"},
		{"tofile", "tofile is a symbolic link to " + file + ", a file, not a folder"},
		{"file", "file is a file, not a folder"},
		{"file/sub", "file is a file, not a folder"},
		{"ok/sub", ""},
		{"new/sub", ""},
	} {
		err := MkdirAll(filepath.Join(tmp, c.dir))
		if c.want == "" {
			if err != nil {
				t.Errorf("MkdirAll(%s): %v", c.dir, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(tmp, c.want)) && !strings.Contains(err.Error(), c.want) {
			t.Errorf("MkdirAll(%s): %v, want %q", c.dir, err, c.want)
		}
	}
}

func TestFile(t *testing.T) {
	tmp := t.TempDir()
	for name, target := range map[string]string{"new": "out.jsonl", "away": "gone/out.jsonl", "dir": "."} {
		if err := os.Symlink(target, filepath.Join(tmp, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ path, want, err string }{
		{"plain.jsonl", "plain.jsonl", ""},
		{"new", "out.jsonl", ""},
		{"away", "", "away is a symbolic link to " + filepath.Join(tmp, "gone/out.jsonl") + ", whose folder " + filepath.Join(tmp, "gone") + " does not exist"},
		{"dir", "", "dir is a symbolic link to " + tmp + ", a folder, not a file"},
		{".", "", "is a folder, not a file"},
	} {
		got, err := File(filepath.Join(tmp, c.path))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("File(%s): %q, %v; want an error saying %q", c.path, got, err, c.err)
			}
			continue
		}
		if err != nil || got != filepath.Join(tmp, c.want) {
			t.Errorf("File(%s): %q, %v; want %s", c.path, got, err, filepath.Join(tmp, c.want))
		}
	}
}
