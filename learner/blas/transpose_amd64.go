package blas

// Register-transposing copies in sgemm_amd64.s (AVX): for c < n, r < 8
// (or 4), dst[c*ldd+r] = src[r*ld+c]; n is a multiple of 8 (or 4).

//go:noescape
func transpose8Strip(src *float32, ld int, dst *float32, ldd int, n int)

//go:noescape
func transpose4Strip(src *float32, ld int, dst *float32, ldd int, n int)

// transposeAVX is transposeGo for CPUs with AVX: groups of 8 rows, then of
// 4, go through registers in 8×8 (4×4) blocks; leftovers are copied in Go.
func transposeAVX(dst []float32, ldd int, src []float32, ld int, rows, n int) {
	if rows == 0 || n == 0 {
		return
	}
	_ = src[(rows-1)*ld+n-1]
	_ = dst[(n-1)*ldd+rows-1]
	r := 0
	if n8 := n &^ 7; n8 > 0 {
		for ; r+8 <= rows; r += 8 {
			transpose8Strip(&src[r*ld], ld, &dst[r], ldd, n8)
		}
		transposeRows(dst, ldd, src, ld, 0, r, n8, n)
	}
	if n4 := n &^ 3; n4 > 0 {
		r4 := r
		for ; r+4 <= rows; r += 4 {
			transpose4Strip(&src[r*ld], ld, &dst[r], ldd, n4)
		}
		transposeRows(dst, ldd, src, ld, r4, r, n4, n)
	}
	transposeRows(dst, ldd, src, ld, r, rows, 0, n)
}

// Strided row copies in sgemm_amd64.s (AVX): for p < count,
// dst[p*ldd:][:W] = src[p*lds:][:W] with W = 32, 16, 12 (6: avx2_amd64.s).

//go:noescape
func copy32Strip(src *float32, lds int, dst *float32, ldd int, count int)

//go:noescape
func copy16Strip(src *float32, lds int, dst *float32, ldd int, count int)

//go:noescape
func copy12Strip(src *float32, lds int, dst *float32, ldd int, count int)

//go:noescape
func copy6Strip(src *float32, lds int, dst *float32, ldd int, count int)

// copyStridedAVX is copyStridedGo with vector copies for the kernels'
// sliver widths.
func copyStridedAVX(dst []float32, ldd int, src []float32, lds, width, count int) {
	if count == 0 || width == 0 {
		return
	}
	_ = src[(count-1)*lds+width-1]
	_ = dst[(count-1)*ldd+width-1]
	switch width {
	case 32:
		copy32Strip(&src[0], lds, &dst[0], ldd, count)
	case 16:
		copy16Strip(&src[0], lds, &dst[0], ldd, count)
	case 12:
		copy12Strip(&src[0], lds, &dst[0], ldd, count)
	case 6:
		copy6Strip(&src[0], lds, &dst[0], ldd, count)
	default:
		copyStridedGo(dst, ldd, src, lds, width, count)
	}
}
