package cuda

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/rlnode/rlnode/learner/blas"
)

func upload(t *testing.T, d Accel, x []float32) Ptr {
	t.Helper()
	p, err := d.Malloc(4 * int64(max(len(x), 1)))
	must(t, err)
	must(t, d.ToDevice(p, f32Bytes(x)))
	return p
}

func uploadBF16(t *testing.T, d Accel, x []uint16) Ptr {
	t.Helper()
	p, err := d.Malloc(2 * int64(max(len(x), 1)))
	must(t, err)
	must(t, d.ToDevice(p, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 2*len(x))))
	return p
}

// TestAccelGemm checks the device's matrix products against learner/blas
// for every transpose, padded leading dimensions, strided batches, beta 0
// (C not read: it holds NaN) and beta 1, fp32 and bf16 operands.
func TestAccelGemm(t *testing.T) {
	for name, d := range accels(t) {
		t.Run(name, func(t *testing.T) { accelGemm(t, name, d) })
	}
}

// accelGemm is TestAccelGemm on d.
func accelGemm(t *testing.T, name string, d Accel) {
	for _, in := range []DType{F32, BF16} {
		for _, tc := range []struct {
			tA, tB  bool
			batch   int
			beta    float32
			m, n, k int
		}{
			{false, false, 1, 0, 5, 7, 9}, {true, false, 1, 1, 6, 3, 4}, {false, true, 3, 0, 4, 5, 6}, {true, true, 2, 1, 3, 8, 5},
		} {
			rng := rand.New(rand.NewPCG(uint64(tc.m), uint64(tc.n)))
			aRows, aCols, bRows, bCols := tc.m, tc.k, tc.k, tc.n
			if tc.tA {
				aRows, aCols = aCols, aRows
			}
			if tc.tB {
				bRows, bCols = bCols, bRows
			}
			lda, ldb, ldc := aCols+2, bCols+1, tc.n+3
			sa, sb, sc := aRows*lda+5, bRows*ldb, tc.m*ldc+1
			a, b, c := randn(rng, tc.batch*sa, 1), randn(rng, tc.batch*sb, 1), randn(rng, tc.batch*sc, 1)
			if in == BF16 {
				roundBF16(a)
				roundBF16(b)
			}
			want := clone(c)
			blas.SgemmBatched(tc.tA, tc.tB, tc.batch, tc.m, tc.n, tc.k, 0.5, a, sa, lda, b, sb, ldb, tc.beta, want, sc, ldc)
			if tc.beta == 0 {
				for i := range c {
					c[i] = float32(math.NaN())
				}
			}
			var pa, pb Ptr
			if in == F32 {
				pa, pb = upload(t, d, a), upload(t, d, b)
			} else {
				pa, pb = uploadBF16(t, d, toBF16(a)), uploadBF16(t, d, toBF16(b))
			}
			pc := upload(t, d, c)
			must(t, d.Gemm(Gemm{TransA: tc.tA, TransB: tc.tB, M: tc.m, N: tc.n, K: tc.k, Alpha: 0.5, Beta: tc.beta, In: in,
				A: pa, LDA: lda, StrideA: int64(sa), B: pb, LDB: ldb, StrideB: int64(sb), C: pc, LDC: ldc, StrideC: int64(sc), Batch: tc.batch}))
			got := make([]float32, len(c))
			must(t, d.ToHost(f32Bytes(got), pc))
			// Only the product's elements are compared: padding keeps
			// what C held (NaN with beta 0).
			var g, w []float32
			for bi := 0; bi < tc.batch; bi++ {
				for i := 0; i < tc.m; i++ {
					o := bi*sc + i*ldc
					g, w = append(g, got[o:o+tc.n]...), append(w, want[o:o+tc.n]...)
				}
			}
			near(t, name+" gemm "+in.String(), g, w, tol{rel: 1e-5, abs: 1e-6})
			for _, p := range []Ptr{pa, pb, pc} {
				must(t, d.MemFree(p))
			}
		}
	}
}

