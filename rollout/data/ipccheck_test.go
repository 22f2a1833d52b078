package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// trajectoryBytes is sampleTurns written as an Arrow IPC file, compressed
// with zstd when zstd is set (as pyarrow may write one).
func trajectoryBytes(t *testing.T, zstd bool) []byte {
	t.Helper()
	var opts []ipc.Option
	if zstd {
		opts = append(opts, ipc.WithZstd())
	}
	var buf bytes.Buffer
	fw, err := ipc.NewFileWriter(&buf, append(opts, ipc.WithSchema(TrajectorySchema))...)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := NewRecord(nil, sampleTurns())
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ipcLayout finds, in an Arrow IPC file, where its footer starts and where
// the first record batch's message and body are.
type ipcLayout struct {
	footer      int      // first byte of the footer flatbuffer
	schema      int      // the schema table, relative to footer
	msg, body   int      // the first record batch's flatbuffer and body, absolute
	batch       int      // its RecordBatch table, relative to msg
	bufs        [][2]int // its buffers: offset in the body, length
	nodesVector int      // its nodes vector's elements, relative to msg
}

func layoutOf(t *testing.T, b []byte) ipcLayout {
	t.Helper()
	var l ipcLayout
	n := int(binary.LittleEndian.Uint32(b[len(b)-10:]))
	l.footer = len(b) - 10 - n
	fb := flatBuf(b[l.footer : len(b)-10])
	root, _ := fb.root()
	s, _, err := fb.tableField(root, 1)
	if err != nil {
		t.Fatal(err)
	}
	l.schema = s
	at, count, err := fb.vectorField(root, 3, ipcBlockSize)
	if err != nil || count == 0 {
		t.Fatalf("no record batch block: %v", err)
	}
	blk := b[l.footer+at:]
	off := int(binary.LittleEndian.Uint64(blk))
	meta := int(binary.LittleEndian.Uint32(blk[8:]))
	l.msg, l.body = off+8, off+meta
	mb := flatBuf(b[l.msg : off+meta])
	mroot, _ := mb.root()
	l.batch, _, err = mb.tableField(mroot, 2)
	if err != nil {
		t.Fatal(err)
	}
	l.nodesVector, _, _ = mb.vectorField(l.batch, 1, 16)
	bat, bn, _ := mb.vectorField(l.batch, 2, 16)
	for i := range bn {
		e := mb[bat+16*i:]
		l.bufs = append(l.bufs, [2]int{int(binary.LittleEndian.Uint64(e)), int(binary.LittleEndian.Uint64(e[8:]))})
	}
	return l
}

// A damaged or hostile trajectory file is an error naming it, never a
// crash. Each case edits one thing a real reader trusts. Before,
// arrow-go's reader allocated a field count read from the schema (the
// process died: "fatal error: runtime: out of memory") and a compressed
// buffer's declared size, and panicked on a row count or list offsets
// that the buffers do not back.
func TestReadHostileTrajectoryFile(t *testing.T) {
	put32 := func(b []byte, at int, v uint32) { binary.LittleEndian.PutUint32(b[at:], v) }
	put64 := func(b []byte, at int, v uint64) { binary.LittleEndian.PutUint64(b[at:], v) }
	cases := []struct {
		name string
		zstd bool
		edit func(b []byte, l ipcLayout)
		want string
	}{
		{"a list field declaring 2^31 children", false, func(b []byte, l ipcLayout) {
			fb := flatBuf(b[l.footer:])
			// The schema's field 6 (prompt_ids) is a list with one child.
			at, _, _ := fb.vectorField(l.schema, 1, 4)
			e := at + 4*6
			o, _ := fb.u32(e)
			v, _, _ := fb.indirect(e+o, 5)
			put32(b, l.footer+v, 1<<31-1)
		}, "declares 2147483647 elements"},
		{"schema metadata declaring 2^30 pairs", false, func(b []byte, l ipcLayout) {
			fb := flatBuf(b[l.footer:])
			v, ok, _ := fb.indirect(l.schema, 2)
			if !ok {
				panic("the schema has no custom metadata")
			}
			put32(b, l.footer+v, 1<<30)
		}, "custom metadata"},
		{"a compressed buffer declaring 2^40 bytes", true, func(b []byte, l ipcLayout) {
			for _, bf := range l.bufs {
				if bf[1] >= 8 {
					put64(b, l.body+bf[0], 1<<40)
					return
				}
			}
			panic("no compressed buffer")
		}, "declares 1099511627776 bytes uncompressed"},
		{"a buffer past the body", false, func(b []byte, l ipcLayout) {
			// The last buffer's length, in the RecordBatch's buffers vector.
			mb := flatBuf(b[l.msg:])
			at, n, _ := mb.vectorField(l.batch, 2, 16)
			put64(b, l.msg+at+16*(n-1)+8, 1<<40)
		}, "outside the"},
		{"a record batch of 2^40 rows", false, func(b []byte, l ipcLayout) {
			at := flatBuf(b[l.msg:]).field(l.batch, 0)
			put64(b, l.msg+at, 1<<40)
		}, ""},
		{"a column of 2^20 rows its buffers do not hold", false, func(b []byte, l ipcLayout) {
			// Node 1 is group_id (int64), whose buffer holds 3 values.
			put64(b, l.msg+l.nodesVector+16, 1<<20)
		}, ""},
		// Another tool's file: nothing checked the numbers it wrote until
		// the learner's step refused a NaN mask, naming no file.
		{"a NaN loss mask", false, func(b []byte, l ipcLayout) {
			// loss_mask (field 9): its list's 2 buffers, then its child's
			// validity and values, 26 to 29.
			binary.LittleEndian.PutUint32(b[l.body+l.bufs[29][0]:], 0x7fc00000)
		}, "loss mask of response token 0 is NaN"},
		{"list offsets past the values", false, func(b []byte, l ipcLayout) {
			// Buffers per field: string 3, int 2, list 2 (+ its child's 2).
			// prompt_ids is field 6: validity and offsets at 14 and 15.
			bf := l.bufs[15]
			put32(b, l.body+bf[0]+4, 1000)
		}, "list offsets"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := trajectoryBytes(t, c.zstd)
			if _, err := UnmarshalTrajectories("whole", b); err != nil {
				t.Fatalf("the file before the edit: %v", err)
			}
			c.edit(b, layoutOf(t, b))
			p := filepath.Join(dir, "bad.arrow")
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadTrajectoryFile(p)
			if err == nil || !strings.Contains(err.Error(), p) || !errors.Is(err, ErrBadTrajectory) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v; want ErrBadTrajectory naming %s and saying %q", err, p, c.want)
			}
		})
	}
}

