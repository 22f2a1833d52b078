// Package cpu is the pure-Go reference implementation of backend.Backend.
// Tensors are []float32 in host memory; matrix products go through
// learner/blas.Sgemm and the other kernels split their rows, heads or
// elements across all cores with goroutines. Every later backend is checked
// against this one, so its kernels favour plain, readable loops.
package cpu

import (
	"fmt"
	"runtime"
	"sync"

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

func (*Backend) Zero(t backend.Tensor) { clear(f(t)) }

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

// parallel runs fn over [0, n) split into contiguous chunks, one per worker,
// and returns when all are done. Chunks hold at least grain items so tiny
// loops stay on one goroutine.
func (b *Backend) parallel(n, grain int, fn func(lo, hi int)) {
	w := b.Workers
	if w < 1 {
		w = 1
	}
	if grain < 1 {
		grain = 1
	}
	if m := (n + grain - 1) / grain; m < w {
		w = m
	}
	if w <= 1 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	var wg sync.WaitGroup
	chunk := (n + w - 1) / w
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
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
	b.parallel(rows, max(1, elemGrain/max(cols, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := X[r*cols : (r+1)*cols]
			for j := range row {
				row[j] += V[j]
			}
		}
	})
}

func (b *Backend) SumRows(dst, x backend.Tensor, rows, cols int) {
	D, X := f(dst), f(x)
	// Columns are independent: split them so no two workers write alike.
	b.parallel(cols, 64, func(lo, hi int) {
		for r := 0; r < rows; r++ {
			row := X[r*cols : (r+1)*cols]
			for j := lo; j < hi; j++ {
				D[j] += row[j]
			}
		}
	})
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
		d := D[int(r)*cols : (int(r)+1)*cols]
		for j, v := range S[i*cols : (i+1)*cols] {
			d[j] += v
		}
	}
}
