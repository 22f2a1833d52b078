package cpu

import "math"

// Element-wise loops the kernels spend their time in, each with a pure-Go
// version (the reference, and the path on CPUs without AVX2), an AVX-512 one
// in vec_amd64.s and an AVX2 one in vec_avx2_amd64.s. The wrappers check
// lengths so the assembly never reads or writes past a slice.

// The loops vecISA selects.
const (
	isaGo = iota
	isaAVX2
	isaAVX512
)

// expSub sets dst[i] = exp(src[i] - m) and returns the sum of dst.
func expSub(dst, src []float32, m float32) float32 {
	mustLen("expSub", len(dst), len(src))
	switch {
	case vecISA == isaAVX512 && len(src) > 0:
		return expSubAVX512(&dst[0], &src[0], len(src), m)
	case vecISA == isaAVX2 && len(src) > 0:
		return expSubAVX2(&dst[0], &src[0], len(src), m)
	}
	return expSubGo(dst, src, m)
}

func expSubGo(dst, src []float32, m float32) float32 {
	var s float32
	for i, v := range src {
		e := expf(v - m)
		dst[i] = e
		s += e
	}
	return s
}

// softmaxGrad sets p[i] = exp(p[i] - l), then dp[i] = p[i]*(dp[i] - d):
// scores to probabilities with a known log-sum-exp l, and the softmax
// backward with d = sum(dOut*out).
func softmaxGrad(p, dp []float32, l, d float32) {
	mustLen("softmaxGrad", len(p), len(dp))
	switch {
	case vecISA == isaAVX512 && len(p) > 0:
		softmaxGradAVX512(&p[0], &dp[0], len(p), l, d)
		return
	case vecISA == isaAVX2 && len(p) > 0:
		softmaxGradAVX2(&p[0], &dp[0], len(p), l, d)
		return
	}
	softmaxGradGo(p, dp, l, d)
}

func softmaxGradGo(p, dp []float32, l, d float32) {
	for j, v := range p {
		e := expf(v - l)
		p[j] = e
		dp[j] = e * (dp[j] - d)
	}
}

// swiglu sets out = silu(g) * u.
func swiglu(out, g, u []float32) {
	mustLen("swiglu", len(out), len(g))
	mustLen("swiglu", len(out), len(u))
	switch {
	case vecISA == isaAVX512 && len(out) > 0:
		swigluAVX512(&out[0], &g[0], &u[0], len(out))
		return
	case vecISA == isaAVX2 && len(out) > 0:
		swigluAVX2(&out[0], &g[0], &u[0], len(out))
		return
	}
	swigluGo(out, g, u)
}

func swigluGo(out, g, u []float32) {
	for i, x := range g {
		out[i] = x * sigmoid(x) * u[i]
	}
}

// swigluBack overwrites dg and du with the gradients of out = silu(g)*u;
// d silu(g)/dg = sig(g) * (1 + g*(1 - sig(g))).
func swigluBack(dg, du, dout, g, u []float32) {
	n := len(dout)
	mustLen("swigluBack", len(dg), n)
	mustLen("swigluBack", len(du), n)
	mustLen("swigluBack", len(g), n)
	mustLen("swigluBack", len(u), n)
	switch {
	case vecISA == isaAVX512 && n > 0:
		swigluBackAVX512(&dg[0], &du[0], &dout[0], &g[0], &u[0], n)
		return
	case vecISA == isaAVX2 && n > 0:
		swigluBackAVX2(&dg[0], &du[0], &dout[0], &g[0], &u[0], n)
		return
	}
	swigluBackGo(dg, du, dout, g, u)
}

func swigluBackGo(dg, du, dout, g, u []float32) {
	for i, x := range g {
		s := sigmoid(x)
		du[i] = dout[i] * x * s
		dg[i] = dout[i] * u[i] * s * (1 + x*(1-s))
	}
}

// maxOf returns the largest element of x, -Inf for none.
func maxOf(x []float32) float32 {
	switch {
	case vecISA == isaAVX512 && len(x) > 0:
		return maxAVX512(&x[0], len(x))
	case vecISA == isaAVX2 && len(x) > 0:
		return maxAVX2(&x[0], len(x))
	}
	return maxGo(x)
}

