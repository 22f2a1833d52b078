package readfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Only a regular file within the limit is read; a pipe is refused without
// waiting for a writer and a device without reading it.
func TestRegular(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "config.json")
	if err := os.WriteFile(small, []byte(`{"a": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(dir, "pipe.json")
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	zero := filepath.Join(dir, "zero.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path  string
		limit int64
		want  string // "" for a read of the file
	}{
		{small, 8, ""},
		{small, 7, small + ": 8 bytes, over the 7-byte limit"},
		{pipe, 1 << 20, pipe + ": a named pipe, not a regular file"},
		{zero, 1 << 20, zero + ": a device, not a regular file"},
		{filepath.Join(dir, "missing"), 1, "no such file"},
	} {
		done := make(chan error, 1)
		var got []byte
		go func() {
			var err error
			got, err = Regular(c.path, c.limit)
			done <- err
		}()
		select {
		case err := <-done:
			switch {
			case c.want == "" && (err != nil || string(got) != `{"a": 1}`):
				t.Errorf("%s: %q, %v", c.path, got, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%s (limit %d): %v, want %q", c.path, c.limit, err, c.want)
			}
		case <-time.After(time.Minute):
			if w, err := os.OpenFile(pipe, os.O_WRONLY, 0); err == nil {
				w.Close()
			}
			t.Fatalf("%s: Regular blocked", c.path)
		}
	}
}

func TestStatSaysWhatItIs(t *testing.T) {
	dir := t.TempDir()
	if _, err := Stat(dir); err == nil || !strings.Contains(err.Error(), dir+": a folder, not a regular file") {
		t.Errorf("a folder: %v", err)
	}
}
