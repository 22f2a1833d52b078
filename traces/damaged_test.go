package traces

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// storeFile writes spans of 20 traces as one Parquet file of a store and
// returns its bytes.
func storeFile(t *testing.T) []byte {
	t.Helper()
	day := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	var spans []Span
	for i := range 20 {
		spans = append(spans, sampleSpan(byte(i), 2, day, "a"))
	}
	var buf bytes.Buffer
	if err := encodeParquet(&buf, spans); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// withFooter returns b with its Parquet footer replaced by what edit makes
// of it.
func withFooter(t *testing.T, b []byte, edit func(*metadata.FileMetaData)) []byte {
	t.Helper()
	n := int(binary.LittleEndian.Uint32(b[len(b)-8:]))
	start := len(b) - 8 - n
	md, err := metadata.NewFileMetaData(b[start:len(b)-8], nil)
	if err != nil {
		t.Fatal(err)
	}
	edit(md)
	var footer bytes.Buffer
	if _, err := md.WriteTo(&footer, nil); err != nil {
		t.Fatal(err)
	}
	out := append(append([]byte(nil), b[:start]...), footer.Bytes()...)
	out = binary.LittleEndian.AppendUint32(out, uint32(footer.Len()))
	return append(out, "PAR1"...)
}

// A damaged file of a store is an error naming what is wrong, and Load
// names and skips it; never a crash. Before, ReadFile trusted the footer:
// a column chunk declaring a length past the file made arrow-go's reader
// allocate it (a terabyte: the process died), a negative one panicked in
// a goroutine of the reader's own (no recover could catch it), and a
// column of another type read as unset spans without a word.
func TestReadHostileStoreFile(t *testing.T) {
	src := storeFile(t)
	cases := []struct {
		name string
		edit func(*metadata.FileMetaData)
		want string
	}{
		{"a column chunk declaring a terabyte", func(md *metadata.FileMetaData) {
			md.RowGroups[0].Columns[0].MetaData.TotalCompressedSize = 1 << 40
		}, "outside the file's"},
		{"a column chunk of negative length inside a list of structs", func(md *metadata.FileMetaData) {
			for _, c := range md.RowGroups[0].Columns {
				if strings.Join(c.MetaData.PathInSchema, ".") == "rewards.list.element.name" {
					c.MetaData.TotalCompressedSize = -70
					return
				}
			}
			panic("no rewards column")
		}, "outside the file's"},
		{"a footer declaring 2^40 bytes of column data", func(md *metadata.FileMetaData) {
			md.RowGroups[0].TotalByteSize = 1 << 40
		}, "uncompressed column data"},
		{"a column of another type", func(md *metadata.FileMetaData) {
			for _, el := range md.FileMetaData.Schema {
				if el.Name == "trace_id" {
					el.Name = "x"
				}
				if el.Name == "input_tokens" {
					el.Name = "trace_id"
				}
			}
		}, `column "trace_id": type int64, want utf8`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			p := filepath.Join(root, "date=2026-01-02", "source=a", "bad.parquet")
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, withFooter(t, src, c.edit), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ReadFile: %v; want an error saying %q", err, c.want)
			}
			got, skipped, err := Load(root, Any())
			if err != nil || len(got) != 0 || len(skipped) != 1 || skipped[0].File != p {
				t.Errorf("Load: %d traces, skipped %v, %v; want %s skipped", len(got), skipped, err, p)
			}
		})
	}
}

// Bytes changed at random in a store's file, in its footer or its pages,
// give an error or every span the file holds, never a crash (the
// dashboard reads the store in its server).
func TestReadDamagedStoreFile(t *testing.T) {
	src := storeFile(t)
	footer := int(binary.LittleEndian.Uint32(src[len(src)-8:]))
	start := len(src) - 8 - footer
	r := rand.New(rand.NewPCG(1, 2))
	bad := filepath.Join(t.TempDir(), "bad.parquet")
	for i := range 1500 {
		b := append([]byte(nil), src...)
		at := start + r.IntN(footer)
		if i%2 == 1 {
			at = 4 + r.IntN(start-4)
		}
		v := byte(r.IntN(256))
		b[at] = v
		if err := os.WriteFile(bad, b, 0o644); err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if e := recover(); e != nil {
					t.Errorf("case %d (byte %d = %#x): panic: %v", i, at, v, e)
				}
			}()
			if got, err := ReadFile(bad); err == nil && len(got) != 20 {
				t.Errorf("case %d (byte %d = %#x): %d spans without an error, want 20", i, at, v, len(got))
			}
		}()
	}
}

// A store file that is a pipe is named and skipped; Load blocked on it,
// as opening a pipe waits for a writer.
func TestStoreFileThatIsAPipe(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "date=2026-01-02", "source=a", "x.parquet")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	type result struct {
		skipped []Skipped
		err     error
	}
	done := make(chan result, 1)
	go func() { _, skipped, err := Load(root, Any()); done <- result{skipped, err} }()
	select {
	case r := <-done:
		if r.err != nil || len(r.skipped) != 1 || r.skipped[0].File != p || !strings.Contains(r.skipped[0].Err.Error(), "not a regular file") {
			t.Errorf("skipped %v, %v; want %s skipped as not a regular file", r.skipped, r.err, p)
		}
	case <-time.After(time.Minute):
		// Let the blocked open go before failing.
		if w, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("Load blocked on a pipe")
	}
}
