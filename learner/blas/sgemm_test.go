package blas

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// sgemmRef is the plain triple loop Sgemm must agree with, accumulated in
// float64 so that it is the more accurate of the two.
func sgemmRef(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			if beta == 0 {
				c[i*ldc+j] = float32(float64(alpha) * s)
			} else {
				c[i*ldc+j] = float32(float64(alpha)*s + float64(beta)*float64(c[i*ldc+j]))
			}
		}
	}
}

// gemmCase is one product with its storage: pads add to the leading
// dimensions beyond the minimum.
type gemmCase struct {
	transA, transB   bool
	m, n, k          int
	alpha, beta      float32
	padA, padB, padC int
	batch            int
	gapA, gapB, gapC int // extra floats between batch items
	shareA, shareB   bool
}

func (tc gemmCase) String() string {
	return fmt.Sprintf("tA=%v,tB=%v,m=%d,n=%d,k=%d,alpha=%g,beta=%g,pad=%d/%d/%d,batch=%d",
		tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, tc.beta, tc.padA, tc.padB, tc.padC, tc.batch)
}

// key tells cases apart, beta = -0 from beta = 0 included.
func (tc gemmCase) key() string { return fmt.Sprintf("%#v", tc) }

// operands builds random A, B, C for tc, plus the row strides and the
// per-item strides. C's padding is filled with a sentinel that must survive.
type operands struct {
	a, b, c                   []float32
	lda, ldb, ldc             int
	strideA, strideB, strideC int
}

const sentinel = float32(-12345.5)

func makeOperands(tc gemmCase, rng *rand.Rand) operands {
	var o operands
	aRows, aCols := tc.m, tc.k
	if tc.transA {
		aRows, aCols = tc.k, tc.m
	}
	bRows, bCols := tc.k, tc.n
	if tc.transB {
		bRows, bCols = tc.n, tc.k
	}
	o.lda, o.ldb, o.ldc = max(1, aCols+tc.padA), max(1, bCols+tc.padB), max(1, tc.n+tc.padC)
	batch := max(1, tc.batch)
	o.strideA = aRows*o.lda + tc.gapA
	o.strideB = bRows*o.ldb + tc.gapB
	o.strideC = tc.m*o.ldc + tc.gapC
	if tc.shareA {
		o.strideA = 0
	}
	if tc.shareB {
		o.strideB = 0
	}
	o.a = randSlice(rng, (batch-1)*o.strideA+aRows*o.lda)
	o.b = randSlice(rng, (batch-1)*o.strideB+bRows*o.ldb)
	o.c = make([]float32, (batch-1)*o.strideC+tc.m*o.ldc)
	for i := range o.c {
		o.c[i] = sentinel
	}
	for bi := 0; bi < batch; bi++ {
		for i := 0; i < tc.m; i++ {
			for j := 0; j < tc.n; j++ {
				o.c[bi*o.strideC+i*o.ldc+j] = rng.Float32()*2 - 1
			}
		}
	}
	return o
}

func randSlice(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	return x
}

// tolerance for a dot product of length k of values in [-1, 1]: float32
// accumulation error grows at worst like k·ε; blocked sums grow far slower.
func tolerance(k int, alpha, beta float32) float64 {
	scale := math.Abs(float64(alpha))*float64(k) + math.Abs(float64(beta))
	return 1e-6 * (scale + 1) * 8
}

// compare checks got against want over the whole C storage: the m×n
// entries within tolerance, everything else (padding, gaps) untouched.
func compare(t *testing.T, tc gemmCase, o operands, got, want []float32) {
	t.Helper()
	tol := tolerance(tc.k, tc.alpha, tc.beta)
	bad := 0
	for idx := range want {
		g, w := got[idx], want[idx]
		if w == sentinel {
			if g != sentinel {
				t.Errorf("%v: C[%d] outside the product changed to %g", tc, idx, g)
				bad++
			}
		} else if d := math.Abs(float64(g) - float64(w)); !(d <= tol) {
			t.Errorf("%v: C[%d] = %g, want %g (|diff| %g > tol %g)", tc, idx, g, w, d, tol)
			bad++
		}
		if bad > 5 {
			t.Fatalf("%v: too many mismatches", tc)
		}
	}
}

