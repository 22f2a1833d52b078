package cpu

import "github.com/rlnode/rlnode/learner/blas"

// useAVX512 selects the assembly loops; tests turn it off to check the
// pure-Go ones.
var useAVX512 = blas.AVX512()

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
