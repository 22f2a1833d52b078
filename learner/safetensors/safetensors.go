// Package safetensors reads and writes Hugging Face safetensors files: an
// 8-byte little-endian header length, a JSON header mapping tensor names to
// dtype, shape and byte offsets, then the raw little-endian tensor data.
//
// It owns the file format only: it knows nothing about models. Reading
// accepts F32, BF16 and F16 and converts to float32 on request; writing
// produces F32 or BF16. Sharded checkpoints (model.safetensors.index.json)
// are handled by Checkpoint. Every error names the file and, where there is
// one, the tensor.
package safetensors

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/rlnode/rlnode/internal/ctxio"
)

// DType is a safetensors element type as spelled in the header.
type DType string

// Element types this package understands.
const (
	F32  DType = "F32"
	BF16 DType = "BF16"
	F16  DType = "F16"
)

// ErrUnsupportedDType is wrapped by errors about element types this package
// cannot convert.
var ErrUnsupportedDType = errors.New("unsupported dtype")

// Size is the number of bytes of one element, or 0 when unsupported.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

// storageSize is the element size of every dtype the safetensors format
// defines, convertible or not: a parser needs it to check a header whatever
// the tensor's type.
func storageSize(d DType) int {
	switch d {
	case "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3":
		return 1
	case "I16", "U16", F16, BF16:
		return 2
	case "I32", "U32", F32:
		return 4
	case "I64", "U64", "F64":
		return 8
	}
	return 0
}

// maxHeader bounds the JSON header so a corrupt length cannot make us
// allocate gigabytes (the reference implementation uses 100 MB as well).
const maxHeader = 100 << 20

// Tensor is one named tensor with its raw little-endian bytes.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// NumElements is the product of the shape (1 for a scalar).
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32 converts the tensor's data to float32.
func (t *Tensor) Float32() ([]float32, error) {
	n := t.NumElements()
	if t.DType.Size() == 0 {
		return nil, fmt.Errorf("tensor %q: dtype %q: %w", t.Name, t.DType, ErrUnsupportedDType)
	}
	if len(t.Data) != n*t.DType.Size() {
		return nil, fmt.Errorf("tensor %q: %d bytes for shape %v of %s", t.Name, len(t.Data), t.Shape, t.DType)
	}
	out := make([]float32, n)
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(t.Data[2*i:])) << 16)
		}
	case F16:
		for i := range out {
			out[i] = f16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	}
	return out, nil
}

// ErrNotFinite is wrapped by FiniteFloat32's errors: a weight that is NaN
// or infinite (a diverged run's checkpoint, a damaged file) makes every
// logit it touches NaN, and a step on it fails far from the file.
var ErrNotFinite = errors.New("not a finite number")

// FiniteFloat32 is Float32 for weights: a NaN or infinite element is an
// error naming the tensor and the element's index.
func (t *Tensor) FiniteFloat32() ([]float32, error) {
	v, err := t.Float32()
	if err != nil {
		return nil, err
	}
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			at := make([]int, len(t.Shape))
			for k, r := len(t.Shape)-1, i; k >= 0; k-- {
				at[k], r = r%t.Shape[k], r/t.Shape[k]
			}
			return nil, fmt.Errorf("tensor %q: element %v of shape %v is %v: %w", t.Name, at, t.Shape, x, ErrNotFinite)
		}
	}
	return v, nil
}

// FromFloat32 builds a tensor of the given dtype (F32 or BF16) from float32
// values. BF16 rounds to nearest even, as torch does.
func FromFloat32(name string, dtype DType, shape []int, v []float32) (Tensor, error) {
	t := Tensor{Name: name, DType: dtype, Shape: append([]int(nil), shape...)}
	if n := t.NumElements(); n != len(v) {
		return Tensor{}, fmt.Errorf("tensor %q: %d values for shape %v", name, len(v), shape)
	}
	switch dtype {
	case F32:
		t.Data = make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(x))
		}
	case BF16:
		t.Data = make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(t.Data[2*i:], F32ToBF16(x))
		}
	default:
		return Tensor{}, fmt.Errorf("tensor %q: write dtype %q: %w", name, dtype, ErrUnsupportedDType)
	}
	return t, nil
}

