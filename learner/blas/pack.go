package blas

// Packing copies a block of op(A) or op(B) into the order the micro-kernel
// reads it, so that its inner loop walks memory contiguously whatever the
// caller's transposes and strides. Slivers past the matrix edge are padded
// with zeros; the driver discards the padded rows and columns.

// packA copies op(A)[i0:i0+mb, p0:p0+kb] into ceil(mb/mr) slivers of kb×mr:
// sliver s holds, for each p in turn, op(A)[i0+s*mr+r, p0+p] for r < mr.
func packA(dst, a []float32, lda int, trans bool, i0, mb, p0, kb, mr int) {
	for s := 0; s*mr < mb; s++ {
		d := dst[s*mr*kb : (s+1)*mr*kb]
		rows := min(mr, mb-s*mr)
		top := i0 + s*mr
		if trans {
			// op(A)[i, p] = a[p*lda+i]: the sliver's values for one p are
			// adjacent in memory.
			for p := 0; p < kb; p++ {
				src := a[(p0+p)*lda+top:]
				src = src[:rows]
				dp := d[p*mr : p*mr+mr]
				copy(dp, src)
				clear(dp[rows:])
			}
			continue
		}
		// op(A)[i, p] = a[i*lda+p]: read each row along p, scatter with
		// stride mr.
		for r := 0; r < rows; r++ {
			src := a[(top+r)*lda+p0:]
			src = src[:kb]
			dd := d[r:]
			for p, v := range src {
				dd[p*mr] = v
			}
		}
		for r := rows; r < mr; r++ {
			for p := 0; p < kb; p++ {
				d[p*mr+r] = 0
			}
		}
	}
}

// packB copies op(B)[p0:p0+kb, j0:j0+nb] into ceil(nb/nr) slivers of kb×nr:
// sliver s holds, for each p in turn, op(B)[p0+p, j0+s*nr+j] for j < nr.
func packB(dst, b []float32, ldb int, trans bool, p0, kb, j0, nb, nr int) {
	for s := 0; s*nr < nb; s++ {
		d := dst[s*nr*kb : (s+1)*nr*kb]
		cols := min(nr, nb-s*nr)
		left := j0 + s*nr
		if !trans {
			// op(B)[p, j] = b[p*ldb+j]: one row of the sliver is contiguous.
			for p := 0; p < kb; p++ {
				src := b[(p0+p)*ldb+left:]
				src = src[:cols]
				dp := d[p*nr : p*nr+nr]
				copy(dp, src)
				clear(dp[cols:])
			}
			continue
		}
		// op(B)[p, j] = b[j*ldb+p]: read each stored row along p, scatter
		// with stride nr.
		for j := 0; j < cols; j++ {
			src := b[(left+j)*ldb+p0:]
			src = src[:kb]
			dd := d[j:]
			for p, v := range src {
				dd[p*nr] = v
			}
		}
		for j := cols; j < nr; j++ {
			for p := 0; p < kb; p++ {
				d[p*nr+j] = 0
			}
		}
	}
}
