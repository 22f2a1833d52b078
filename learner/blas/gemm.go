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

// panelBudget bounds, in floats, a packed panel of op(B) (4 MiB): products
// wider than budget/k columns are done one panel at a time. A variable so
// that tests can force many panels on small products.
var panelBudget = 1 << 20

// blockSize splits total into the fewest blocks of at most max and returns
// the (equal, align-rounded) block length, so that no block is a sliver.
func blockSize(total, max, align int) int {
	nb := (total + max - 1) / max
	return min(max, roundUp((total+nb-1)/nb, align))
}

// panelWidth is the width of the column panels of op(B) for a k-deep product.
func panelWidth(n, k, nr int) int {
	limit := max(nr, panelBudget/k/nr*nr)
	return blockSize(n, limit, nr)
}

// panel is columns [j0, j0+w) of op(B), packed over all of k: the kc-deep
// block that starts at row pc lies at data[pc*nPad:], its sliver s (nr
// columns) at data[pc*nPad+s*kb*nr:] where kb is that block's depth.
type panel struct {
	j0, w, nPad, kc int
	data            []float32
}

func newPanel(kern *microKernel, j0, w, kc int, buf []float32) panel {
	nPad := roundUp(w, kern.nr)
	return panel{j0: j0, w: w, nPad: nPad, kc: kc, data: buf}
}

// packPanel packs slivers [s0, s1) of the panel over all of k.
func (g *gemmArgs) packPanel(kern *microKernel, p *panel, s0, s1 int) {
	nr := kern.nr
	for pc := 0; pc < g.k; pc += p.kc {
		kb := min(p.kc, g.k-pc)
		dst := p.data[pc*p.nPad+s0*kb*nr : pc*p.nPad+s1*kb*nr]
		packB(kern, dst, g.b, g.ldb, g.transB, pc, kb, p.j0+s0*nr, min(s1*nr, p.w)-s0*nr)
	}
}

// directA makes computeBlock read full A slivers where they lie
// (kern.direct) when op(A) = A, instead of packing them: the kernel then
// walks 12 rows of A with stride lda, which measured as fast as packed
// slivers here even for lda a multiple of 4 KiB, and the packing (a
// transpose) is saved. That matters most where each sliver meets few B
// slivers, such as attention's P·V. A variable so that tests can turn it off.
var directA = true

// computeBlock computes rows [i0,i1) of C (at most mc of them) over panel
// columns [c0,c1) (c0 a multiple of nr), with buf holding the packed rows
// of op(A) and an edge tile. k ≥ 1 and alpha ≠ 0 here.
//
// Loop order (GotoBLAS/BLIS): for each kc-deep slice, pack those rows of
// op(A) (unless read directly, see directA); for each nc-wide block of the panel (kept in L2), let each mr-row
// A sliver (kept in L1) sweep the block's nr-column B slivers.
func (g *gemmArgs) computeBlock(kern *microKernel, buf []float32, p *panel, i0, i1, c0, c1 int) {
	mr, nr := kern.mr, kern.nr
	aPack := buf[:kern.aLen()]
	tile := buf[kern.aLen():][:mr*nr]
	mb := i1 - i0
	direct := directA && kern.direct != nil && !g.transA
	full := mb / mr * mr // rows in full slivers
	for pc := 0; pc < g.k; pc += p.kc {
		kb := min(p.kc, g.k-pc)
		beta := g.beta
		if pc > 0 {
			beta = 1
		}
		switch {
		case !direct:
			packA(kern, aPack, g.a, g.lda, g.transA, i0, mb, pc, kb)
		case full < mb: // only the last, partial sliver is packed
			packA(kern, aPack, g.a, g.lda, false, i0+full, mb-full, pc, kb)
		}
		bBlock := p.data[pc*p.nPad:]
		for jc := c0; jc < c1; jc += kern.nc {
			je := min(jc+kern.nc, c1)
			for ir := 0; ir < mb; ir += mr {
				rows := min(mr, mb-ir)
				aDirect := direct && rows == mr
				var aSliver []float32
				switch {
				case aDirect:
					aSliver = g.a[(i0+ir)*g.lda+pc:]
				case direct:
					aSliver = aPack[:mr*kb]
				default:
					aSliver = aPack[ir*kb : (ir+mr)*kb]
				}
				for jr := jc; jr < je; jr += nr {
					bSliver := bBlock[jr*kb : (jr+nr)*kb]
					cols := min(nr, je-jr)
					c := g.c[(i0+ir)*g.ldc+p.j0+jr:]
					dst, ldd, b := c, g.ldc, beta
					if rows < mr || cols < nr {
						dst, ldd, b = tile, nr, 0
					}
					if aDirect {
						kern.direct(kb, aSliver, g.lda, bSliver, dst, ldd, g.alpha, b)
					} else {
						kern.fn(kb, aSliver, bSliver, dst, ldd, g.alpha, b)
					}
					if rows < mr || cols < nr {
						mergeTile(c, g.ldc, tile, nr, rows, cols, beta)
					}
				}
			}
		}
	}
}

// serial computes the whole product on the calling goroutine. buf is a
// task buffer (kern.bufLen()), panelBuf holds at least one packed panel.
func (g *gemmArgs) serial(kern *microKernel, buf, panelBuf []float32) {
	kc := blockSize(g.k, kern.kc, 4)
	mc := blockSize(g.m, kern.mc, kern.mr)
	pw := panelWidth(g.n, g.k, kern.nr)
	for j0 := 0; j0 < g.n; j0 += pw {
		p := newPanel(kern, j0, min(pw, g.n-j0), kc, panelBuf)
		g.packPanel(kern, &p, 0, p.nPad/kern.nr)
		for i0 := 0; i0 < g.m; i0 += mc {
			g.computeBlock(kern, buf, &p, i0, min(i0+mc, g.m), 0, p.w)
		}
	}
}

// panelLen is the buffer length serial and the parallel driver need for
// one packed panel.
func (g *gemmArgs) panelLen(kern *microKernel) int {
	return g.k * roundUp(panelWidth(g.n, g.k, kern.nr), kern.nr)
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
		switch g.beta {
		case 0:
			clear(row)
		case 1:
		default:
			for j := range row {
				row[j] *= g.beta
			}
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
