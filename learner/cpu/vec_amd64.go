package cpu

import "github.com/rlnode/rlnode/learner/blas"

// vecISA selects the loops: the assembly for the most the CPU has (and
// RLNODE_CPU_ISA allows); tests set it lower to check each against the
// pure-Go ones.
var vecISA = bestVecISA()

func bestVecISA() int {
	switch {
	case blas.AVX512():
		return isaAVX512
	case blas.AVX2():
		return isaAVX2
	}
	return isaGo
}

//go:noescape
func expSubAVX512(dst, src *float32, n int, m float32) (sum float32)

//go:noescape
func softmaxGradAVX512(p, dp *float32, n int, l, d float32)

//go:noescape
func swigluAVX512(out, gate, up *float32, n int)

//go:noescape
func swigluBackAVX512(dg, du, dout, gate, up *float32, n int)

//go:noescape
func maxAVX512(x *float32, n int) float32

//go:noescape
func scaleAVX512(x *float32, n int, a float32)

//go:noescape
func dotAVX512(a, b *float32, n int) float32

//go:noescape
func rmsScaleAVX512(out, x, w *float32, n int, s float32)

//go:noescape
func dot3AVX512(a, b, c *float32, n int) float32

//go:noescape
func rmsBackAVX512(dx, part, dy, x, w *float32, n int, s, c float32)

//go:noescape
func expSubDotAVX512(dst, src *float32, n int, m float32) (sum, dot float32)

//go:noescape
func ropeAVX512(x, cos, sin *float32, heads, half int, sign float32)

//go:noescape
func addToAVX512(dst, src *float32, n int)

// AVX2 loops in vec_avx2_amd64.s, the same contracts.

//go:noescape
func expSubAVX2(dst, src *float32, n int, m float32) (sum float32)

//go:noescape
func softmaxGradAVX2(p, dp *float32, n int, l, d float32)

//go:noescape
func swigluAVX2(out, gate, up *float32, n int)

//go:noescape
func swigluBackAVX2(dg, du, dout, gate, up *float32, n int)

//go:noescape
func maxAVX2(x *float32, n int) float32

//go:noescape
func scaleAVX2(x *float32, n int, a float32)

//go:noescape
func dotAVX2(a, b *float32, n int) float32

//go:noescape
func rmsScaleAVX2(out, x, w *float32, n int, s float32)

//go:noescape
func dot3AVX2(a, b, c *float32, n int) float32

//go:noescape
func rmsBackAVX2(dx, part, dy, x, w *float32, n int, s, c float32)

//go:noescape
func expSubDotAVX2(dst, src *float32, n int, m float32) (sum, dot float32)

//go:noescape
func ropeAVX2(x, cos, sin *float32, heads, half int, sign float32)

//go:noescape
func addToAVX2(dst, src *float32, n int)