// F32ToBF16 rounds a float32 to bfloat16 bits (round to nearest even; NaN
// stays NaN).
func F32ToBF16(x float32) uint16 {
	b := math.Float32bits(x)
	if x != x {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalize
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// File is a parsed safetensors file held in memory.
type File struct {
	Path     string
	Metadata map[string]string
	Tensors  []Tensor // in header order of offsets
	byName   map[string]int
}

// Tensor returns the named tensor.
func (f *File) Tensor(name string) (*Tensor, bool) {
	i, ok := f.byName[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Names lists the tensor names in file order.
func (f *File) Names() []string {
	out := make([]string, len(f.Tensors))
	for i := range f.Tensors {
		out[i] = f.Tensors[i].Name
	}
	return out
}

type headerEntry struct {
	DType   DType    `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// parsedEntry is a header entry as read: pointers tell a missing field from
// a zero one.
type parsedEntry struct {
	DType   *DType    `json:"dtype"`
	Shape   *[]int    `json:"shape"`
	Offsets *[2]int64 `json:"data_offsets"`
}

func parseEntry(msg json.RawMessage) (headerEntry, error) {
	var p parsedEntry
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return headerEntry{}, err
	}
	switch {
	case p.DType == nil:
		return headerEntry{}, errors.New("no dtype")
	case p.Shape == nil:
		return headerEntry{}, errors.New("no shape")
	case p.Offsets == nil:
		return headerEntry{}, errors.New("no data_offsets")
	case storageSize(*p.DType) == 0:
		return headerEntry{}, fmt.Errorf("unknown dtype %q", *p.DType)
	}
	return headerEntry{DType: *p.DType, Shape: *p.Shape, Offsets: *p.Offsets}, nil
}

// byteSize is the number of bytes shape holds of dtype, or -1 when that
// exceeds limit (so a corrupt shape cannot overflow int64).
func byteSize(shape []int, dtype DType, limit int64) int64 {
	n := int64(storageSize(dtype))
	for _, d := range shape {
		if d == 0 {
			return 0
		}
		if n > limit/int64(d) {
			return -1
		}
		n *= int64(d)
	}
	if n > limit {
		return -1
	}
	return n
}

// ReadFile reads and parses a whole safetensors file.
func ReadFile(path string) (*File, error) { return ReadFileContext(context.Background(), path) }

// readChunk is the most ReadFileContext reads between looks at its
// context: a few tens of milliseconds of disk.
const readChunk = 64 << 20

// ReadFileContext is ReadFile that checks ctx between reads of the file
// (each at most readChunk bytes) and gives up, with an error wrapping
// ctx's, once it is done: a large checkpoint takes seconds to minutes to
// read, from a slow disk or a network file system more. The bytes read
// are ReadFile's.
func ReadFileContext(ctx context.Context, path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read safetensors: %w", err)
	}
	defer f.Close()
	size := 0
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read safetensors %s: %w", path, err)
	}
	r := ctxio.Reader(ctx, f, readChunk)
	if !st.Mode().IsRegular() {
		return readStream(path, r)
	}
	if int64(int(st.Size())) == st.Size() {
		size = int(st.Size())
	}
	// MinRead beyond the size: EOF is seen without growing the buffer.
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("read safetensors %s: %w", path, err)
	}
	return Parse(path, buf.Bytes())
}

// readStream reads a safetensors file whose size is not known beforehand
// (a pipe, a device): the header first, then only as many bytes as its
// tensors' offsets declare and one more, so that a stream without end
// (/dev/zero, /dev/urandom) is an error, not memory filled until the
// process dies. Parse then checks the bytes as it checks a file's.
func readStream(path string, r io.Reader) (*File, error) {
	b := make([]byte, 8)
	if n, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Parse(path, b[:n])
		}
		return nil, fmt.Errorf("read safetensors %s: %w", path, err)
	}
	hlen := binary.LittleEndian.Uint64(b)
	if hlen > maxHeader {
		return nil, fmt.Errorf("safetensors %s: header length %d over the %d-byte limit (corrupt, or not a safetensors file)", path, hlen, maxHeader)
	}
	b = append(b, make([]byte, hlen)...)
	if n, err := io.ReadFull(r, b[8:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Parse(path, b[:8+n])
		}
		return nil, fmt.Errorf("read safetensors %s: %w", path, err)
	}
	raw, err := headerEntries(b[8:])
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	var end int64
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		e, err := parseEntry(msg)
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: bad header entry: %w", path, name, err)
		}
		end = max(end, e.Offsets[1])
	}
	buf := bytes.NewBuffer(b)
	if _, err := buf.ReadFrom(io.LimitReader(r, end+1)); err != nil {
		return nil, fmt.Errorf("read safetensors %s: %w", path, err)
	}
	return Parse(path, buf.Bytes())
}

// headerEntries reads the header's object: each name and its entry. A
// name given twice is an error: a JSON decoder keeps the last, and the
// tensor the first one described would go without a word.
func headerEntries(h []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(h))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		if err == nil {
			err = fmt.Errorf("%v where an object belongs", t)
		}
		return nil, fmt.Errorf("bad header JSON: %w", err)
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("bad header JSON: %w", err)
		}
		name := t.(string) // an object's keys are strings
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("bad header JSON: %q: %w", name, err)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("tensor %q: twice in the header (corrupt header)", name)
		}
		out[name] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("bad header JSON: %w", err)
	}
	if rest := bytes.TrimSpace(h[dec.InputOffset():]); len(rest) > 0 {
		return nil, fmt.Errorf("bad header JSON: text after the object: %.20q", rest)
	}
	return out, nil
}

// Parse parses safetensors bytes; path is used in error messages only. The
// returned tensors alias b.
func Parse(path string, b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("safetensors %s: truncated: %d bytes, need at least 8 for the header length", path, len(b))
	}
	hlen := binary.LittleEndian.Uint64(b)
	if hlen > maxHeader || hlen > uint64(len(b)-8) {
		return nil, fmt.Errorf("safetensors %s: header length %d exceeds file size %d (truncated or corrupt)", path, hlen, len(b))
	}
	raw, err := headerEntries(b[8 : 8+hlen])
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	data := b[8+hlen:]
	f := &File{Path: path, byName: map[string]int{}}
	var starts []int64
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.Metadata); err != nil {
				return nil, fmt.Errorf("safetensors %s: __metadata__: %w", path, err)
			}
			continue
		}
		e, err := parseEntry(msg)
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: bad header entry: %w", path, name, err)
		}
		t := Tensor{Name: name, DType: e.DType, Shape: e.Shape}
		if t.Shape == nil {
			t.Shape = []int{}
		}
		for _, d := range t.Shape {
			if d < 0 {
				return nil, fmt.Errorf("safetensors %s: tensor %q: negative dimension in shape %v", path, name, t.Shape)
			}
		}
		lo, hi := e.Offsets[0], e.Offsets[1]
		if lo < 0 || hi < lo || hi > int64(len(data)) {
			return nil, fmt.Errorf("safetensors %s: tensor %q: data offsets [%d, %d) out of range of %d data bytes (truncated or corrupt)", path, name, lo, hi, len(data))
		}
		if want := byteSize(t.Shape, t.DType, 1<<62); want != hi-lo {
			if want < 0 {
				return nil, fmt.Errorf("safetensors %s: tensor %q: shape %v of %s overflows (corrupt header)", path, name, t.Shape, t.DType)
			}
			return nil, fmt.Errorf("safetensors %s: tensor %q: %d bytes for shape %v of %s, want %d", path, name, hi-lo, t.Shape, t.DType, want)
		}
		t.Data = data[lo:hi:hi]
		f.Tensors = append(f.Tensors, t)
		starts = append(starts, lo)
	}
	order := make([]int, len(f.Tensors))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if starts[a] != starts[b] {
			return starts[a] < starts[b]
		}
		return f.Tensors[a].Name < f.Tensors[b].Name
	})
	sorted := make([]Tensor, len(order))
	for i, k := range order {
		sorted[i] = f.Tensors[k]
		f.byName[sorted[i].Name] = i
	}
	f.Tensors = sorted
	// Tensors tile the data section exactly, in offset order, as the
	// reference implementation requires: a gap, an overlap or bytes left
	// over mean a corrupt header or a file cut or padded after writing.
	var end int64
	for i, k := range order {
		lo, hi := starts[k], starts[k]+int64(len(sorted[i].Data))
		if lo != end {
			return nil, fmt.Errorf("safetensors %s: tensor %q: data starts at byte %d, want %d (tensors must tile the data without gaps or overlaps; corrupt header)", path, sorted[i].Name, lo, end)
		}
		end = hi
	}
	if end != int64(len(data)) {
		return nil, fmt.Errorf("safetensors %s: tensors cover %d data bytes but the file holds %d (corrupt header or trailing bytes)", path, end, len(data))
	}
	return f, nil
}

// FiniteFloat32 is File.Float32 for weights: a NaN or infinite element is
// an error naming the file, the tensor and the element.
func (f *File) FiniteFloat32(name string) ([]float32, []int, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, nil, fmt.Errorf("safetensors %s: tensor %q: not found", f.Path, name)
	}
	v, err := t.FiniteFloat32()
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors %s: %w", f.Path, err)
	}
	return v, t.Shape, nil
}

// Float32 returns the named tensor converted to float32 with its shape. The
// error names the file and tensor.
func (f *File) Float32(name string) ([]float32, []int, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, nil, fmt.Errorf("safetensors %s: tensor %q: not found", f.Path, name)
	}
	v, err := t.Float32()
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors %s: %w", f.Path, err)
	}
	return v, t.Shape, nil
}

// WriteFile writes tensors (in the given order) and optional metadata to path.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	return WriteFileContext(context.Background(), path, tensors, metadata)
}

// WriteFileContext is WriteFile that checks ctx between tensors as it
// encodes them (EncodeContext) and gives up, writing nothing, once it is
// done. The bytes are WriteFile's.
func WriteFileContext(ctx context.Context, path string, tensors []Tensor, metadata map[string]string) error {
	b, err := EncodeContext(ctx, tensors, metadata)
	if err != nil {
		return fmt.Errorf("write safetensors %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write safetensors: %w", err)
	}
	return nil
}

// Encode serializes tensors to safetensors bytes.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	return EncodeContext(context.Background(), tensors, metadata)
}

// EncodeContext is Encode that checks ctx between tensors as it copies
// them and gives up, with an error wrapping ctx's, once it is done. The
// bytes are Encode's.
func EncodeContext(ctx context.Context, tensors []Tensor, metadata map[string]string) ([]byte, error) {
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for i := range tensors {
		t := &tensors[i]
		if t.Name == "" || t.Name == "__metadata__" {
			return nil, fmt.Errorf("tensor %d: invalid name %q", i, t.Name)
		}
		if _, dup := header[t.Name]; dup {
			return nil, fmt.Errorf("tensor %q: duplicate name", t.Name)
		}
		if sz := t.DType.Size(); sz == 0 {
			return nil, fmt.Errorf("tensor %q: dtype %q: %w", t.Name, t.DType, ErrUnsupportedDType)
		} else if len(t.Data) != t.NumElements()*sz {
			return nil, fmt.Errorf("tensor %q: %d bytes for shape %v of %s", t.Name, len(t.Data), t.Shape, t.DType)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[t.Name] = headerEntry{DType: t.DType, Shape: shape, Offsets: [2]int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	h, err := json.Marshal(header)
	if err != nil {
		return nil, err
	}
	// Pad the header with spaces to 8 bytes so data is aligned, as the
	// reference writer does.
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := make([]byte, 8, 8+len(h)+int(off))
	binary.LittleEndian.PutUint64(out, uint64(len(h)))
	out = append(out, h...)
	for i := range tensors {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("encode safetensors: %w", err)
		}
		out = append(out, tensors[i].Data...)
	}
	return out, nil
}
