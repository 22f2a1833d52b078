package weights

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/rlnode/rlnode/learner/safetensors"
)

func TestBlobRoundTrip(t *testing.T) {
	u := Update{
		Tensors: map[string][]float32{
			"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": {1, 2, 3, 4, 5, 6},
			"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": {-1, 0.5},
		},
		LoRA: &LoRA{Rank: 2, Alpha: 3, TargetModules: []string{"q_proj"}},
	}
	blob, err := Encode(7, u)
	if err != nil {
		t.Fatal(err)
	}
	// The payload is a safetensors file any reader parses.
	if f, err := safetensors.Parse("blob", blob); err != nil || f.Metadata["rlnode.update"] != "lora" {
		t.Fatalf("safetensors parse: %v", err)
	}
	v, got, err := Decode("blob", blob)
	if err != nil {
		t.Fatal(err)
	}
	if err != nil || v != 7 || got.LoRA.Rank != 2 || got.LoRA.Alpha != 3 || strings.Join(got.LoRA.TargetModules, ",") != "q_proj" {
		t.Fatalf("decoded version %d, %+v, %v", v, got.LoRA, err)
	}
	for name, want := range u.Tensors {
		if !slices.Equal(got.Tensors[name], want) {
			t.Fatalf("%s: %v, want %v", name, got.Tensors[name], want)
		}
	}
	// Merge: W + (alpha/r)·B·A for a 1×3 weight (A 2×3, B 1×2).
	merged, err := mergeLoRA(got, map[string][]float32{"model.layers.0.self_attn.q_proj.weight": {10, 20, 30}})
	if err != nil {
		t.Fatal(err)
	}
	// B·A = -1·[1 2 3] + 0.5·[4 5 6] = [1 0.5 0]; ×1.5 = [1.5 0.75 0].
	if w := merged["model.layers.0.self_attn.q_proj.weight"]; !slices.Equal(w, []float32{11.5, 20.75, 30}) {
		t.Fatalf("merged %v", w)
	}
	if _, err := mergeLoRA(got, map[string][]float32{"model.layers.0.self_attn.q_proj.weight": {1, 2}}); err == nil || !strings.Contains(err.Error(), "want 1×3") {
		t.Fatalf("size mismatch: %v", err)
	}
}

func TestDecodeBlobRefusesBadPayloads(t *testing.T) {
	good, err := Encode(3, Update{Tensors: map[string][]float32{"model.norm.weight": {1, 2}}})
	if err != nil {
		t.Fatal(err)
	}
	bf16, _ := safetensors.FromFloat32("x", safetensors.BF16, []int{2}, []float32{1, 2})
	bfBlob, _ := safetensors.Encode([]safetensors.Tensor{bf16}, map[string]string{metaVersion: "1", metaKind: "full"})
	f32, _ := safetensors.FromFloat32("x", safetensors.F32, []int{2}, []float32{1, 2})
	noVersion, _ := safetensors.Encode([]safetensors.Tensor{f32}, map[string]string{metaKind: "full"})
	badKind, _ := safetensors.Encode([]safetensors.Tensor{f32}, map[string]string{metaVersion: "1", metaKind: "delta"})
	cases := []struct {
		name string
		blob []byte
		want string
	}{
		{"truncated", good[:len(good)-3], "truncated"},
		{"bf16", bfBlob, "dtype BF16, want F32"},
		{"no version", noVersion, "rlnode.version"},
		{"kind", badKind, `"delta", want full or lora`},
	}
	for _, tc := range cases {
		if _, _, err := Decode("payload", tc.blob); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// DecodeView returns Decode's tensors, lying in the payload where it is
// 4-byte aligned and copied where it is not; it refuses what Decode
// refuses.
func TestDecodeView(t *testing.T) {
	u := Update{Tensors: map[string][]float32{"model.norm.weight": {1, -2, 3.5}, "model.embed_tokens.weight": {0.25, 7}}}
	blob, err := Encode(4, u)
	if err != nil {
		t.Fatal(err)
	}
	within := func(v []float32, b []byte) bool {
		p := uintptr(unsafe.Pointer(&v[0]))
		lo := uintptr(unsafe.Pointer(&b[0]))
		return p >= lo && p < lo+uintptr(len(b))
	}
	for _, tc := range []struct {
		name    string
		shift   int // the payload starts this many bytes into a buffer
		inPlace bool
	}{{"aligned", 0, littleEndian}, {"misaligned", 1, false}} {
		buf := make([]byte, len(blob)+tc.shift)
		b := buf[tc.shift:]
		copy(b, blob)
		v, got, err := DecodeView("blob", b)
		if err != nil || v != 4 {
			t.Fatalf("%s: version %d, %v", tc.name, v, err)
		}
		for name, want := range u.Tensors {
			if !slices.Equal(got.Tensors[name], want) {
				t.Fatalf("%s: %s: %v, want %v", tc.name, name, got.Tensors[name], want)
			}
			if in := within(got.Tensors[name], b); in != tc.inPlace {
				t.Fatalf("%s: %s lies in the payload: %v, want %v", tc.name, name, in, tc.inPlace)
			}
		}
		_, dec, _ := Decode("blob", b)
		for name := range u.Tensors {
			if within(dec.Tensors[name], b) {
				t.Fatalf("Decode's %s lies in the payload", name)
			}
		}
	}
	if _, _, err := DecodeView("payload", blob[:len(blob)-3]); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated view: %v", err)
	}
}

// Encode writes each value's bits little-endian, NaN payloads included.
func TestEncodeBits(t *testing.T) {
	vals := []float32{1, -0.5, float32(math.Inf(-1)), math.Float32frombits(0x7fc00123), math.Float32frombits(0x00000001), 3e38}
	blob, err := Encode(1, Update{Tensors: map[string][]float32{"a": vals, "b": {2}}})
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for _, x := range append(vals, 2) { // names sorted: a, then b
		want = binary.LittleEndian.AppendUint32(want, math.Float32bits(x))
	}
	if got := blob[len(blob)-len(want):]; !bytes.Equal(got, want) {
		t.Fatalf("payload data %x, want %x", got, want)
	}
}