// refResults memoizes the reference product of each case: the operands are
// a function of the case, and the same cases run under every kernel and
// thread count.
var refResults = map[string][]float32{}

// caseOperands builds the operands of tc from a seed derived from tc.
func caseOperands(tc gemmCase) operands {
	h := fnv.New64a()
	h.Write([]byte(tc.key()))
	return makeOperands(tc, rand.New(rand.NewPCG(h.Sum64(), 1)))
}

func runCase(t *testing.T, tc gemmCase) {
	t.Helper()
	o := caseOperands(tc)
	want, ok := refResults[tc.key()]
	if !ok {
		want = append([]float32(nil), o.c...)
		for bi := 0; bi < max(1, tc.batch); bi++ {
			sgemmRef(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a[bi*o.strideA:], o.lda, o.b[bi*o.strideB:], o.ldb, tc.beta, want[bi*o.strideC:], o.ldc)
		}
		refResults[tc.key()] = want
	}
	got := o.c
	if tc.batch == 0 {
		Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, got, o.ldc)
	} else {
		SgemmBatched(tc.transA, tc.transB, tc.batch, tc.m, tc.n, tc.k, tc.alpha, o.a, o.strideA, o.lda, o.b, o.strideB, o.ldb, tc.beta, got, o.strideC, o.ldc)
	}
	compare(t, tc, o, got, want)
}

// withKernel runs f with the given micro-kernel forced, restoring the
// CPU's choice afterwards.
func withKernel(t *testing.T, k *microKernel) {
	t.Helper()
	prev := active.Swap(k)
	t.Cleanup(func() { active.Store(prev) })
}

var edgeSizes = []int{1, 2, 7, 12, 17, 33, 65}

func TestSgemmShapes(t *testing.T) {
	for _, kern := range testKernels() {
		t.Run(kern.name, func(t *testing.T) {
			withKernel(t, kern)
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					for _, m := range edgeSizes {
						for _, n := range edgeSizes {
							for _, k := range edgeSizes {
								tc := gemmCase{transA: tA, transB: tB, m: m, n: n, k: k, alpha: 1, beta: 0}
								runCase(t, tc)
							}
						}
					}
				}
			}
		})
	}
}

// withThreads sets the thread count for one test.
func withThreads(t *testing.T, n int) {
	t.Helper()
	prev := SetThreads(n)
	t.Cleanup(func() { SetThreads(prev) })
}

// TestSgemmLarge covers the blocked and parallel paths: k deeper than kc,
// rows beyond one task, panels wider than nc and more than one panel, with
// every transpose, padded strides, several alpha/beta and thread counts.
func TestSgemmLarge(t *testing.T) {
	shapes := []struct{ m, n, k int }{
		{1000, 33, 17},
		{17, 1000, 33},
		{257, 129, 400},
		{130, 1100, 50},
		{40, 700, 500},
		{300, 2, 1000},
	}
	scalars := []struct{ alpha, beta float32 }{{1, 0}, {-0.5, 1}, {2, -1.5}}
	for _, kern := range testKernels() {
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/threads=%d", kern.name, threads), func(t *testing.T) {
				withKernel(t, kern)
				withThreads(t, threads)
				for i, s := range shapes {
					sc := scalars[i%len(scalars)]
					for tr := 0; tr < 4; tr++ {
						tc := gemmCase{transA: tr&1 != 0, transB: tr&2 != 0, m: s.m, n: s.n, k: s.k,
							alpha: sc.alpha, beta: sc.beta, padA: tr, padB: 3 - tr, padC: 5}
						runCase(t, tc)
					}
				}
			})
		}
	}
}

