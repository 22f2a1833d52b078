package dashboard

import "math"

// Decimate picks at most limit of the points (xs[i], ys[i]) by
// largest-triangle-three-buckets: the first and last points are kept, and
// from each of limit-2 buckets in between the point that spans the largest
// triangle with the point kept before it and the mean of the next bucket,
// so peaks and dips survive. Series of limit points or fewer, and limits
// under 3, come back as they are (the latter truncated to limit). xs must
// be as long as ys; the result indexes into them.
func Decimate(xs, ys []float64, limit int) []int {
	n := len(ys)
	if n <= limit || limit <= 0 {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	if limit < 3 {
		idx := make([]int, limit)
		for i := range idx {
			idx[i] = i * (n - 1) / max(limit-1, 1)
		}
		return idx
	}
	out := make([]int, 0, limit)
	out = append(out, 0)
	every := float64(n-2) / float64(limit-2)
	a := 0
	for b := 0; b < limit-2; b++ {
		lo := int(math.Floor(float64(b)*every)) + 1
		hi := min(int(math.Floor(float64(b+1)*every))+1, n-1)
		// The mean of the next bucket (the last point for the last bucket).
		nlo, nhi := hi, min(int(math.Floor(float64(b+2)*every))+1, n-1)
		if nhi <= nlo {
			nlo, nhi = n-1, n
		}
		var mx, my float64
		for i := nlo; i < nhi; i++ {
			mx += xs[i]
			my += ys[i]
		}
		mx /= float64(nhi - nlo)
		my /= float64(nhi - nlo)
		best, bestArea := lo, -1.0
		for i := lo; i < hi; i++ {
			area := math.Abs((xs[a]-mx)*(ys[i]-ys[a]) - (xs[a]-xs[i])*(my-ys[a]))
			if area > bestArea {
				best, bestArea = i, area
			}
		}
		out = append(out, best)
		a = best
	}
	return append(out, n-1)
}

// Smooth returns the exponential moving average of ys with weight w in
// [0, 1) on the past, debiased at the start (as TensorBoard draws it): w
// 0 returns ys unchanged.
func Smooth(ys []float64, w float64) []float64 {
	out := make([]float64, len(ys))
	if w <= 0 || w >= 1 {
		copy(out, ys)
		return out
	}
	var acc, weight float64
	for i, y := range ys {
		acc = w*acc + (1-w)*y
		weight = w*weight + (1 - w)
		out[i] = acc / weight
	}
	return out
}
