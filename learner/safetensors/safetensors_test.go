package safetensors

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func mustTensor(t *testing.T, name string, dtype DType, shape []int, v []float32) Tensor {
	t.Helper()
	x, err := FromFloat32(name, dtype, shape, v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	in := []Tensor{
		mustTensor(t, "b.weight", F32, []int{2, 3}, []float32{1, -2, 3.5, 0, 1e-30, -7}),
		mustTensor(t, "a.bias", BF16, []int{3}, []float32{1, -0.5, 3}),
		mustTensor(t, "scalar", F32, nil, []float32{42}),
	}
	if err := WriteFile(path, in, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.Names(), ","); got != "b.weight,a.bias,scalar" {
		t.Errorf("names in file order = %s", got)
	}
	if f.Metadata["format"] != "pt" {
		t.Errorf("metadata = %v", f.Metadata)
	}
	for _, want := range in {
		got, shape, err := f.Float32(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		wv, _ := want.Float32()
		if len(shape) != len(want.Shape) {
			t.Errorf("%s: shape %v, want %v", want.Name, shape, want.Shape)
		}
		for i := range wv {
			if got[i] != wv[i] {
				t.Errorf("%s[%d] = %v, want %v", want.Name, i, got[i], wv[i])
			}
		}
	}
	// The header length is a multiple of 8 so data stays aligned.
	b, _ := os.ReadFile(path)
	if binary.LittleEndian.Uint64(b)%8 != 0 {
		t.Errorf("header length %d not 8-aligned", binary.LittleEndian.Uint64(b))
	}
}

func TestConversions(t *testing.T) {
	bf := []struct {
		in   float32
		bits uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{0, 0},
		{float32(math.Inf(1)), 0x7f80},
		{1.00390625, 0x3f80},               // halfway, rounds to even (down)
		{1.01171875, 0x3f82},               // halfway, rounds to even (up)
		{3.1415927, 0x4049},                // pi
		{float32(math.MaxFloat32), 0x7f80}, // overflows to +Inf like torch
	}
	for _, c := range bf {
		if got := F32ToBF16(c.in); got != c.bits {
			t.Errorf("F32ToBF16(%v) = %#04x, want %#04x", c.in, got, c.bits)
		}
	}
	f16 := []struct {
		bits uint16
		want float32
	}{
		{0x3c00, 1},
		{0xc000, -2},
		{0x7bff, 65504},
		{0x0001, 5.9604645e-08}, // smallest subnormal
		{0x0400, 6.1035156e-05}, // smallest normal
		{0x3555, 0.33325195},
		{0x7c00, float32(math.Inf(1))},
		{0x8000, float32(math.Copysign(0, -1))},
	}
	for _, c := range f16 {
		raw := []byte{byte(c.bits), byte(c.bits >> 8)}
		tt := Tensor{Name: "h", DType: F16, Shape: []int{1}, Data: raw}
		v, err := tt.Float32()
		if err != nil {
			t.Fatal(err)
		}
		if v[0] != c.want || math.Signbit(float64(v[0])) != math.Signbit(float64(c.want)) {
			t.Errorf("f16 %#04x = %v, want %v", c.bits, v[0], c.want)
		}
	}
}

// header builds a raw file from a JSON header and data bytes.
func header(js string, data int) []byte {
	b := make([]byte, 8+len(js)+data)
	binary.LittleEndian.PutUint64(b, uint64(len(js)))
	copy(b[8:], js)
	return b
}

func TestBadFiles(t *testing.T) {
	good := header(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8)
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"header longer than file", good[:20], "exceeds file size"},
		{"truncated data", good[:len(good)-1], `tensor "w": data offsets [0, 8) out of range`},
		{"bad json", header(`{"w":`, 0), "bad header JSON"},
		{"bad entry", header(`{"w":{"dtype":1}}`, 0), `tensor "w": bad header entry`},
		{"size mismatch", header(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), `tensor "w": 8 bytes for shape [3]`},
		{"offsets reversed", header(`{"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, 8), "out of range"},
		{"negative dim", header(`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, 0), "negative dimension"},
		// A flipped byte in "__metadata__" turns the metadata into an entry
		// with none of the fields a tensor needs.
		{"corrupt metadata key", header(`{"__meta#ata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8), `tensor "__meta#ata__": bad header entry`},
		{"no dtype", header(`{"w":{"shape":[2],"data_offsets":[0,8]}}`, 8), `tensor "w": bad header entry: no dtype`},
		{"no shape", header(`{"w":{"dtype":"F32","data_offsets":[0,8]}}`, 8), `tensor "w": bad header entry: no shape`},
		{"no offsets", header(`{"w":{"dtype":"F32","shape":[2]}}`, 8), `tensor "w": bad header entry: no data_offsets`},
		{"unknown dtype", header(`{"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}}`, 8), `tensor "w": bad header entry: unknown dtype "F33"`},
		{"unknown field", header(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"strides":[1]}}`, 8), `tensor "w": bad header entry: json: unknown field "strides"`},
		{"gap", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, 12), `tensor "b": data starts at byte 8, want 4`},
		{"overlap", header(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), `tensor "b": data starts at byte 4, want 8`},
		{"trailing bytes", header(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 12), "tensors cover 8 data bytes but the file holds 12"},
		// A JSON decoder keeps the last of two entries of one name: the
		// first's bytes were reported as a gap before the second's, and a
		// file whose duplicates agree loaded.
		{"a name twice", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), `tensor "a": twice in the header`},
		{"a name twice, alike", header(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4), `tensor "a": twice in the header`},
		{"a header that is not an object", header(`[1, 2]`, 0), "bad header JSON"},
		{"text after the header", header(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x`, 8), `bad header JSON: text after the object: "x"`},
		{"overflowing shape", header(`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, 8), `tensor "w": shape [4294967296 4294967296] of F32 overflows`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("x.safetensors", c.b)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "x.safetensors") {
				t.Errorf("error %q does not name the file and %q", err, c.want)
			}
		})
	}
	// An unknown dtype parses (other tensors stay readable) but cannot convert.
	f, err := Parse("x.safetensors", header(`{"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, 8))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Float32("w"); err == nil || !strings.Contains(err.Error(), `x.safetensors: tensor "w": dtype "I64": unsupported dtype`) {
		t.Errorf("I64 error = %v", err)
	}
	if _, _, err := f.Float32("nope"); err == nil || !strings.Contains(err.Error(), `tensor "nope": not found`) {
		t.Errorf("missing error = %v", err)
	}
	if _, err := FromFloat32("w", F16, []int{1}, []float32{1}); err == nil {
		t.Error("F16 write accepted")
	}
	if _, err := FromFloat32("w", F32, []int{2}, []float32{1}); err == nil {
		t.Error("shape mismatch accepted")
	}
}

func TestShardedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	var ts []Tensor
	for i, n := range []string{"a", "b", "c", "d"} {
		ts = append(ts, mustTensor(t, n, F32, []int{4}, []float32{float32(i), 1, 2, 3}))
	}
	if err := WriteCheckpoint(dir, ts, 40); err != nil { // 16 bytes each → 2 per shard
		t.Fatal(err)
	}
	for _, name := range []string{IndexFile, "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Names(), ","); got != "a,b,c,d" {
		t.Fatalf("names = %s", got)
	}
	tt, file, ok := c.Tensor("d")
	if !ok || !strings.HasSuffix(file, "model-00002-of-00002.safetensors") {
		t.Fatalf("d in %s", file)
	}
	if v, _ := tt.Float32(); v[0] != 3 {
		t.Errorf("d = %v", v)
	}

	// An index naming a tensor its shard lacks is an error naming both.
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"zz":"model-00001-of-00002.safetensors"}}`), 0o644)
	if _, err := OpenCheckpoint(dir); err == nil || !strings.Contains(err.Error(), `tensor "zz": not in shard`) {
		t.Errorf("err = %v", err)
	}
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"a":"../x.safetensors"}}`), 0o644)
	if _, err := OpenCheckpoint(dir); err == nil || !strings.Contains(err.Error(), "bad shard file name") {
		t.Errorf("err = %v", err)
	}

	// Single file.
	dir2 := t.TempDir()
	if err := WriteCheckpoint(dir2, ts, 0); err != nil {
		t.Fatal(err)
	}
	if c, err := OpenCheckpoint(dir2); err != nil || len(c.Names()) != 4 {
		t.Fatalf("single: %v", err)
	}
	if _, err := OpenCheckpoint(t.TempDir()); err == nil || !strings.Contains(err.Error(), SingleFile) {
		t.Errorf("empty dir err = %v", err)
	}
}

