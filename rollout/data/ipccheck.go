package data

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// checkIPCFile looks over the metadata of an Arrow IPC file of size bytes
// before arrow-go's reader decodes it. That reader trusts the lengths a
// file declares: a count of schema fields or children, of metadata pairs,
// or a compressed buffer's uncompressed size read from a damaged or
// hostile file makes it allocate what was declared (hundreds of gigabytes:
// the process dies of it, which no recover catches), and a schema nested
// without end overflows its stack. So every flatbuffer table and vector it
// will read must lie inside the bytes that hold it, nesting is bounded as
// the reader's loader bounds it, and the data compressed buffers declare
// is capped. Offsets that merely point wrong make the reader panic, which
// readTrajectories turns into an error.
func checkIPCFile(r io.ReaderAt, size int64) error {
	const tail = 10 // footer length (int32) and "ARROW1"
	if size < 8+tail {
		return fmt.Errorf("%d bytes, too short for an Arrow IPC file", size)
	}
	var end [tail]byte
	if _, err := r.ReadAt(end[:], size-tail); err != nil {
		return err
	}
	if string(end[4:]) != "ARROW1" {
		return errors.New("no ARROW1 magic at its end")
	}
	n := int64(int32(binary.LittleEndian.Uint32(end[:4])))
	if n <= 0 || n > size-8-tail || n > maxIPCMetadata {
		return fmt.Errorf("footer of %d bytes in a file of %d", n, size)
	}
	footer := make([]byte, n)
	if _, err := r.ReadAt(footer, size-tail-n); err != nil {
		return err
	}
	fb := flatBuf(footer)
	root, err := fb.root()
	if err != nil {
		return fmt.Errorf("footer: %w", err)
	}
	if err := fb.table(root); err != nil {
		return fmt.Errorf("footer: %w", err)
	}
	if s, ok, err := fb.tableField(root, 1); err != nil {
		return fmt.Errorf("footer: schema: %w", err)
	} else if ok {
		if err := fb.schema(s); err != nil {
			return fmt.Errorf("footer: schema: %w", err)
		}
	}
	if err := fb.metadata(root, 4); err != nil {
		return fmt.Errorf("footer: %w", err)
	}
	var decompressed int64
	var blocks [][2]int64 // offset, end
	for _, field := range []struct {
		id   int
		name string
	}{{2, "dictionary"}, {3, "record batch"}} {
		at, count, err := fb.vectorField(root, field.id, ipcBlockSize)
		if err != nil {
			return fmt.Errorf("footer: %s blocks: %w", field.name, err)
		}
		for i := range count {
			b := footer[at+i*ipcBlockSize:]
			off := int64(binary.LittleEndian.Uint64(b))
			meta := int64(int32(binary.LittleEndian.Uint32(b[8:])))
			body := int64(binary.LittleEndian.Uint64(b[16:]))
			if off < 0 || meta < 8 || body < 0 || meta > maxIPCMetadata || off > size || meta > size-off || body > size-off-meta {
				return fmt.Errorf("%s %d: block at byte %d with %d bytes of metadata and %d of data lies outside the file's %d bytes", field.name, i, off, meta, body, size)
			}
			blocks = append(blocks, [2]int64{off, off + meta + body})
			d, err := checkIPCMessage(r, off, meta, body)
			if err != nil {
				return fmt.Errorf("%s %d (at byte %d): %w", field.name, i, off, err)
			}
			if decompressed += d; decompressed > maxIPCDecompressed {
				return fmt.Errorf("%s %d: compressed buffers declare over %d bytes uncompressed, the limit", field.name, i, int64(maxIPCDecompressed))
			}
		}
	}
	return checkIPCBlocks(r, blocks, size-tail-n)
}

