package blas

import "fmt"

// Sgemm computes C = alpha*op(A)*op(B) + beta*C for row-major matrices, where
// op(X) is X or its transpose. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb
// and ldc are the row strides of A, B and C as stored. When beta is 0, C is
// not read (NaNs in C do not propagate). When alpha is 0 or k is 0, A and B
// are not read and C becomes beta*C.
//
// Large products use up to Threads() goroutines. Sgemm is safe to call from
// several goroutines at once on distinct C. Dimensions, strides or slices
// that do not describe the matrices are a programming error: Sgemm panics
// with a message naming the argument instead of touching memory outside
// the slices.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	g := gemmArgs{transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}
	g.check("Sgemm", 1, 0, 0, 0)
	sgemm(&g, Threads())
}

// SgemmSerial is Sgemm on the calling goroutine only, for callers that
// already keep every core busy with independent products (attention's
// heads): splitting each product again would only add hand-offs.
func SgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	g := gemmArgs{transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}
	g.check("SgemmSerial", 1, 0, 0, 0)
	sgemm(&g, 1)
}

// SgemmBatched computes batch independent products
//
//	C_i = alpha*op(A_i)*op(B_i) + beta*C_i,  i < batch,
//
// where A_i starts at a[i*strideA], B_i at b[i*strideB] and C_i at
// c[i*strideC], each laid out as in Sgemm. strideA or strideB may be 0 to
// use one matrix for every product; the C_i must not overlap. This is the
// shape of attention (one product per head): the products are spread over
// the goroutines whole, instead of each being split.
func SgemmBatched(transA, transB bool, batch, m, n, k int, alpha float32, a []float32, strideA, lda int, b []float32, strideB, ldb int, beta float32, c []float32, strideC, ldc int) {
	g := gemmArgs{transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}
	if batch < 0 {
		panic(fmt.Sprintf("blas: SgemmBatched: batch = %d < 0", batch))
	}
	g.check("SgemmBatched", batch, strideA, strideB, strideC)
	if batch == 0 || m == 0 || n == 0 {
		return
	}
	threads := Threads()
	work := int64(m) * int64(n) * int64(k)
	bigItems := work >= minTaskWork*int64(threads) && batch < 2*threads
	if k == 0 || alpha == 0 || batch == 1 || threads == 1 || bigItems || work*int64(batch) < minTaskWork {
		// Too few products to share out whole, each big enough to split,
		// or all together too small to share: one product after another.
		for i := 0; i < batch; i++ {
			gi := g
			gi.c = g.c[i*strideC:]
			if k > 0 && alpha != 0 { // else A and B are not read and may be short
				gi.a, gi.b = g.a[i*strideA:], g.b[i*strideB:]
			}
			sgemm(&gi, threads)
		}
		return
	}
	if g.beta == 0 {
		g.beta = 0 // -0 → +0: the kernels test the bits
	}
	call := getCall()
	call.g, call.kern = g, active.Load()
	call.nPack = 0
	call.batch, call.strideA, call.strideB, call.strideC = batch, strideA, strideB, strideC
	call.ntasks = int64(batch)
	call.run(threads)
}

// smallWork is the size (multiply-adds) below which packing is not worth it.
const smallWork = 4 * 4 * 4 * 8

func sgemm(g *gemmArgs, threads int) {
	if g.m == 0 || g.n == 0 {
		return
	}
	if g.k == 0 || g.alpha == 0 {
		g.scale()
		return
	}
	work := int64(g.m) * int64(g.n) * int64(g.k)
	if work <= smallWork {
		g.small()
		return
	}
	if g.beta == 0 {
		g.beta = 0 // -0 → +0: the kernels test the bits
	}
	kern := active.Load()
	threads = int(min(int64(threads), work/minTaskWork))
	if g.skinnyOK(kern) {
		g.skinny(kern, threads)
		return
	}
	if threads <= 1 {
		var bufs taskBufs
		bufs.get(kern, g.panelLen(kern))
		g.serial(kern, bufs.a.f, bufs.panel.f)
		bufs.put()
		return
	}
	var bufs taskBufs
	bufs.get(kern, g.panelLen(kern))
	kc := blockSize(g.k, kern.kc, 4)
	pw := panelWidth(g.n, g.k, kern.nr)
	for j0 := 0; j0 < g.n; j0 += pw {
		call := getCall()
		call.g, call.kern, call.batch = *g, kern, 0
		call.p = newPanel(kern, j0, min(pw, g.n-j0), kc, bufs.panel.f)
		call.plan(threads)
		call.run(threads)
	}
	bufs.put()
}

