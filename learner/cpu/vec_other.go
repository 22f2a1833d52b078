//go:build !amd64

package cpu

// vecISA is the pure-Go loops off amd64; the functions below are never called.
var vecISA = isaGo

func bestVecISA() int { return isaGo }

func expSubAVX512(dst, src *float32, n int, m float32) float32       { panic("cpu: no AVX-512") }
func softmaxGradAVX512(p, dp *float32, n int, l, d float32)          { panic("cpu: no AVX-512") }
func swigluAVX512(out, gate, up *float32, n int)                     { panic("cpu: no AVX-512") }
func swigluBackAVX512(dg, du, dout, gate, up *float32, n int)        { panic("cpu: no AVX-512") }
func maxAVX512(x *float32, n int) float32                            { panic("cpu: no AVX-512") }
func scaleAVX512(x *float32, n int, a float32)                       { panic("cpu: no AVX-512") }
func dotAVX512(a, b *float32, n int) float32                         { panic("cpu: no AVX-512") }
func rmsScaleAVX512(out, x, w *float32, n int, s float32)            { panic("cpu: no AVX-512") }
func dot3AVX512(a, b, c *float32, n int) float32                     { panic("cpu: no AVX-512") }
func rmsBackAVX512(dx, part, dy, x, w *float32, n int, s, c float32) { panic("cpu: no AVX-512") }
func expSubDotAVX512(dst, src *float32, n int, m float32) (sum, dot float32) {
	panic("cpu: no AVX-512")
}

func ropeAVX512(x, cos, sin *float32, heads, half int, sign float32) { panic("cpu: no AVX-512") }

func addToAVX512(dst, src *float32, n int) { panic("cpu: no AVX-512") }

func expSubAVX2(dst, src *float32, n int, m float32) float32       { panic("cpu: no AVX2") }
func softmaxGradAVX2(p, dp *float32, n int, l, d float32)          { panic("cpu: no AVX2") }
func swigluAVX2(out, gate, up *float32, n int)                     { panic("cpu: no AVX2") }
func swigluBackAVX2(dg, du, dout, gate, up *float32, n int)        { panic("cpu: no AVX2") }
func maxAVX2(x *float32, n int) float32                            { panic("cpu: no AVX2") }
func scaleAVX2(x *float32, n int, a float32)                       { panic("cpu: no AVX2") }
func dotAVX2(a, b *float32, n int) float32                         { panic("cpu: no AVX2") }
func rmsScaleAVX2(out, x, w *float32, n int, s float32)            { panic("cpu: no AVX2") }
func dot3AVX2(a, b, c *float32, n int) float32                     { panic("cpu: no AVX2") }
func rmsBackAVX2(dx, part, dy, x, w *float32, n int, s, c float32) { panic("cpu: no AVX2") }
func expSubDotAVX2(dst, src *float32, n int, m float32) (sum, dot float32) {
	panic("cpu: no AVX2")
}

func ropeAVX2(x, cos, sin *float32, heads, half int, sign float32) { panic("cpu: no AVX2") }
func addToAVX2(dst, src *float32, n int)                           { panic("cpu: no AVX2") }
