package blas

// Packing copies a block of op(A) or op(B) into the order the micro-kernel
// reads it, so that its inner loop walks memory contiguously whatever the
// caller's transposes and strides. Slivers past the matrix edge are padded
// with zeros; the driver discards the padded rows and columns.

// packA copies op(A)[i0:i0+mb, p0:p0+kb] into ceil(mb/mr) slivers of kb×mr:
// sliver s holds, for each p in turn, op(A)[i0+s*mr+r, p0+p] for r < mr.
func packA(kern *microKernel, dst, a []float32, lda int, trans bool, i0, mb, p0, kb int) {
	mr := kern.mr
	for s := 0; s*mr < mb; s++ {
		d := dst[s*mr*kb : (s+1)*mr*kb]
		rows := min(mr, mb-s*mr)
		top := i0 + s*mr
		if trans {
			// op(A)[i, p] = a[p*lda+i]: the sliver's values for one p are
			// adjacent in memory.
			kern.copy(d, mr, a[p0*lda+top:], lda, rows, kb)
		} else {
			kern.transpose(d, mr, a[top*lda+p0:], lda, rows, kb)
		}
		padColumns(d, mr, rows, kb)
	}
}

// packB copies op(B)[p0:p0+kb, j0:j0+nb] into ceil(nb/nr) slivers of kb×nr:
// sliver s holds, for each p in turn, op(B)[p0+p, j0+s*nr+j] for j < nr.
func packB(kern *microKernel, dst, b []float32, ldb int, trans bool, p0, kb, j0, nb int) {
	nr := kern.nr
	for s := 0; s*nr < nb; s++ {
		d := dst[s*nr*kb : (s+1)*nr*kb]
		cols := min(nr, nb-s*nr)
		left := j0 + s*nr
		if trans {
			kern.transpose(d, nr, b[left*ldb+p0:], ldb, cols, kb)
		} else {
			kern.copy(d, nr, b[p0*ldb+left:], ldb, cols, kb)
		}
		padColumns(d, nr, cols, kb)
	}
}

// padColumns zeroes entries width..ld-1 of each of the count rows of d.
func padColumns(d []float32, ld, width, count int) {
	if width == ld {
		return
	}
	for p := 0; p < count; p++ {
		clear(d[p*ld+width : p*ld+ld])
	}
}

// copyStridedGo copies count rows of width floats, src rows lds apart, into
// dst rows ldd apart: the portable strided copy used by packing.
func copyStridedGo(dst []float32, ldd int, src []float32, lds, width, count int) {
	for p := 0; p < count; p++ {
		d := dst[p*ldd : p*ldd+width]
		for j, v := range src[p*lds : p*lds+width] {
			d[j] = v
		}
	}
}
