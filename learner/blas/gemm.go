package blas

// gemmArgs is one product C = alpha*op(A)*op(B) + beta*C in Sgemm's terms.
type gemmArgs struct {
	transA, transB bool
	m, n, k        int
	alpha          float32
	a              []float32
	lda            int
	b              []float32
	ldb            int
	beta           float32
	c              []float32
	ldc            int
}

// blockSize splits total into the fewest blocks of at most max and returns
// the (equal, align-rounded) block length, so that no block is a sliver.
func blockSize(total, max, align int) int {
	nb := (total + max - 1) / max
	return min(max, roundUp((total+nb-1)/nb, align))
}

// block computes rows [i0,i1) and columns [j0,j1) of C on the calling
// goroutine, using buf for packing. k ≥ 1 and alpha ≠ 0 here.
//
// Loop order (GotoBLAS/BLIS): for each nc-wide column block and kc-deep
// slice, pack the kc×nc block of op(B) (kept in L2); for each mc-tall row
// block pack op(A); then for each mr-row A sliver (kept in L1) sweep the
// nr-column B slivers with the micro-kernel.
func (g *gemmArgs) block(kern *microKernel, buf []float32, i0, i1, j0, j1 int) {
	mr, nr := kern.mr, kern.nr
	bPack := buf[:kern.bLen()]
	aPack := buf[kern.bLen() : kern.bLen()+kern.aLen()]
	tile := buf[kern.bLen()+kern.aLen():][:mr*nr]

	kc := blockSize(g.k, kern.kc, 4)
	nc := blockSize(j1-j0, kern.nc, nr)
	mc := blockSize(i1-i0, kern.mc, mr)
	for jc := j0; jc < j1; jc += nc {
		nb := min(nc, j1-jc)
		for pc := 0; pc < g.k; pc += kc {
			kb := min(kc, g.k-pc)
			beta := g.beta
			if pc > 0 {
				beta = 1
			}
			packB(bPack, g.b, g.ldb, g.transB, pc, kb, jc, nb, nr)
			for ic := i0; ic < i1; ic += mc {
				mb := min(mc, i1-ic)
				packA(aPack, g.a, g.lda, g.transA, ic, mb, pc, kb, mr)
				for ir := 0; ir < mb; ir += mr {
					aSliver := aPack[ir*kb : (ir+mr)*kb]
					rows := min(mr, mb-ir)
					for jr := 0; jr < nb; jr += nr {
						bSliver := bPack[jr*kb : (jr+nr)*kb]
						cols := min(nr, nb-jr)
						c := g.c[(ic+ir)*g.ldc+jc+jr:]
						if rows == mr && cols == nr {
							kern.fn(kb, aSliver, bSliver, c, g.ldc, g.alpha, beta)
							continue
						}
						kern.fn(kb, aSliver, bSliver, tile, nr, g.alpha, 0)
						mergeTile(c, g.ldc, tile, nr, rows, cols, beta)
					}
				}
			}
		}
	}
}

// mergeTile sets the rows×cols corner of C to tile + beta*C, not reading C
// when beta is 0.
func mergeTile(c []float32, ldc int, tile []float32, ldt, rows, cols int, beta float32) {
	for r := 0; r < rows; r++ {
		cr := c[r*ldc : r*ldc+cols]
		tr := tile[r*ldt : r*ldt+cols]
		if beta == 0 {
			copy(cr, tr)
			continue
		}
		for j, t := range tr {
			cr[j] = t + beta*cr[j]
		}
	}
}

// scale sets C = beta*C (C = 0 when beta is 0, without reading C): the whole
// product when k is 0 or alpha is 0.
func (g *gemmArgs) scale() {
	for i := 0; i < g.m; i++ {
		row := g.c[i*g.ldc : i*g.ldc+g.n]
		if g.beta == 0 {
			clear(row)
			continue
		}
		if g.beta == 1 {
			continue
		}
		for j := range row {
			row[j] *= g.beta
		}
	}
}

// small computes the product with a direct loop; for products so small
// that packing would cost more than it saves.
func (g *gemmArgs) small() {
	for i := 0; i < g.m; i++ {
		for j := 0; j < g.n; j++ {
			var s float32
			for p := 0; p < g.k; p++ {
				var av, bv float32
				if g.transA {
					av = g.a[p*g.lda+i]
				} else {
					av = g.a[i*g.lda+p]
				}
				if g.transB {
					bv = g.b[j*g.ldb+p]
				} else {
					bv = g.b[p*g.ldb+j]
				}
				s += av * bv
			}
			ci := i*g.ldc + j
			if g.beta == 0 {
				g.c[ci] = g.alpha * s
			} else {
				g.c[ci] = g.alpha*s + g.beta*g.c[ci]
			}
		}
	}
}