// TestEmuDeviceBounds: a copy, product or launch that leaves its
// allocation fails with an error instead of touching other memory.
func TestEmuDeviceBounds(t *testing.T) {
	d, err := OpenEmuDevice("")
	must(t, err)
	p, err := d.Malloc(64)
	must(t, err)
	buf := make([]byte, 600)
	for _, err := range []error{
		d.ToDevice(p+32, buf[:256-32+1]),
		d.ToHost(buf, p+1024),
		d.Copy(p, p+200, 100),
		d.Zero(p-8, 8),
		d.Gemm(Gemm{M: 16, N: 16, K: 16, Alpha: 1, A: p, LDA: 16, B: p, LDB: 16, C: p, LDC: 16, Batch: 1}),
		d.Launch("scale_f32", D1(1), D1(32), p, float32(2), int64(16)),
		d.MemFree(p + 4),
	} {
		if err == nil {
			t.Error("an out-of-bounds operation succeeded")
		} else if !strings.Contains(err.Error(), "emulated device") && !strings.Contains(err.Error(), "kernel library") {
			t.Errorf("unexpected error: %v", err)
		}
	}
}

func TestGemmExtentAndAlignment(t *testing.T) {
	for _, c := range []struct {
		g                  Gemm
		aExt, bExt, cExt   int64
		aRows, aCols, bRow int
	}{
		{Gemm{M: 2, N: 3, K: 4, LDA: 4, LDB: 3, LDC: 3, Batch: 1}, 8, 12, 6, 2, 4, 4},
		{Gemm{TransA: true, M: 2, N: 3, K: 4, LDA: 5, LDB: 3, LDC: 3, Batch: 1}, 17, 12, 6, 4, 2, 4},
		{Gemm{TransB: true, M: 2, N: 3, K: 4, LDA: 4, LDB: 4, LDC: 3, StrideA: 10, StrideB: 20, StrideC: 7, Batch: 3}, 28, 52, 20, 2, 4, 3},
	} {
		aRows, aCols, bRows, _, aExt, bExt, cExt := c.g.operands()
		if aExt != c.aExt || bExt != c.bExt || cExt != c.cExt || aRows != c.aRows || aCols != c.aCols || bRows != c.bRow {
			t.Errorf("%+v: A %dx%d, B rows %d, extents %d %d %d; want %dx%d, %d, %d %d %d", c.g, aRows, aCols, bRows, aExt, bExt, cExt, c.aRows, c.aCols, c.bRow, c.aExt, c.bExt, c.cExt)
		}
		if err := c.g.check(); err != nil {
			t.Errorf("%+v: %v", c.g, err)
		}
	}
	for _, bad := range []Gemm{{M: 2, N: 3, K: 4, LDA: 3, LDB: 3, LDC: 3, Batch: 1}, {M: 2, N: 3, K: 4, LDA: 4, LDB: 3, LDC: 3}, {M: -1, LDA: 1, LDB: 1, LDC: 1, Batch: 1}} {
		if bad.check() == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
	for p, want := range map[Ptr]uint32{0x1000: 256, 0x1004: 4, 0x1010: 16, 0x1102: 2} {
		if got := alignment(p); got != want {
			t.Errorf("alignment(%#x) = %d, want %d", uint64(p), got, want)
		}
	}
	// The alignments promised to cuBLASLt (B, A, C, D) hold for every
	// matrix of a batch, not only the first.
	for _, c := range []struct {
		g    Gemm
		want [4]uint32
	}{
		{Gemm{M: 2, N: 3, K: 4, A: 0x1000, B: 0x2000, C: 0x3000, Batch: 1}, [4]uint32{256, 256, 256, 256}},
		{Gemm{M: 2, N: 3, K: 4, A: 0x1000, B: 0x2000, C: 0x3010, Batch: 1, StrideA: 3}, [4]uint32{256, 256, 16, 16}},
		{Gemm{M: 2, N: 3, K: 4, A: 0x1000, B: 0x2000, C: 0x3000, Batch: 2, StrideA: 12, StrideB: 6, StrideC: 6}, [4]uint32{8, 16, 8, 8}},
		{Gemm{M: 2, N: 3, K: 4, In: BF16, A: 0x1000, B: 0x2000, C: 0x3000, Batch: 2, StrideA: 12, StrideB: 5, StrideC: 64}, [4]uint32{2, 8, 256, 256}},
		{Gemm{M: 2, N: 3, K: 4, In: BF16, A: 0x1004, B: 0x2000, C: 0x3000, Batch: 4, StrideA: 64, StrideB: 0, StrideC: 6}, [4]uint32{256, 4, 8, 8}},
	} {
		if got := gemmKey(c.g).align; got != c.want {
			t.Errorf("%+v: alignments %v, want %v", c.g, got, c.want)
		}
	}
}
