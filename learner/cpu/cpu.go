// Package cpu is the pure-Go reference implementation of backend.Backend.
// Tensors are []float32 in host memory; matrix products go through
// learner/blas.Sgemm, and the other kernels split their rows, heads or
// elements into chunks that all cores claim from a shared counter.
//
// The element-wise inner loops the kernels spend their time in (exp for
// softmax, SiLU and log-probabilities, RMSNorm rows, RoPE, row sums) live in
// vec.go as plain Go, the reference, with AVX-512 versions in
// vec_amd64.s chosen at start-up where the CPU has them; tests check each
// against its Go twin and rerun the kernel tests on the Go path. Attention
// stacks the query heads that share a kv head so that each query block is
// a few large products rather than many small ones.
//
// Not done yet: an AVX2 version of the vector loops (CPUs without AVX-512
// take the Go loops), and fusing the q/k/v and gate/up projections into
// single products.
package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/blas"
)

// Tensor is a CPU tensor: a plain float32 slice.
type Tensor []float32

// Len is the number of elements.
func (t Tensor) Len() int { return len(t) }

// Backend runs kernels on the host CPU with Workers goroutines.
type Backend struct {
	Workers int
	mu      sync.Mutex
	ropes   map[ropeKey]*ropeTable
	// Buffers reused between calls, each under a lock taken with TryLock.
	scratchMu sync.Mutex
	work      [][]float32 // per-worker scratch (scratch)
	partsMu   sync.Mutex
	parts     []float32 // per-chunk partial sums (partials)
}

// New returns a backend using all cores (GOMAXPROCS).
func New() *Backend {
	return &Backend{Workers: runtime.GOMAXPROCS(0), ropes: map[ropeKey]*ropeTable{}}
}

var _ backend.Backend = (*Backend)(nil)
var _ backend.HostMemory = (*Backend)(nil)

func (*Backend) Name() string { return "cpu" }

// f unwraps a backend tensor; a foreign tensor is a programming error.
func f(t backend.Tensor) []float32 {
	if t == nil {
		return nil
	}
	c, ok := t.(Tensor)
	if !ok {
		panic(fmt.Sprintf("cpu backend: foreign tensor %T", t))
	}
	return c
}

// Host returns the tensor's storage.
func (*Backend) Host(t backend.Tensor) []float32 { return f(t) }

func (*Backend) Alloc(n int) backend.Tensor { return Tensor(make([]float32, n)) }
func (*Backend) Free(backend.Tensor)        {}

func (*Backend) Upload(dst backend.Tensor, src []float32) {
	d := f(dst)
	mustLen("Upload", len(d), len(src))
	copy(d, src)
}

func (*Backend) Download(dst []float32, src backend.Tensor) {
	s := f(src)
	mustLen("Download", len(dst), len(s))
	copy(dst, s)
}

func (b *Backend) Zero(t backend.Tensor) {
	d := f(t)
	b.parallel(len(d), 1<<16, func(lo, hi int) { clear(d[lo:hi]) })
}

func (*Backend) Copy(dst, src backend.Tensor) {
	d, s := f(dst), f(src)
	mustLen("Copy", len(d), len(s))
	copy(d, s)
}

func mustLen(op string, a, b int) {
	if a != b {
		panic(fmt.Sprintf("cpu backend: %s: length %d != %d", op, a, b))
	}
}

// chunksPerWorker over-decomposes parallel loops: workers claim chunks
// from a shared counter, so a core slowed by other load leaves its
// remaining chunks to the others instead of holding everyone up.
const chunksPerWorker = 4

// chunks is the number of pieces parallel cuts n items into: at most
// chunksPerWorker per worker, each at least grain items, so tiny loops stay
// on one goroutine.
func (b *Backend) chunks(n, grain int) int {
	w := max(b.Workers, 1)
	grain = max(grain, 1)
	return min((n+grain-1)/grain, w*chunksPerWorker)
}

// parallel runs fn over [0, n) cut into b.chunks(n, grain) contiguous
// chunks and returns when all are done.
func (b *Backend) parallel(n, grain int, fn func(lo, hi int)) {
	b.parallelChunks(n, grain, func(_, _, lo, hi int) { fn(lo, hi) })
}

// parallelChunks is parallel telling fn which worker (0 ≤ worker <
// Workers, never two goroutines at once) runs which chunk (in [0,
// b.chunks(n, grain))), for per-worker scratch buffers and per-chunk
// partial results.
func (b *Backend) parallelChunks(n, grain int, fn func(worker, chunk, lo, hi int)) {
	nc := b.chunks(n, grain)
	if nc <= 1 {
		if n > 0 {
			fn(0, 0, 0, n)
		}
		return
	}
	var next atomic.Int64
	run := func(worker int) {
		for {
			c := int(next.Add(1) - 1)
			if c >= nc {
				return
			}
			fn(worker, c, c*n/nc, (c+1)*n/nc)
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < min(b.Workers, nc); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(w)
		}()
	}
	run(0)
	wg.Wait()
}