func maxGo(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

// scal sets x *= a.
func scal(x []float32, a float32) {
	switch {
	case vecISA == isaAVX512 && len(x) > 0:
		scaleAVX512(&x[0], len(x), a)
		return
	case vecISA == isaAVX2 && len(x) > 0:
		scaleAVX2(&x[0], len(x), a)
		return
	}
	for i := range x {
		x[i] *= a
	}
}

// dotf returns sum(a[i]*b[i]) accumulated in float32.
func dotf(a, b []float32) float32 {
	mustLen("dotf", len(a), len(b))
	switch {
	case vecISA == isaAVX512 && len(a) > 0:
		return dotAVX512(&a[0], &b[0], len(a))
	case vecISA == isaAVX2 && len(a) > 0:
		return dotAVX2(&a[0], &b[0], len(a))
	}
	var s float32
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

// rmsScale sets out = x * s * w: one row of RMSNorm's output.
func rmsScale(out, x, w []float32, s float32) {
	mustLen("rmsScale", len(out), len(x))
	mustLen("rmsScale", len(out), len(w))
	switch {
	case vecISA == isaAVX512 && len(out) > 0:
		rmsScaleAVX512(&out[0], &x[0], &w[0], len(out), s)
		return
	case vecISA == isaAVX2 && len(out) > 0:
		rmsScaleAVX2(&out[0], &x[0], &w[0], len(out), s)
		return
	}
	for j, v := range x {
		out[j] = v * s * w[j]
	}
}

// dot3 returns sum(a[i]*b[i]*c[i]) accumulated in float32.
func dot3(a, b, c []float32) float32 {
	mustLen("dot3", len(a), len(b))
	mustLen("dot3", len(a), len(c))
	switch {
	case vecISA == isaAVX512 && len(a) > 0:
		return dot3AVX512(&a[0], &b[0], &c[0], len(a))
	case vecISA == isaAVX2 && len(a) > 0:
		return dot3AVX2(&a[0], &b[0], &c[0], len(a))
	}
	var d float32
	for j, v := range a {
		d += v * b[j] * c[j]
	}
	return d
}

// rmsBack does one row of RMSNorm's backward pass:
// dx += s*(dy*w - x*c) and part += dy*x*s.
func rmsBack(dx, part, dy, x, w []float32, s, c float32) {
	n := len(x)
	mustLen("rmsBack", len(dx), n)
	mustLen("rmsBack", len(part), n)
	mustLen("rmsBack", len(dy), n)
	mustLen("rmsBack", len(w), n)
	switch {
	case vecISA == isaAVX512 && n > 0:
		rmsBackAVX512(&dx[0], &part[0], &dy[0], &x[0], &w[0], n, s, c)
		return
	case vecISA == isaAVX2 && n > 0:
		rmsBackAVX2(&dx[0], &part[0], &dy[0], &x[0], &w[0], n, s, c)
		return
	}
	for j, v := range x {
		dx[j] += s * (dy[j]*w[j] - v*c)
		part[j] += dy[j] * v * s
	}
}

// expSubDot sets dst[i] = exp(src[i] - m) and returns the sums of dst and
// of dst[i]*(src[i] - m): the pieces of a softmax's entropy.
func expSubDot(dst, src []float32, m float32) (sum, dot float32) {
	mustLen("expSubDot", len(dst), len(src))
	switch {
	case vecISA == isaAVX512 && len(src) > 0:
		return expSubDotAVX512(&dst[0], &src[0], len(src), m)
	case vecISA == isaAVX2 && len(src) > 0:
		return expSubDotAVX2(&dst[0], &src[0], len(src), m)
	}
	for i, v := range src {
		d := v - m
		e := expf(d)
		dst[i] = e
		sum += e
		dot += e * d
	}
	return sum, dot
}

// ropeRow rotates the heads of one token, x holding heads vectors of
// 2*len(cs) floats: pairs (i, i+half) by the angle whose cosine and sine
// are cs[i] and sign*sn[i].
func ropeRow(x, cs, sn []float32, heads int, sign float32) {
	half := len(cs)
	mustLen("ropeRow", len(sn), half)
	mustLen("ropeRow", len(x), heads*2*half)
	switch {
	case vecISA == isaAVX512 && half > 0 && heads > 0:
		ropeAVX512(&x[0], &cs[0], &sn[0], heads, half, sign)
		return
	case vecISA == isaAVX2 && half > 0 && heads > 0:
		ropeAVX2(&x[0], &cs[0], &sn[0], heads, half, sign)
		return
	}
	for h := 0; h < heads; h++ {
		x1, x2 := x[2*h*half:(2*h+1)*half], x[(2*h+1)*half:(2*h+2)*half]
		for i := range x1 {
			c, s := cs[i], sign*sn[i]
			a, bb := x1[i], x2[i]
			x1[i] = a*c - bb*s
			x2[i] = bb*c + a*s
		}
	}
}

// addTo sets dst += src.
func addTo(dst, src []float32) {
	mustLen("addTo", len(dst), len(src))
	switch {
	case vecISA == isaAVX512 && len(dst) > 0:
		addToAVX512(&dst[0], &src[0], len(dst))
		return
	case vecISA == isaAVX2 && len(dst) > 0:
		addToAVX2(&dst[0], &src[0], len(dst))
		return
	}
	for i, v := range src {
		dst[i] += v
	}
}