// TestSgemmSkinny covers products with few rows of C (the skinny path where
// the kernel has one): strips shifted at the right edge, row groups of four
// padded with zero rows, k tails under a mask, several threads.
func TestSgemmSkinny(t *testing.T) {
	for _, kern := range testKernels() {
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/threads=%d", kern.name, threads), func(t *testing.T) {
				withKernel(t, kern)
				withThreads(t, threads)
				for _, m := range []int{1, 3, 4, 5, 13, 16} {
					for _, n := range []int{4, 5, 64, 65, 200, 1030} {
						for _, k := range []int{16, 17, 250} {
							for tr := 0; tr < 4; tr++ {
								tc := gemmCase{transA: tr&1 != 0, transB: tr&2 != 0, m: m, n: n, k: k,
									alpha: 1.5, beta: float32(tr % 2), padA: 1, padB: tr, padC: 3}
								runCase(t, tc)
							}
						}
					}
				}
				tc := gemmCase{transB: true, m: 2, n: 3000, k: 700, alpha: 1, batch: 3}
				runCase(t, tc)
			})
		}
	}
}

// TestSgemmDirectA runs op(A) = A products with A slivers read where they
// lie (where the kernel can) and packed.
func TestSgemmDirectA(t *testing.T) {
	prev := directA
	t.Cleanup(func() { directA = prev })
	for _, direct := range []bool{false, true} {
		directA = direct
		for _, kern := range testKernels() {
			t.Run(fmt.Sprintf("%s/direct=%v", kern.name, direct), func(t *testing.T) {
				withKernel(t, kern)
				for _, s := range [][3]int{{13, 40, 9}, {36, 64, 400}, {250, 300, 100}, {100, 33, 17}} {
					for _, tB := range []bool{false, true} {
						tc := gemmCase{transB: tB, m: s[0], n: s[1], k: s[2], alpha: 0.5, beta: 2, padA: 3}
						runCase(t, tc)
						tc.batch, tc.beta = 2, 0
						runCase(t, tc)
					}
				}
			})
		}
	}
}

// TestSgemmPanels shrinks the panel budget so that op(B) is packed and
// multiplied in many column panels, each a phase of its own.
func TestSgemmPanels(t *testing.T) {
	prev := panelBudget
	panelBudget = 64 * 100
	t.Cleanup(func() { panelBudget = prev })
	for _, kern := range testKernels() {
		for _, threads := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/threads=%d", kern.name, threads), func(t *testing.T) {
				withKernel(t, kern)
				withThreads(t, threads)
				for tr := 0; tr < 4; tr++ {
					tc := gemmCase{transA: tr&1 != 0, transB: tr&2 != 0, m: 150, n: 333, k: 100, alpha: 1, beta: 0.5, padB: 1}
					runCase(t, tc)
					tc.batch = 3
					runCase(t, tc)
				}
			})
		}
	}
}

func TestSgemmScalars(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	for _, kern := range testKernels() {
		t.Run(kern.name, func(t *testing.T) {
			withKernel(t, kern)
			for _, alpha := range []float32{1, -1, 0.25, 3} {
				for _, beta := range []float32{0, negZero, 1, -1, 0.5} {
					for _, s := range [][3]int{{5, 6, 7}, {40, 70, 90}, {200, 100, 300}} {
						tc := gemmCase{transA: true, m: s[0], n: s[1], k: s[2], alpha: alpha, beta: beta, padC: 2}
						runCase(t, tc)
					}
				}
			}
		})
	}
}