// scratch returns Workers buffers of at least n floats each, with
// unspecified contents, and the function that hands them back. They are
// kept between calls; a call that finds them in use (a Backend shared by
// goroutines against its contract) gets fresh ones rather than a data race.
func (b *Backend) scratch(n int) ([][]float32, func()) {
	w := max(b.Workers, 1)
	if !b.scratchMu.TryLock() {
		bufs := make([][]float32, w)
		for i := range bufs {
			bufs[i] = make([]float32, n)
		}
		return bufs, func() {}
	}
	if len(b.work) != w {
		b.work = make([][]float32, w)
	}
	for i := range b.work {
		if len(b.work[i]) < n {
			b.work[i] = make([]float32, n)
		}
	}
	return b.work, b.scratchMu.Unlock
}

// partials returns n zeroed floats for per-chunk partial sums and the
// function that hands them back, on the same terms as scratch.
func (b *Backend) partials(n int) ([]float32, func()) {
	if !b.partsMu.TryLock() {
		return make([]float32, n), func() {}
	}
	if len(b.parts) < n {
		b.parts = make([]float32, n)
	}
	p := b.parts[:n]
	clear(p)
	return p, b.partsMu.Unlock
}

// MatMul calls blas.Sgemm, which splits large products over its own
// goroutine pool.
func (b *Backend) MatMul(transA, transB bool, m, n, k int, alpha float32, a, bb backend.Tensor, beta float32, c backend.Tensor) {
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	blas.Sgemm(transA, transB, m, n, k, alpha, f(a), lda, f(bb), ldb, beta, f(c), n)
}

func (b *Backend) BatchedMatMul(transA, transB bool, m, n, k int, alpha float32, a backend.Tensor, lda, strideA int, bb backend.Tensor, ldb, strideB int, beta float32, c backend.Tensor, ldc, strideC int, batch int) {
	blas.SgemmBatched(transA, transB, batch, m, n, k, alpha, f(a), strideA, lda, f(bb), strideB, ldb, beta, f(c), strideC, ldc)
}

const elemGrain = 1 << 14

func (b *Backend) Add(dst, x, y backend.Tensor) {
	d, a, c := f(dst), f(x), f(y)
	mustLen("Add", len(d), len(a))
	mustLen("Add", len(d), len(c))
	b.parallel(len(d), elemGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] = a[i] + c[i]
		}
	})
}

func (b *Backend) AddScaled(dst backend.Tensor, alpha float32, x backend.Tensor) {
	d, a := f(dst), f(x)
	mustLen("AddScaled", len(d), len(a))
	b.parallel(len(d), elemGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] += alpha * a[i]
		}
	})
}

func (b *Backend) Scale(t backend.Tensor, alpha float32) {
	d := f(t)
	b.parallel(len(d), elemGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] *= alpha
		}
	})
}

func (b *Backend) Mul(dst, x, y backend.Tensor) {
	d, a, c := f(dst), f(x), f(y)
	mustLen("Mul", len(d), len(a))
	mustLen("Mul", len(d), len(c))
	b.parallel(len(d), elemGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] = a[i] * c[i]
		}
	})
}

func (b *Backend) AddRowVector(x, v backend.Tensor, rows, cols int) {
	X, V := f(x), f(v)
	V = V[:cols]
	b.parallel(rows, max(1, elemGrain/max(cols, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			addTo(X[r*cols:(r+1)*cols], V)
		}
	})
}

func (b *Backend) SumRows(dst, x backend.Tensor, rows, cols int) {
	D, X := f(dst), f(x)
	// Each chunk of rows sums into its own partial row; the partials are
	// added in chunk order (the same result whichever worker ran which).
	grain := max(1, elemGrain/max(cols, 1))
	nc := b.chunks(rows, grain)
	parts, done := b.partials(nc * cols)
	defer done()
	b.parallelChunks(rows, grain, func(_, c, lo, hi int) {
		part := parts[c*cols : (c+1)*cols]
		for r := lo; r < hi; r++ {
			addTo(part, X[r*cols:(r+1)*cols])
		}
	})
	D = D[:cols]
	for c := 0; c < nc; c++ {
		addTo(D, parts[c*cols:(c+1)*cols])
	}
}

func (b *Backend) GatherRows(dst, src backend.Tensor, idx []int32, cols int) {
	D, S := f(dst), f(src)
	mustLen("GatherRows", len(D), len(idx)*cols)
	b.parallel(len(idx), max(1, elemGrain/max(cols, 1)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			r := int(idx[i])
			copy(D[i*cols:(i+1)*cols], S[r*cols:(r+1)*cols])
		}
	})
}

// ScatterAddRows runs serially: several i may share a destination row.
func (*Backend) ScatterAddRows(dst, src backend.Tensor, idx []int32, cols int) {
	D, S := f(dst), f(src)
	mustLen("ScatterAddRows", len(S), len(idx)*cols)
	for i, r := range idx {
		addTo(D[int(r)*cols:(int(r)+1)*cols], S[i*cols:(i+1)*cols])
	}
}