// Writing a checkpoint over another replaces it: a stale index would shadow
// a new model.safetensors, and stale shards would waste the disk.
func TestRewriteCheckpoint(t *testing.T) {
	dir := t.TempDir()
	write := func(first float32, maxShard int64) {
		t.Helper()
		var ts []Tensor
		for _, n := range []string{"a", "b", "c"} {
			ts = append(ts, mustTensor(t, n, F32, []int{4}, []float32{first, 1, 2, 3}))
		}
		if err := WriteCheckpoint(dir, ts, maxShard); err != nil {
			t.Fatal(err)
		}
	}
	check := func(first float32, files ...string) {
		t.Helper()
		c, err := OpenCheckpoint(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range c.Names() {
			tt, _, _ := c.Tensor(n)
			if v, _ := tt.Float32(); v[0] != first {
				t.Errorf("%s[0] = %v, want %v", n, v[0], first)
			}
		}
		entries, _ := os.ReadDir(dir)
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		if strings.Join(got, ",") != strings.Join(files, ",") {
			t.Errorf("files %v, want %v", got, files)
		}
	}
	write(1, 16)
	check(1, "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", IndexFile)
	write(2, 0)
	check(2, SingleFile)
	write(3, 40)
	check(3, "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", IndexFile)

	// A tensor the index does not list is reported against the index.
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, file, ok := c.Tensor("zz"); ok || file != filepath.Join(dir, IndexFile) {
		t.Errorf("missing tensor: ok=%v file %s, want the index", ok, file)
	}
}

// FiniteFloat32 refuses NaN and infinite elements of every dtype it reads,
// naming the tensor and the element's index; finite values pass as
// Float32 gives them.
func TestFiniteFloat32(t *testing.T) {
	for _, c := range []struct {
		dtype DType
		bits  []byte // element [1 0] of a 2×2 tensor
		want  string
	}{
		{F32, []byte{0, 0, 0xc0, 0x7f}, "element [1 0] of shape [2 2] is NaN"},
		{BF16, []byte{0x80, 0x7f}, "element [1 0] of shape [2 2] is +Inf"},
		{F16, []byte{0x00, 0xfc}, "element [1 0] of shape [2 2] is -Inf"},
		{F16, []byte{0x01, 0x7e}, "element [1 0] of shape [2 2] is NaN"},
	} {
		size := c.dtype.Size()
		tn := Tensor{Name: "w", DType: c.dtype, Shape: []int{2, 2}, Data: make([]byte, 4*size)}
		if v, err := tn.FiniteFloat32(); err != nil || len(v) != 4 {
			t.Fatalf("%s zeros: %v %v", c.dtype, v, err)
		}
		copy(tn.Data[2*size:], c.bits)
		_, err := tn.FiniteFloat32()
		if err == nil || !errors.Is(err, ErrNotFinite) || !strings.Contains(err.Error(), `tensor "w": `+c.want) {
			t.Errorf("%s %x: %v, want %q", c.dtype, c.bits, err, c.want)
		}
	}
}

// A safetensors path that is not a regular file is read as far as its
// header declares and one byte more: a pipe serving a whole file loads as
// the file does, and a stream without end (/dev/zero, or a file followed
// by more bytes) is an error, where the whole stream was read into memory
// until the process died.
func TestReadFileStream(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip(err)
	}
	if _, err := ReadFile("/dev/zero"); err == nil || !strings.Contains(err.Error(), "safetensors /dev/zero: bad header JSON") {
		t.Errorf("/dev/zero: %v", err)
	}
	a, _ := FromFloat32("a", F32, []int{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	b, _ := FromFloat32("b", BF16, []int{4}, []float32{7, 8, 9, 10})
	file, err := Encode([]Tensor{a, b}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		endless bool
		want    string
	}{{"a whole file", false, ""}, {"a file and bytes without end", true, "corrupt header or trailing bytes"}} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "model.safetensors")
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Skip("mkfifo:", err)
			}
			go func() {
				w, err := os.OpenFile(p, os.O_WRONLY, 0)
				if err != nil {
					return
				}
				defer w.Close()
				if _, err := w.Write(file); err != nil || !c.endless {
					return
				}
				junk := make([]byte, 1<<16)
				for {
					if _, err := w.Write(junk); err != nil {
						return // the reader closed its end
					}
				}
			}()
			f, err := ReadFile(p)
			switch {
			case c.want == "" && err != nil:
				t.Fatal(err)
			case c.want == "":
				if v, _, err := f.Float32("b"); err != nil || v[3] != 10 || len(f.Tensors) != 2 {
					t.Errorf("tensor b %v, %v (%d tensors)", v, err, len(f.Tensors))
				}
			case err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p):
				t.Errorf("error %v, want %q naming the file", err, c.want)
			}
		})
	}
}

// Parse of any bytes is a File or an error naming the file, never a
// panic; a File's tensors tile its data and convert as their dtype says.
func FuzzParse(f *testing.F) {
	a, _ := FromFloat32("a", F32, []int{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	b, _ := FromFloat32("b", BF16, []int{4}, []float32{7, 8, 9, 10})
	good, err := Encode([]Tensor{a, b}, map[string]string{"format": "pt"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(header(`{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`, 4))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse("fuzz.safetensors", b)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.safetensors") {
				t.Errorf("error does not name the file: %v", err)
			}
			return
		}
		for _, tn := range file.Tensors {
			if tn.DType.Size() == 0 {
				continue
			}
			if v, err := tn.Float32(); err != nil || len(v) != tn.NumElements() {
				t.Errorf("tensor %q: %d values, %v", tn.Name, len(v), err)
			}
		}
	})
}
