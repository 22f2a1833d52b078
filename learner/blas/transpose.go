package blas

// transposeGo sets dst[c*ldd+r] = src[r*ld+c] for r < rows, c < n: the
// portable transposing copy used by packing.
func transposeGo(dst []float32, ldd int, src []float32, ld int, rows, n int) {
	transposeRows(dst, ldd, src, ld, 0, rows, 0, n)
}

// transposeRows is transposeGo restricted to rows [r0,r1) and columns [c0,n).
func transposeRows(dst []float32, ldd int, src []float32, ld int, r0, r1, c0, n int) {
	for r := r0; r < r1; r++ {
		s := src[r*ld+c0 : r*ld+n]
		d := dst[r:]
		for c, v := range s {
			d[(c0+c)*ldd] = v
		}
	}
}
