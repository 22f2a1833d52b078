package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
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

func runCase(t *testing.T, tc gemmCase, rng *rand.Rand) {
	t.Helper()
	o := makeOperands(tc, rng)
	want := append([]float32(nil), o.c...)
	got := append([]float32(nil), o.c...)
	if tc.batch == 0 {
		sgemmRef(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, want, o.ldc)
		Sgemm(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, got, o.ldc)
	} else {
		for bi := 0; bi < tc.batch; bi++ {
			sgemmRef(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, o.a[bi*o.strideA:], o.lda, o.b[bi*o.strideB:], o.ldb, tc.beta, want[bi*o.strideC:], o.ldc)
		}
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
			rng := rand.New(rand.NewPCG(1, 2))
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					for _, m := range edgeSizes {
						for _, n := range edgeSizes {
							for _, k := range edgeSizes {
								tc := gemmCase{transA: tA, transB: tB, m: m, n: n, k: k, alpha: 1, beta: 0}
								runCase(t, tc, rng)
							}
						}
					}
				}
			}
		})
	}
}