// TestSgemmBetaZeroIgnoresC fills C with NaN: with beta 0 none may survive,
// whichever path (direct loop, serial, parallel, alpha = 0, k = 0) runs.
func TestSgemmBetaZeroIgnoresC(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		name    string
		m, n, k int
		alpha   float32
	}{
		{"tiny", 3, 4, 5, 1},
		{"serial", 30, 40, 50, 1},
		{"parallel", 200, 300, 100, 1},
		{"alpha0", 30, 40, 50, 0},
		{"k0", 30, 40, 0, 1},
	}
	for _, kern := range testKernels() {
		for _, tc := range cases {
			t.Run(kern.name+"/"+tc.name, func(t *testing.T) {
				withKernel(t, kern)
				rng := rand.New(rand.NewPCG(1, 1))
				a, b := randSlice(rng, tc.m*tc.k), randSlice(rng, tc.k*tc.n)
				c := make([]float32, tc.m*tc.n)
				for i := range c {
					c[i] = nan
				}
				want := make([]float32, len(c))
				sgemmRef(false, false, tc.m, tc.n, tc.k, tc.alpha, a, max(1, tc.k), b, tc.n, 0, want, tc.n)
				Sgemm(false, false, tc.m, tc.n, tc.k, tc.alpha, a, max(1, tc.k), b, tc.n, 0, c, tc.n)
				for i := range c {
					if d := math.Abs(float64(c[i] - want[i])); !(d <= tolerance(tc.k, 1, 0)) {
						t.Fatalf("C[%d] = %g, want %g", i, c[i], want[i])
					}
				}
			})
		}
	}
}

func TestSgemmBatched(t *testing.T) {
	cases := []gemmCase{
		{m: 64, n: 64, k: 32, batch: 12},                                // parallel over products
		{transB: true, m: 33, n: 65, k: 17, batch: 5, gapA: 3, gapC: 7}, // gaps between items
		{transA: true, m: 100, n: 50, k: 70, batch: 4, shareB: true},    // one B for all
		{m: 20, n: 30, k: 40, batch: 3, shareA: true, alpha: 2, beta: 0.5},
		{m: 400, n: 300, k: 200, batch: 2, beta: 1}, // each product split
		{m: 7, n: 7, k: 7, batch: 1},
	}
	for _, kern := range testKernels() {
		t.Run(kern.name, func(t *testing.T) {
			withKernel(t, kern)
			for _, tc := range cases {
				if tc.alpha == 0 {
					tc.alpha = 1
				}
				runCase(t, tc)
			}
		})
	}
}

// TestSgemmBatchedEmpty: no products, or empty ones, leave C alone.
func TestSgemmBatchedEmpty(t *testing.T) {
	c := []float32{1, 2, 3, 4}
	SgemmBatched(false, false, 0, 2, 2, 2, 1, nil, 4, 2, nil, 4, 2, 0, c, 4, 2)
	SgemmBatched(false, false, 2, 0, 2, 2, 1, nil, 0, 2, make([]float32, 8), 4, 2, 0, c, 0, 2)
	if c[0] != 1 || c[3] != 4 {
		t.Errorf("C changed to %v", c)
	}
	// k = 0: A and B are not read (here nil), C_i = beta*C_i.
	SgemmBatched(false, false, 2, 1, 2, 0, 1, nil, 5, 1, nil, 5, 2, 2, c, 2, 2)
	if want := []float32{2, 4, 6, 8}; !slices.Equal(c, want) {
		t.Errorf("k=0: C = %v, want %v", c, want)
	}
}

