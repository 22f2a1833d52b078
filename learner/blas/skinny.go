package blas

// Skinny products: C with at most skinnyRows rows (decoding a few sequences,
// a GEMV). Packing op(B) would cost as much as the whole product, and a
// 12-row register tile would be mostly padding, so op(B) is read where it
// lies by kernels four rows of A wide: dot products along k when op(B) = Bᵀ
// (rows of B are contiguous), broadcast-and-accumulate across a 64-column
// strip when op(B) = B. op(A) is first copied into a small contiguous buffer
// padded with zero rows to a multiple of four.

// skinnyRows is the most rows of C taken by the skinny path; each group of
// four rows reads op(B) once more. At 16 rows, four passes over a 16 MiB
// op(B) still took under half the time of packing it (measured here with
// a 1024→4096 projection).
const skinnyRows = 16

// skinnyWidth is the column granularity of the skinny kernel for g.
func (g *gemmArgs) skinnyWidth() int {
	if g.transB {
		return 4
	}
	return 64
}

// skinnyOK reports whether the skinny path serves g with kern.
func (g *gemmArgs) skinnyOK(kern *microKernel) bool {
	return kern.dot4x4 != nil && g.m <= skinnyRows && g.n >= g.skinnyWidth() && g.k >= 16
}

// skinnyALen is the length of the copy of op(A) the skinny path makes.
func (g *gemmArgs) skinnyALen() int { return roundUp(g.m, 4) * g.k }

// copySkinnyA copies op(A) into dst as roundUp(m,4) contiguous rows of k,
// the rows past m zero.
func (g *gemmArgs) copySkinnyA(dst []float32) {
	for i := 0; i < roundUp(g.m, 4); i++ {
		row := dst[i*g.k : (i+1)*g.k]
		switch {
		case i >= g.m:
			clear(row)
		case g.transA:
			for p := range row {
				row[p] = g.a[p*g.lda+i]
			}
		default:
			copy(row, g.a[i*g.lda:i*g.lda+g.k])
		}
	}
}

// skinnyCols computes columns [j0, j1) of C from the copy of op(A) in a,
// with out (at least 256 floats) as the kernels' scratch.
// A strip that would run past j1 is shifted left to end at j1 (recomputing
// columns a neighbour owns, but writing only its own), so any j1-j0 works
// as long as n is at least one strip wide.
func (g *gemmArgs) skinnyCols(kern *microKernel, a, out []float32, j0, j1 int) {
	w := g.skinnyWidth()
	for j := j0; j < j1; j += w {
		js := min(j, g.n-w) // strip start, shifted left at the right edge
		skip := j - js      // columns of the strip already done
		cols := min(w, j1-j)
		for i0 := 0; i0 < g.m; i0 += 4 {
			rows := min(4, g.m-i0)
			ai := a[i0*g.k:]
			if g.transB {
				kern.dot4x4(g.k, ai, g.k, g.b[js*g.ldb:], g.ldb, (*[16]float32)(out))
				g.mergeSkinny(out, 4, i0, rows, j, skip, cols)
			} else {
				kern.axpy4x64(g.k, ai, g.k, g.b[js:], g.ldb, (*[256]float32)(out))
				g.mergeSkinny(out, 64, i0, rows, j, skip, cols)
			}
		}
	}
}

// mergeSkinny writes alpha*out + beta*C for rows [i0, i0+rows) and columns
// [j, j+cols) of C, taken from columns skip.. of the out strip (ld wide).
func (g *gemmArgs) mergeSkinny(out []float32, ld, i0, rows, j, skip, cols int) {
	for r := 0; r < rows; r++ {
		src := out[r*ld+skip : r*ld+skip+cols]
		dst := g.c[(i0+r)*g.ldc+j : (i0+r)*g.ldc+j+cols]
		if g.beta == 0 {
			for x, v := range src {
				dst[x] = g.alpha * v
			}
			continue
		}
		for x, v := range src {
			dst[x] = g.alpha*v + g.beta*dst[x]
		}
	}
}