// Bytes changed at random in a trajectory file, compressed or not, give
// an error or the rows the file holds, never a crash: the bytes a rollout
// actor sends come through the same reader.
func TestReadDamagedTrajectoryFile(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, zstd := range []bool{false, true} {
		src := trajectoryBytes(t, zstd)
		for i := range 3000 {
			b := append([]byte(nil), src...)
			var at []int
			for range 1 + r.IntN(3) {
				k := r.IntN(len(b))
				b[k] = byte(r.IntN(256))
				at = append(at, k)
			}
			func() {
				defer func() {
					if e := recover(); e != nil {
						t.Errorf("zstd %v, case %d (bytes %v): panic: %v", zstd, i, at, e)
					}
				}()
				got, err := UnmarshalTrajectories("reply", b)
				switch {
				case err != nil && !strings.Contains(err.Error(), "read reply"):
					t.Errorf("zstd %v, case %d (bytes %v): error does not name the source: %v", zstd, i, at, err)
				case err == nil && len(got) != len(sampleTurns()):
					t.Errorf("zstd %v, case %d (bytes %v): %d rows without an error, want %d", zstd, i, at, len(got), len(sampleTurns()))
				}
			}()
		}
	}
}

func FuzzUnmarshalTrajectories(f *testing.F) {
	for _, zstd := range []bool{false, true} {
		var buf bytes.Buffer
		var opts []ipc.Option
		if zstd {
			opts = append(opts, ipc.WithZstd())
		}
		fw, err := ipc.NewFileWriter(&buf, append(opts, ipc.WithSchema(TrajectorySchema))...)
		if err != nil {
			f.Fatal(err)
		}
		rec, err := NewRecord(nil, sampleTurns())
		if err != nil {
			f.Fatal(err)
		}
		if err := fw.Write(rec); err != nil {
			f.Fatal(err)
		}
		rec.Release()
		if err := fw.Close(); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		turns, err := UnmarshalTrajectories("fuzz", b)
		if err != nil {
			if !strings.Contains(err.Error(), "read fuzz") {
				t.Errorf("error does not name the source: %v", err)
			}
			return
		}
		for i := range turns {
			if err := turns[i].Check(); err != nil {
				t.Errorf("turn %d read without an error fails its check: %v", i, err)
			}
		}
	})
}