// TestSgemmConcurrentCallers runs products from several goroutines at once
// through the shared helper pool.
func TestSgemmConcurrentCallers(t *testing.T) {
	withThreads(t, 3)
	errs := make(chan string, 8)
	for w := 0; w < 4; w++ {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			tc := gemmCase{transB: w%2 == 1, m: 150 + w, n: 170, k: 120, alpha: 1}
			o := makeOperands(tc, rng)
			want := append([]float32(nil), o.c...)
			sgemmRef(tc.transA, tc.transB, tc.m, tc.n, tc.k, 1, o.a, o.lda, o.b, o.ldb, 0, want, o.ldc)
			msg := ""
			for rep := 0; rep < 5 && msg == ""; rep++ {
				got := append([]float32(nil), o.c...)
				Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, 1, o.a, o.lda, o.b, o.ldb, 0, got, o.ldc)
				for i := range got {
					if math.Abs(float64(got[i]-want[i])) > tolerance(tc.k, 1, 0) {
						msg = fmt.Sprintf("caller %d rep %d: C[%d] = %g, want %g", w, rep, i, got[i], want[i])
						break
					}
				}
			}
			errs <- msg
		}()
	}
	for w := 0; w < 4; w++ {
		if msg := <-errs; msg != "" {
			t.Error(msg)
		}
	}
}

func TestSgemmNoAllocs(t *testing.T) {
	withThreads(t, 2)
	rng := rand.New(rand.NewPCG(2, 2))
	a, b, c := randSlice(rng, 300*200), randSlice(rng, 200*250), make([]float32, 300*250)
	cases := []struct {
		name string
		f    func()
	}{
		{"serial", func() { Sgemm(false, true, 30, 25, 20, 1, a, 20, b, 20, 0, c, 25) }},
		{"parallel", func() { Sgemm(false, false, 300, 250, 200, 1, a, 200, b, 250, 0.5, c, 250) }},
		{"skinny", func() { Sgemm(false, true, 3, 250, 200, 1, a, 200, b, 200, 0, c, 250) }},
		{"skinny parallel", func() { Sgemm(false, false, 2, 250, 200, 1, a, 200, b, 250, 0, c, 250) }},
		{"batched", func() { SgemmBatched(false, true, 8, 30, 25, 40, 1, a, 1200, 40, b, 1000, 40, 0, c, 750, 25) }},
	}
	for _, tc := range cases {
		tc.f() // warm the free lists and start the helpers
		if n := testing.AllocsPerRun(20, tc.f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", tc.name, n)
		}
	}
}

func TestSetThreads(t *testing.T) {
	prev := SetThreads(3)
	t.Cleanup(func() { SetThreads(prev) })
	if got := Threads(); got != 3 {
		t.Errorf("after SetThreads(3), Threads() = %d", got)
	}
	if old := SetThreads(0); old != 3 {
		t.Errorf("SetThreads(0) returned %d, want the previous 3", old)
	}
	if got, want := Threads(), runtime.GOMAXPROCS(0); got != want {
		t.Errorf("after SetThreads(0), Threads() = %d, want GOMAXPROCS %d", got, want)
	}
}

func TestSgemmBadArguments(t *testing.T) {
	buf := make([]float32, 100)
	cases := []struct {
		name, want string
		f          func()
	}{
		{"negative m", "negative dimension", func() { Sgemm(false, false, -1, 2, 2, 1, buf, 2, buf, 2, 0, buf, 2) }},
		{"lda too small", "lda = 2 is less than the 3 columns of stored A", func() { Sgemm(false, false, 2, 2, 3, 1, buf, 2, buf, 2, 0, buf, 2) }},
		{"ldb too small transposed", "ldb = 1 is less than the 3 columns of stored B (transB=true)", func() { Sgemm(false, true, 2, 2, 3, 1, buf, 3, buf, 1, 0, buf, 2) }},
		{"ldc too small", "ldc = 1 is less than the 2 columns of stored C", func() { Sgemm(false, false, 2, 2, 3, 1, buf, 3, buf, 2, 0, buf, 1) }},
		{"a too short", "len(a) = 100, need 110", func() { Sgemm(false, false, 11, 2, 10, 1, buf, 10, buf, 2, 0, buf, 2) }},
		{"c too short", "len(c) = 10, need 12", func() { Sgemm(false, false, 3, 4, 2, 1, buf, 2, buf, 4, 0, buf[:10], 4) }},
		{"batch C overlap", "strideC = 4 makes the 2×3 products' C overlap", func() {
			SgemmBatched(false, false, 2, 2, 3, 2, 1, buf, 4, 2, buf, 6, 3, 0, buf, 4, 3)
		}},
		{"batch too short", "len(b) = 100, need 106", func() {
			SgemmBatched(false, false, 11, 2, 3, 2, 1, buf, 0, 2, buf, 10, 3, 0, make([]float32, 100), 6, 3)
		}},
		{"negative batch", "batch = -1", func() { SgemmBatched(false, false, -1, 2, 2, 2, 1, buf, 4, 2, buf, 4, 2, 0, buf, 4, 2) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.Contains(msg, tc.want) {
					t.Errorf("panic %q, want one containing %q", r, tc.want)
				}
			}()
			tc.f()
		})
	}
}