// checkIPCBlocks checks that the blocks a footer lists are the messages
// between the file's schema message and its end-of-stream marker, which
// ends at footer: a damaged footer that lists fewer (none, when a byte of
// its table is changed) would have the rows it leaves out read as absent,
// with no error.
func checkIPCBlocks(r io.ReaderAt, blocks [][2]int64, footer int64) error {
	var head [8]byte
	if _, err := r.ReadAt(head[:], 8); err != nil {
		return err
	}
	schemaLen := int64(int32(binary.LittleEndian.Uint32(head[4:])))
	if binary.LittleEndian.Uint32(head[:4]) != 0xFFFFFFFF || schemaLen < 0 || schemaLen > maxIPCMetadata {
		return errors.New("no schema message after the magic")
	}
	slices.SortFunc(blocks, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	pos := 16 + schemaLen
	for _, b := range blocks {
		if b[0] != pos {
			return fmt.Errorf("the footer lists a message at byte %d, but the stream has one at byte %d", b[0], pos)
		}
		pos = b[1]
	}
	if pos+8 != footer {
		return fmt.Errorf("the footer lists %d messages, ending at byte %d, but the stream goes on to byte %d", len(blocks), pos, footer-8)
	}
	return nil
}

const (
	ipcBlockSize = 24 // Block: offset int64, metaDataLength int32, padding, bodyLength int64
	// maxIPCMetadata bounds one flatbuffer (a footer, a message's header).
	maxIPCMetadata = 64 << 20
	// maxIPCDecompressed bounds the data a file's compressed buffers may
	// declare: trajectories are read whole into memory.
	maxIPCDecompressed = MaxDatasetBytes
	// maxIPCNesting is the deepest a field may nest, the bound arrow-go's
	// loader puts on arrays.
	maxIPCNesting = 64
)

// checkIPCMessage checks the message (a record or dictionary batch) in
// the block at off and returns the bytes its compressed buffers declare
// uncompressed.
func checkIPCMessage(r io.ReaderAt, off, meta, body int64) (int64, error) {
	b := make([]byte, meta)
	if _, err := r.ReadAt(b, off); err != nil {
		return 0, err
	}
	if binary.LittleEndian.Uint32(b) == 0xFFFFFFFF { // continuation marker, then the length
		b = b[8:]
	} else {
		b = b[4:]
	}
	fb := flatBuf(b)
	msg, err := fb.root()
	if err == nil {
		err = fb.table(msg)
	}
	if err == nil {
		err = fb.metadata(msg, 4)
	}
	if err != nil {
		return 0, fmt.Errorf("message: %w", err)
	}
	kind, ok := fb.ubyteField(msg, 1)
	if !ok {
		return 0, errors.New("message: no header type")
	}
	rb, ok, err := fb.tableField(msg, 2)
	if err != nil || !ok {
		return 0, fmt.Errorf("message: header: %v", orMissing(err))
	}
	switch kind {
	case 2: // DictionaryBatch: its data is a RecordBatch
		if rb, ok, err = fb.tableField(rb, 1); err != nil || !ok {
			return 0, fmt.Errorf("dictionary batch: data: %v", orMissing(err))
		}
	case 3: // RecordBatch
	default:
		return 0, fmt.Errorf("message: header type %d where a record or dictionary batch belongs", kind)
	}
	if _, _, err := fb.vectorField(rb, 1, 16); err != nil { // FieldNode: length, null_count
		return 0, fmt.Errorf("record batch: nodes: %w", err)
	}
	if _, _, err := fb.vectorField(rb, 4, 8); err != nil { // variadicBufferCounts
		return 0, fmt.Errorf("record batch: variadic buffer counts: %w", err)
	}
	compressed, err := fb.optTable(rb, 3)
	if err != nil {
		return 0, fmt.Errorf("record batch: compression: %w", err)
	}
	at, count, err := fb.vectorField(rb, 2, 16) // Buffer: offset, length
	if err != nil {
		return 0, fmt.Errorf("record batch: buffers: %w", err)
	}
	var declared int64
	for i := range count {
		e := b[at+i*16:]
		bo, bl := int64(binary.LittleEndian.Uint64(e)), int64(binary.LittleEndian.Uint64(e[8:]))
		if bo < 0 || bl < 0 || bo > body || bl > body-bo {
			return 0, fmt.Errorf("record batch: buffer %d: bytes [%d, %d+%d) outside the %d-byte body", i, bo, bo, bl, body)
		}
		if !compressed || bl == 0 {
			continue
		}
		// A compressed buffer starts with its uncompressed length (-1:
		// stored as is); the reader allocates that much.
		if bl < 8 {
			return 0, fmt.Errorf("record batch: compressed buffer %d: %d bytes, too short for its length prefix", i, bl)
		}
		var p [8]byte
		if _, err := r.ReadAt(p[:], off+meta+bo); err != nil {
			return 0, err
		}
		n := int64(binary.LittleEndian.Uint64(p[:]))
		if n == -1 {
			continue
		}
		if n < 0 || n > maxIPCDecompressed-declared {
			return 0, fmt.Errorf("record batch: compressed buffer %d declares %d bytes uncompressed (limit %d in all)", i, n, int64(maxIPCDecompressed))
		}
		declared += n
	}
	return declared, nil
}

func orMissing(err error) error {
	if err == nil {
		return errors.New("missing")
	}
	return err
}

// flatBuf reads a flatbuffer with every position checked against its
// length: it answers an error where arrow-go's generated code would read
// out of range or allocate what a count it read declares.
type flatBuf []byte

func (b flatBuf) u32(at int) (int, error) {
	if at < 0 || at > len(b)-4 {
		return 0, fmt.Errorf("offset at byte %d outside the %d-byte buffer", at, len(b))
	}
	return int(binary.LittleEndian.Uint32(b[at:])), nil
}

func (b flatBuf) root() (int, error) {
	v, err := b.u32(0)
	if err != nil {
		return 0, err
	}
	return v, nil
}

// table checks the table at pos and its vtable.
func (b flatBuf) table(pos int) error {
	if pos < 0 || pos > len(b)-4 {
		return fmt.Errorf("table at byte %d outside the %d-byte buffer", pos, len(b))
	}
	vt := pos - int(int32(binary.LittleEndian.Uint32(b[pos:])))
	if vt < 0 || vt > len(b)-4 {
		return fmt.Errorf("table at byte %d: vtable at byte %d outside the buffer", pos, vt)
	}
	vsize, tsize := int(binary.LittleEndian.Uint16(b[vt:])), int(binary.LittleEndian.Uint16(b[vt+2:]))
	if vsize < 4 || vsize%2 != 0 || vt+vsize > len(b) || tsize < 4 || pos+tsize > len(b) {
		return fmt.Errorf("table at byte %d: vtable of %d bytes or table of %d runs past the buffer", pos, vsize, tsize)
	}
	for i := 4; i < vsize; i += 2 {
		if o := int(binary.LittleEndian.Uint16(b[vt+i:])); o >= tsize {
			return fmt.Errorf("table at byte %d: field %d at offset %d past the table's %d bytes", pos, i/2-2, o, tsize)
		}
	}
	return nil
}

// field is the position of field id of the (checked) table at pos, or 0
// when absent.
func (b flatBuf) field(pos, id int) int {
	vt := pos - int(int32(binary.LittleEndian.Uint32(b[pos:])))
	vo := 4 + 2*id
	if vo >= int(binary.LittleEndian.Uint16(b[vt:])) {
		return 0
	}
	o := int(binary.LittleEndian.Uint16(b[vt+vo:]))
	if o == 0 {
		return 0
	}
	return pos + o
}

func (b flatBuf) ubyteField(pos, id int) (byte, bool) {
	at := b.field(pos, id)
	if at == 0 {
		return 0, false
	}
	return b[at], true
}

// indirect follows the offset stored at field id.
func (b flatBuf) indirect(pos, id int) (int, bool, error) {
	at := b.field(pos, id)
	if at == 0 {
		return 0, false, nil
	}
	o, err := b.u32(at)
	if err != nil {
		return 0, false, err
	}
	return at + o, true, nil
}

// tableField checks and returns the table field id points to.
func (b flatBuf) tableField(pos, id int) (int, bool, error) {
	t, ok, err := b.indirect(pos, id)
	if err != nil || !ok {
		return 0, ok, err
	}
	return t, true, b.table(t)
}

func (b flatBuf) optTable(pos, id int) (bool, error) {
	_, ok, err := b.tableField(pos, id)
	return ok, err
}

// vectorField checks the vector field id points to, of elements elem
// bytes each, and returns where its elements start and how many there are.
func (b flatBuf) vectorField(pos, id, elem int) (int, int, error) {
	v, ok, err := b.indirect(pos, id)
	if err != nil || !ok {
		return 0, 0, err
	}
	n, err := b.u32(v)
	if err != nil {
		return 0, 0, err
	}
	if n > (len(b)-v-4)/elem {
		return 0, 0, fmt.Errorf("vector at byte %d declares %d elements of %d bytes; the buffer holds %d bytes", v, n, elem, len(b))
	}
	return v + 4, n, nil
}

// tables checks a vector of tables and calls each with every element.
func (b flatBuf) tables(pos, id int, each func(int) error) error {
	at, n, err := b.vectorField(pos, id, 4)
	if err != nil {
		return err
	}
	for i := range n {
		e := at + 4*i
		o, _ := b.u32(e)
		if err := b.table(e + o); err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
		if each != nil {
			if err := each(e + o); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	}
	return nil
}

// str checks the string field id.
func (b flatBuf) str(pos, id int) error {
	_, _, err := b.vectorField(pos, id, 1)
	return err
}

// metadata checks a vector of KeyValue tables at field id.
func (b flatBuf) metadata(pos, id int) error {
	err := b.tables(pos, id, func(kv int) error {
		if err := b.str(kv, 0); err != nil {
			return fmt.Errorf("key: %w", err)
		}
		if err := b.str(kv, 1); err != nil {
			return fmt.Errorf("value: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("custom metadata: %w", err)
	}
	return nil
}

// schema checks a Schema table: its fields, each with their children.
func (b flatBuf) schema(s int) error {
	if err := b.metadata(s, 2); err != nil {
		return err
	}
	if _, _, err := b.vectorField(s, 3, 8); err != nil {
		return fmt.Errorf("features: %w", err)
	}
	return b.tables(s, 1, func(f int) error { return b.arrowField(f, 1) })
}

func (b flatBuf) arrowField(f, depth int) error {
	if depth > maxIPCNesting {
		return fmt.Errorf("fields nested over %d deep", maxIPCNesting)
	}
	if err := b.str(f, 0); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if t, ok, err := b.tableField(f, 3); err != nil {
		return fmt.Errorf("type: %w", err)
	} else if ok {
		kind, _ := b.ubyteField(f, 2)
		switch kind {
		case 14: // Union: mode, typeIds
			if _, _, err := b.vectorField(t, 1, 4); err != nil {
				return fmt.Errorf("union type ids: %w", err)
			}
		case 10: // Timestamp: unit, timezone
			if err := b.str(t, 1); err != nil {
				return fmt.Errorf("timestamp's time zone: %w", err)
			}
		}
	}
	if d, ok, err := b.tableField(f, 4); err != nil {
		return fmt.Errorf("dictionary: %w", err)
	} else if ok {
		if _, err := b.optTable(d, 1); err != nil {
			return fmt.Errorf("dictionary index type: %w", err)
		}
	}
	if err := b.metadata(f, 6); err != nil {
		return err
	}
	if err := b.tables(f, 5, func(c int) error { return b.arrowField(c, depth+1) }); err != nil {
		return fmt.Errorf("children: %w", err)
	}
	return nil
}