// skinny runs the skinny path (skinny.go), split by columns over threads.
func (g *gemmArgs) skinny(kern *microKernel, threads int) {
	a := getBuf(&panelFree, max(g.skinnyALen(), panelBudget))
	defer putBuf(&panelFree, a)
	g.copySkinnyA(a.f)
	if threads <= 1 {
		out := getBuf(&taskFree, kern.bufLen())
		g.skinnyCols(kern, a.f, out.f, 0, g.n)
		putBuf(&taskFree, out)
		return
	}
	call := getCall()
	call.g, call.kern, call.batch, call.skinnyA = *g, kern, 0, a.f
	call.nPack = 0
	tasks := threads * tasksPerThread
	call.colChunk = roundUp((g.n+tasks-1)/tasks, g.skinnyWidth())
	call.ntasks = int64((g.n + call.colChunk - 1) / call.colChunk)
	call.run(threads)
}

// plan cuts a panel phase into tasks: a packing task per thread, then
// about tasksPerThread compute tasks per thread. Compute tasks split C by
// rows and, when there are too few rows, also by columns, into nearly
// equal whole slivers (sizes differ by at most one), so that threads of
// equal speed finish together.
func (c *gemmCall) plan(threads int) {
	kern := c.kern
	c.colSlivers = c.p.nPad / kern.nr
	c.rowSlivers = (c.g.m + kern.mr - 1) / kern.mr
	c.nPack = min(c.colSlivers, threads)

	target := threads * tasksPerThread
	c.tm = min(c.rowSlivers, target)
	c.tn = 1
	if c.tm < target {
		c.tn = min(c.colSlivers, (target+c.tm-1)/c.tm)
	}
	c.ntasks = int64(c.nPack + c.tm*c.tn)
	c.packed.Add(c.nPack)
}

// part returns part t of n items cut into parts nearly equal parts.
func part(n, parts, t int) (lo, hi int) { return t * n / parts, (t + 1) * n / parts }

// check panics unless the slices hold the matrices the arguments describe,
// for every product of a batch.
func (g *gemmArgs) check(fn string, batch, strideA, strideB, strideC int) {
	if g.m < 0 || g.n < 0 || g.k < 0 {
		panic(fmt.Sprintf("blas: %s: negative dimension m=%d n=%d k=%d", fn, g.m, g.n, g.k))
	}
	if strideA < 0 || strideB < 0 || strideC < 0 {
		panic(fmt.Sprintf("blas: %s: negative stride strideA=%d strideB=%d strideC=%d", fn, strideA, strideB, strideC))
	}
	aRows, aCols := g.m, g.k
	if g.transA {
		aRows, aCols = g.k, g.m
	}
	bRows, bCols := g.k, g.n
	if g.transB {
		bRows, bCols = g.n, g.k
	}
	checkMatrix(fn, "A", "lda", g.a, aRows, aCols, g.lda, batch, strideA, g.transA)
	checkMatrix(fn, "B", "ldb", g.b, bRows, bCols, g.ldb, batch, strideB, g.transB)
	checkMatrix(fn, "C", "ldc", g.c, g.m, g.n, g.ldc, batch, strideC, false)
	if batch > 1 && g.m > 0 && g.n > 0 && strideC < (g.m-1)*g.ldc+g.n {
		panic(fmt.Sprintf("blas: %s: strideC = %d makes the %d×%d products' C overlap (need ≥ %d)", fn, strideC, g.m, g.n, (g.m-1)*g.ldc+g.n))
	}
}

func checkMatrix(fn, name, ldName string, x []float32, rows, cols, ld, batch, stride int, trans bool) {
	if ld < max(1, cols) {
		panic(fmt.Sprintf("blas: %s: %s = %d is less than the %d columns of stored %s (trans%s=%v)", fn, ldName, ld, cols, name, name, trans))
	}
	if rows == 0 || cols == 0 || batch == 0 {
		return
	}
	need := (batch-1)*stride + (rows-1)*ld + cols
	if len(x) < need {
		panic(fmt.Sprintf("blas: %s: len(%s) = %d, need %d for %d stored %d×%d matrices with ld %d, stride %d (trans%s=%v)",
			fn, lower(name), len(x), need, batch, rows, cols, ld, stride, name, trans))
	}
}

func lower(name string) string {
	switch name {
	case "A":
		return "a"
	case "B":
		return "b"
	}
	return "c"
}
