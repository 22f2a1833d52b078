package mpcheck

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Every value msgpack encodes passes, in each width of each code.
func TestCheckPassesEncodedValues(t *testing.T) {
	nested := any("leaf")
	for range MaxDepth - 1 {
		nested = []any{nested}
	}
	for _, v := range []any{
		nil, true, false, 0, 127, -32, 200, -100, 40000, -40000, 1 << 20, -(1 << 20), uint64(1) << 40, int64(-1) << 40,
		float32(1.5), 2.25, "", strings.Repeat("s", 31), strings.Repeat("s", 32), strings.Repeat("s", 256), strings.Repeat("s", 70000),
		[]byte{}, []byte("bin"), bytes.Repeat([]byte{1}, 300), bytes.Repeat([]byte{1}, 70000),
		[]int{}, make([]int, 15), make([]int, 16), make([]int, 70000), map[string]int{}, map[string]int{"a": 1},
		map[int]bool{1: true, 2: false, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true, 9: true, 10: true, 11: true, 12: true, 13: true, 14: true, 15: true, 16: true},
		time.Unix(1, 0), time.Unix(1<<33, 5), time.Unix(1<<40, 7),
		struct {
			A []string
			B map[string][]float64
			C *struct{ D []byte }
		}{A: []string{"x", "y"}, B: map[string][]float64{"k": {1, 2}}, C: &struct{ D []byte }{D: []byte("d")}},
		nested,
	} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(b); err != nil {
			t.Errorf("%T (%d bytes, first %#x): %v", v, len(b), b[0], err)
		}
	}
}

// Bytes that declare more than they hold, nest too deep or are cut short
// are refused, saying what and where.
func TestCheckRefuses(t *testing.T) {
	deep := bytes.Repeat([]byte{0x91}, MaxDepth+1)
	deep = append(deep, 0xc0)
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"nothing", nil, "cut short at byte 0"},
		{"array32 of 2^32-1 in 5 bytes", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, "a container of 4294967295 values with 0 bytes left"},
		{"array16 over what follows", []byte{0xdc, 0x00, 0x03, 0x01, 0x02}, "a container of 3 values with 2 bytes left"},
		{"fixarray over what follows", []byte{0x93, 0x01}, "a container of 3 values with 1 bytes left"},
		{"map32 counts keys and values", []byte{0xdf, 0x00, 0x00, 0x00, 0x02, 1, 2, 3}, "a container of 4 values with 3 bytes left"},
		{"str32 of 2 GiB", []byte{0xdb, 0x7f, 0xff, 0xff, 0xff, 'a'}, "a value of 2147483647 bytes with 1 bytes left"},
		{"bin16 over what follows", []byte{0xc5, 0x01, 0x00, 1}, "a value of 256 bytes with 1 bytes left"},
		{"ext32 over what follows", []byte{0xc9, 0x00, 0x01, 0x00, 0x00, 0x05}, "a value of 65537 bytes with 1 bytes left"},
		{"fixext16 cut short", []byte{0xd8, 0x01, 0x02}, "a value of 17 bytes with 2 bytes left"},
		{"a length cut short", []byte{0xdd, 0xff}, "cut short at byte 1"},
		{"a float cut short", []byte{0xcb, 0, 0}, "a value of 8 bytes with 2 bytes left"},
		{"an element missing", []byte{0x92, 0x01}, "a container of 2 values with 1 bytes left"},
		{"the unused code", []byte{0x91, 0xc1}, "code 0xc1"},
		{"nested over MaxDepth", deep, "nested over 1000 deep"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := Check(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Check(%x) = %v, want an error saying %q", c.b, err, c.want)
			}
		})
	}
}

// FuzzCheck: whatever Check passes, msgpack decodes into an interface (the
// most a decoder may build from it) without dying, and nothing it passes
// holds more values than bytes.
func FuzzCheck(f *testing.F) {
	good, _ := msgpack.Marshal(map[string]any{"a": []any{1, "x", []byte("b"), 2.5, nil}, "t": time.Unix(1, 2)})
	f.Add(good)
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x91, 0x91, 0x91, 0xc0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if Check(b) != nil {
			return
		}
		var v any
		_ = msgpack.Unmarshal(b, &v)
	})
}

// BenchmarkCheck: the walk over a message of a million small integers
// (the worst case: one value a byte or two), beside decoding it.
func BenchmarkCheck(b *testing.B) {
	v := make([]int32, 1<<20)
	for i := range v {
		v[i] = int32(i % 300)
	}
	body, err := msgpack.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("check", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if err := Check(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var out []int32
			if err := msgpack.Unmarshal(body, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