func TestTranspose(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	src := randSlice(rng, 40*70)
	for _, kern := range testKernels() {
		for _, rows := range []int{1, 3, 4, 5, 8, 11, 12, 13, 16, 32} {
			for _, n := range []int{1, 3, 4, 7, 8, 9, 16, 33, 64} {
				ldd := rows + 3
				got := make([]float32, n*ldd)
				want := make([]float32, n*ldd)
				kern.transpose(got, ldd, src, 70, rows, n)
				transposeGo(want, ldd, src, 70, rows, n)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s rows=%d n=%d: dst[%d] = %g, want %g", kern.name, rows, n, i, got[i], want[i])
					}
				}
				if got[0] != src[0] || got[(n-1)*ldd+rows-1] != src[(rows-1)*70+n-1] {
					t.Fatalf("%s rows=%d n=%d: corners not transposed", kern.name, rows, n)
				}
			}
		}
	}
}

func TestStridedCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := randSlice(rng, 50*40)
	for _, kern := range testKernels() {
		for _, width := range []int{1, 4, 6, 11, 12, 13, 16, 31, 32} {
			for _, count := range []int{1, 2, 7, 49} {
				ldd := width + 5
				got := make([]float32, count*ldd)
				want := make([]float32, count*ldd)
				kern.copy(got, ldd, src, 40, width, count)
				copyStridedGo(want, ldd, src, 40, width, count)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s width=%d count=%d: dst[%d] = %g, want %g", kern.name, width, count, i, got[i], want[i])
					}
				}
				if got[(count-1)*ldd+width-1] != src[(count-1)*40+width-1] {
					t.Fatalf("%s width=%d count=%d: last element not copied", kern.name, width, count)
				}
			}
		}
	}
}

// TestSgemmSerial checks that SgemmSerial gives Sgemm's one-thread result
// bit for bit, whatever the thread setting, and checks its arguments.
func TestSgemmSerial(t *testing.T) {
	withThreads(t, 3)
	rng := rand.New(rand.NewPCG(7, 7))
	for _, s := range []struct {
		ta, tb  bool
		m, n, k int
	}{{false, true, 192, 256, 64}, {true, false, 256, 64, 192}, {false, false, 300, 70, 500}} {
		lda, ldb := s.k, s.n
		if s.ta {
			lda = s.m
		}
		if s.tb {
			ldb = s.k
		}
		a, b, c0 := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n), randSlice(rng, s.m*s.n)
		got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
		SgemmSerial(s.ta, s.tb, s.m, s.n, s.k, 0.5, a, lda, b, ldb, 1, got, s.n)
		SetThreads(1)
		Sgemm(s.ta, s.tb, s.m, s.n, s.k, 0.5, a, lda, b, ldb, 1, want, s.n)
		SetThreads(3)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%+v: c[%d] = %v, want %v", s, i, got[i], want[i])
			}
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "SgemmSerial") {
			t.Errorf("short C: panic %v, want one naming SgemmSerial", r)
		}
	}()
	SgemmSerial(false, false, 4, 4, 4, 1, make([]float32, 16), 4, make([]float32, 16), 4, 0, make([]float32, 15), 4)
}
