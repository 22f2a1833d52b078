package actor

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzPushPreamble feeds arbitrary bytes to the reading of what precedes
// a pushed payload (a peer's receiver name, header and length): it reads
// them or fails, never panics, never takes a header over bulkMaxPushHdr
// or a negative length, and reads no byte past the preamble.
func FuzzPushPreamble(f *testing.F) {
	good := binary.BigEndian.AppendUint16(nil, 2)
	good = append(good, "rx"...)
	good = binary.BigEndian.AppendUint32(good, 3)
	good = append(good, "hdr"...)
	good = binary.BigEndian.AppendUint64(good, 10)
	f.Add(good)
	f.Add([]byte{0, 1, 'r', 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		name, hdr, n, err := readPushPreamble(r)
		if err != nil {
			return
		}
		if len(hdr) > bulkMaxPushHdr || n < 0 {
			t.Fatalf("read a header of %d bytes, length %d", len(hdr), n)
		}
		if used := len(b) - r.Len(); used != 2+len(name)+4+len(hdr)+8 {
			t.Fatalf("read %d bytes for a preamble of %d", used, 2+len(name)+4+len(hdr)+8)
		}
	})
}
