package shard

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAddToMatchesScalar checks the vector add against the scalar loop
// bit for bit, over lengths around the kernel's block and offsets that
// misalign both operands, with infinities, NaNs and signed zeros.
func TestAddToMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	special := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0, float32(math.Copysign(0, -1)), math.MaxFloat32, math.SmallestNonzeroFloat32}
	for _, n := range []int{0, 1, 31, 32, 33, 63, 64, 65, 1000, 4096 + 7} {
		for _, off := range []int{0, 1, 3} {
			a := make([]float32, n+off)
			b := make([]float32, n+off+5)
			for i := range a {
				a[i] = rng.Float32()*2 - 1
			}
			for i := range b {
				b[i] = rng.Float32()*1e3 - 5e2
				if i%17 == 0 {
					b[i] = special[i%len(special)]
				}
			}
			want := append([]float32(nil), a[off:]...)
			addScalar(want, b[off:])
			got := append([]float32(nil), a[off:]...)
			addTo(got, b[off:])
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(want[i] != want[i] && got[i] != got[i]) {
					t.Fatalf("n=%d off=%d: element %d is %v, the scalar loop gives %v", n, off, i, got[i], want[i])
				}
			}
		}
	}
}

func BenchmarkAddTo(b *testing.B) {
	for _, tc := range []struct {
		name string
		f    func(dst, src []float32)
	}{{"vector", addTo}, {"scalar", addScalar}} {
		b.Run(tc.name, func(b *testing.B) {
			dst, src := make([]float32, 8<<20), make([]float32, 8<<20)
			tc.f(dst, src) // fault the pages in
			b.SetBytes(int64(4 * len(dst)))
			b.ResetTimer()
			for range b.N {
				tc.f(dst, src)
			}
		})
	}
}
