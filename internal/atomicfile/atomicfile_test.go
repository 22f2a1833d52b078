package atomicfile_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rlnode/rlnode/internal/atomicfile"
	"github.com/rlnode/rlnode/internal/fsizetest"
)

// leftovers fails t if dir holds anything but want.
func leftovers(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("%s holds %v, want %v", dir, names, want)
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.json")
	for _, s := range []string{"old", "new, longer than the old"} {
		if err := atomicfile.WriteFile(p, []byte(s), 0o640); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != s {
			t.Fatalf("read back %q, %v; want %q", b, err, s)
		}
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, %v; want 0640", st.Mode(), err)
	}
	leftovers(t, dir, "policy.json")

	err := atomicfile.WriteFile(filepath.Join(dir, "missing", "x.json"), nil, 0o644)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "missing", "x.json")) {
		t.Fatalf("into a missing folder: %v, want an error naming the file", err)
	}
}

// A writer that fails midway leaves the old file whole and no temporary
// file behind.
func TestWriteFails(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "benchmark.json")
	if err := atomicfile.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := atomicfile.Write(p, 0o644, func(w io.Writer) error {
		if _, err := w.Write([]byte("half of the ne")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), p) {
		t.Fatalf("Write = %v, want boom naming %s", err, p)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("after a failed write the file holds %q, want the old %q", b, "old")
	}
	leftovers(t, dir, "benchmark.json")
}

// A disk that fills up midway (a file size limit in a child process):
// the write fails with EFBIG, naming the file, and the old file is whole.
func TestWriteFullDisk(t *testing.T) {
	old, new := bytes.Repeat([]byte("o"), 300), bytes.Repeat([]byte("n"), 4096)
	if dir, ok := fsizetest.Child(t); ok {
		p := filepath.Join(dir, "policy.json")
		err := atomicfile.WriteFile(p, new, 0o644)
		if !errors.Is(err, syscall.EFBIG) || !strings.Contains(err.Error(), p) {
			t.Fatalf("write past the file size limit: %v, want EFBIG naming %s", err, p)
		}
		return
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.json")
	if err := atomicfile.WriteFile(p, old, 0o644); err != nil {
		t.Fatal(err)
	}
	fsizetest.Run(t, dir, 1024)
	if b, _ := os.ReadFile(p); !bytes.Equal(b, old) {
		t.Fatalf("after the failed write the file holds %d bytes (%.20q...), want the old %d", len(b), b, len(old))
	}
	leftovers(t, dir, "policy.json")
}
