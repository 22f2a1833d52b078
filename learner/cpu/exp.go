package cpu

import "math"

// expf is e^x in float32: x = n·ln2 + r with |r| ≤ ln2/2, e^r by its
// degree-6 Taylor polynomial (truncation < 2e-7 relative), scaled by 2^n.
// It is about as accurate as float32 allows for softmax and SiLU, and much
// cheaper than math.Exp's float64 path, which dominated those kernels.
func expf(x float32) float32 {
	switch {
	case x != x:
		return x
	case x < -87.33: // below the smallest normal: flush to 0
		return 0
	case x > 88.72:
		return float32(math.Inf(1))
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693145751953125
		ln2lo = 1.42860682030941723212e-6
	)
	n := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - n*ln2hi - n*ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	e := int32(n)
	if e > 127 { // 2^128 overflows, p·2^128 may not
		return 2 * p * math.Float32frombits(uint32(e-1+127)<<23)
	}
	if e < -126 { // p·2^n would be subnormal; split the scaling
		return p * math.Float32frombits(uint32(e+127+64)<<23) * math.Float32frombits(uint32(127-64)<<23)
	}
	return p * math.Float32frombits(uint32(e+127)<<23)
}
